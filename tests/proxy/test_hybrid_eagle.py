"""EAGLE and hybrid through the proxy, in front of the real reference worker (the embedded one): the proxy offers
what the worker reports, a static hybrid policy sends hybrid, greedy output is byte-identical to plain
decoding, and the hybrid's lookup share (`usage.speculative.lookup_drafts`) becomes its propose-rate estimate."""

from __future__ import annotations

import pytest

from adaptspec.control.alpha import _PROPOSE_PRIOR_STEPS

from .conftest import metric

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# a copy-heavy prompt: the tiny target restates the function, so lookup serves some steps and the head others
PROMPT = ("Fix the typo in this function and return the whole function.\n\n"
          "def total_price(items, tax):\n    subtotal = sum(item.price * item.qty for item in items)\n"
          "    taxes = subtotal * tax\n    return subtotl + taxes\n")


def test_hybrid_and_eagle_through_the_proxy_are_greedy_identical_to_none(proxies):
    px = proxies({"policy": {"kind": "static", "proposer": "hybrid", "gamma": 4},
                  "server": {"allow_client_speculation": True}}, timeout=180)
    assert "proposers ngram, draft, eagle, hybrid" in px.log()  # what the worker reported on /health
    client = px.client(timeout=120)
    msgs = [{"role": "user", "content": PROMPT}]

    def ask(spec: dict | None):
        extra = {"speculation": spec} if spec is not None else {}
        r = client.chat.completions.with_raw_response.create(model="tiny", max_tokens=48, temperature=0,
                                                             messages=msgs, extra_body=extra)
        return r.headers, r.parse()

    h, hybrid = ask(None)  # the policy's choice
    assert (h["x-adaptspec-proposer"], h["x-adaptspec-gamma"]) == ("hybrid", "4")
    _, plain = ask({"proposer": "none", "num_speculative_tokens": 0})
    he, eagle = ask({"proposer": "eagle", "num_speculative_tokens": 3})
    assert he["x-adaptspec-proposer"] == "eagle"
    text = plain.choices[0].message.content
    assert text and hybrid.choices[0].message.content == text and eagle.choices[0].message.content == text
    assert plain.usage.model_extra["speculative"]["draft_tokens"] == 0

    spec = hybrid.usage.model_extra["speculative"]
    lookups, drafts = spec["lookup_drafts"], spec["drafts"]
    assert 0 < lookups < drafts  # both parts drafted
    assert "lookup_drafts" not in eagle.usage.model_extra["speculative"]
    assert "by_source" not in eagle.usage.model_extra["speculative"]
    # the per-step hybrid's report split by source (cpu-tiny prices it `stepwise`): its lookup steps teach the
    # hybrid key (propose rate: lookup steps per output position covered, shrunk toward 0 by the prior's
    # pseudo-steps), its head's steps the eagle key
    lk, head = spec["by_source"]["ngram"], spec["by_source"]["eagle"]
    assert lk["drafts"] == lookups and head["drafts"] == drafts - lookups
    # ... and so do the rule's lookup steps walked along the other two requests' output (their hybrid shadow)
    shadows = [r.usage.model_extra["speculative"]["shadow"]["hybrid"] for r in (plain, eagle)]
    assert "hybrid" not in spec.get("shadow", {})
    cls = h["x-adaptspec-class"]
    key = {"worker": "embedded-0", "proposer": "hybrid", "content_class": cls}
    want = (lk["drafts"] + sum(sh["drafts"] for sh in shadows)) / (
        lk["steps"] + sum(sh["steps"] for sh in shadows) + _PROPOSE_PRIOR_STEPS)
    assert metric(px.metrics(), "adaptspec_propose_rate_estimate", **key) == pytest.approx(want, rel=1e-2)
    # the eagle key learned from two reports: the EAGLE request's and the hybrid request's head steps
    reports = metric(px.metrics(), "adaptspec_alpha_estimate_reports", worker="embedded-0", proposer="eagle",
                     content_class=cls)
    assert reports == pytest.approx(2.0, abs=0.01)


def test_every_proposer_through_the_proxy_is_greedy_identical_to_none(proxies):
    """none / ngram / draft / eagle / hybrid (at two gammas; the hybrid at the worker's default price) through the
    proxy to the real worker: the same text, and each ran what was asked. (Across schedules:
    test_schedules.py.)"""
    px = proxies({"policy": {"kind": "static", "proposer": "none", "gamma": 0},
                  "server": {"allow_client_speculation": True}}, timeout=180)
    client = px.client(timeout=120)
    msgs = [{"role": "user", "content": PROMPT}]
    texts, ran = {}, {}
    for proposer in ("none", "ngram", "draft", "eagle", "hybrid"):
        for k in ((0,) if proposer == "none" else (2, 4)):
            r = client.chat.completions.with_raw_response.create(
                model="tiny", max_tokens=40, temperature=0, messages=msgs,
                extra_body={"speculation": {"proposer": proposer, "num_speculative_tokens": k}})
            out = r.parse()
            texts[proposer, k] = out.choices[0].message.content
            ran[proposer, k] = (r.headers["x-adaptspec-proposer"], int(r.headers["x-adaptspec-gamma"]))
            if k:
                assert out.usage.model_extra["speculative"]["draft_tokens"] > 0, (proposer, k)
    assert ran == {key: key for key in texts}
    assert texts[("none", 0)] and set(texts.values()) == {texts[("none", 0)]}, texts
