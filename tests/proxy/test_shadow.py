"""Shadow n-gram evidence through the proxy, in front of the real reference worker (the embedded one): a request
served without lookup carries `usage.speculative.shadow.ngram`, and the proxy counts it into the worker's
n-gram key for the request's class and sampling regime, exactly like a lookup request's own counts."""

from __future__ import annotations

import pytest

from adaptspec.control.alpha import _PROPOSE_PRIOR_STEPS, prior_alpha

from .conftest import metric

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROMPT = ("Fix the typo in this function and return the whole function.\n\n"
          "def total_price(items, tax):\n    subtotal = sum(item.price * item.qty for item in items)\n"
          "    taxes = subtotal * tax\n    return subtotl + taxes\n")
PRIOR_STRENGTH = 20.0  # estimator.prior.strength's default


def test_a_request_without_lookup_teaches_the_lookup_key(proxies):
    px = proxies({"policy": {"kind": "static", "proposer": "none", "gamma": 0}}, timeout=180)
    client = px.client(timeout=120)
    msgs = [{"role": "user", "content": PROMPT}]
    r = client.chat.completions.with_raw_response.create(model="tiny", max_tokens=48, temperature=0, messages=msgs)
    out, cls = r.parse(), r.headers["x-adaptspec-class"]
    assert r.headers["x-adaptspec-proposer"] == "none"
    spec = out.usage.model_extra["speculative"]
    assert spec["draft_tokens"] == 0
    sh = spec["shadow"]["ngram"]
    trials, succ = sum(sh["tried_per_position"]), sh["accepted_tokens"]
    # the walk's steps are those a lookup request would take (fewer than the 48 this one took); its prefill
    # step never drafts
    assert 0 < sh["drafts"] < sh["steps"] < spec["steps"]
    assert 0 < succ < trials  # the lookup both hit and missed on this prompt
    key = {"worker": "embedded-0", "proposer": "ngram", "content_class": cls}
    m0 = prior_alpha("ngram", cls)
    text = px.metrics()
    assert metric(text, "adaptspec_alpha_estimate", **key) == pytest.approx(
        (succ + PRIOR_STRENGTH * m0) / (trials + PRIOR_STRENGTH), rel=1e-3)
    assert metric(text, "adaptspec_propose_rate_estimate", **key) == pytest.approx(
        (sh["drafts"] + _PROPOSE_PRIOR_STEPS) / (sh["steps"] + _PROPOSE_PRIOR_STEPS), rel=1e-3)
    shadow_key = {"worker": "embedded-0", "content_class": cls}
    assert metric(text, "adaptspec_shadow_draft_tokens_total", **shadow_key) == sh["draft_tokens"]
    assert metric(text, "adaptspec_shadow_accepted_tokens_total", **shadow_key) == succ
    # no other key learnt anything: the request drafted nothing
    assert metric(text, "adaptspec_draft_tokens_total") in (None, 0.0)

    # a sampled request teaches the sampled regime's key, not the greedy one
    greedy_before = metric(text, "adaptspec_alpha_estimate", **key)
    sampled_before = metric(text, "adaptspec_alpha_estimate_sampled", **key)
    r2 = client.chat.completions.with_raw_response.create(model="tiny", max_tokens=48, temperature=1.0, seed=3,
                                                          messages=msgs)
    sh2 = r2.parse().usage.model_extra["speculative"]["shadow"]["ngram"]
    text = px.metrics()
    # (1e-3: time-based forgetting moves an estimate a little between two reads)
    assert metric(text, "adaptspec_alpha_estimate", **key) == pytest.approx(greedy_before, rel=1e-3)
    # the sampled key had no data: its prior is the greedy estimate x the sampled factor, which it showed before
    assert metric(text, "adaptspec_alpha_estimate_sampled", **key) == pytest.approx(
        (sh2["accepted_tokens"] + PRIOR_STRENGTH * sampled_before) / (sum(sh2["tried_per_position"]) + PRIOR_STRENGTH),
        rel=1e-3)

    # a stream is counted too (its usage chunk carries the shadow, the client did not ask for usage)
    before = metric(text, "adaptspec_shadow_draft_tokens_total", **shadow_key)
    stream = client.chat.completions.create(model="tiny", max_tokens=48, temperature=0, messages=msgs, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == out.choices[0].message.content
    assert metric(px.metrics(), "adaptspec_shadow_draft_tokens_total", **shadow_key) == before + sh["draft_tokens"]


def test_a_lookup_request_carries_no_ngram_shadow(proxies):
    """A lookup request is not scored for lookup again; it is for the per-step hybrid's lookup steps, and a hybrid
    request is not (the worker offers both)."""
    px = proxies({"policy": {"kind": "static", "proposer": "ngram", "gamma": 4},
                  "server": {"allow_client_speculation": True}}, timeout=180)
    client = px.client(timeout=120)
    out = client.chat.completions.create(
        model="tiny", max_tokens=24, temperature=0, messages=[{"role": "user", "content": PROMPT}])
    spec = out.usage.model_extra["speculative"]
    assert spec["draft_tokens"] > 0 and set(spec["shadow"]) == {"hybrid"}
    out = client.chat.completions.create(
        model="tiny", max_tokens=24, temperature=0, messages=[{"role": "user", "content": PROMPT}],
        extra_body={"speculation": {"proposer": "hybrid", "num_speculative_tokens": 4}})
    spec = out.usage.model_extra["speculative"]
    assert spec["draft_tokens"] > 0 and set(spec["shadow"]) == {"ngram"} and "by_source" in spec
