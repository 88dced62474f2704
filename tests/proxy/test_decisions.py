"""Decisions follow live load, and alpha estimates follow acceptance feedback (default goodput policy)."""

from __future__ import annotations

import pytest

from .conftest import eventually, metric, pool

pytestmark = pytest.mark.integration

CODE = [{"role": "user", "content": "def add(a, b):\n    return a + b\n# write a docstring for this"}]
FAST = {"scrape_interval_s": 0.05}


def _ask(client, model="tiny"):
    raw = client.chat.completions.with_raw_response.create(model=model, messages=CODE, max_tokens=8,
                                                           temperature=0)  # greedy: adaptspec_alpha_estimate
    raw.parse()
    return raw.headers


def test_saturated_worker_turns_speculation_off_and_back_on(upstreams, proxies):
    # A GPU profile: there a full batch is compute-bound and speculation must stop. (The tiny pair on this
    # CPU never gets there below batch ~128: attention over the context dominates its big-batch steps.)
    up = upstreams("w0")
    px = proxies({"pools": [pool("spec", [up], profile="h200-llama3-70b")], "server": FAST})
    client = px.client()
    h = _ask(client)
    assert h["x-adaptspec-proposer"] != "none" and int(h["x-adaptspec-gamma"]) > 0

    up.set(running_offset=256)  # the worker now reports a 256-request running batch on /metrics
    eventually(lambda: metric(px.metrics(), "adaptspec_worker_running", worker="w0") == 256)
    h = _ask(client)
    assert (h["x-adaptspec-proposer"], h["x-adaptspec-gamma"]) == ("none", "0")
    assert up.requests()[-1]["body"]["speculation"]["proposer"] == "none"

    up.set(running_offset=0)
    eventually(lambda: metric(px.metrics(), "adaptspec_worker_running", worker="w0") == 0)
    assert int(_ask(client)["x-adaptspec-gamma"]) > 0
    text = px.metrics()
    assert metric(text, "adaptspec_decisions_total", proposer="none", policy="goodput") >= 1
    assert metric(text, "adaptspec_requests_total", proposer="none", code="200") >= 1


def test_requests_go_to_the_less_loaded_worker(upstreams, proxies):
    busy, idle = upstreams("busy"), upstreams("idle")
    px = proxies({"pools": [pool("spec", [busy, idle], profile="cpu-tiny")], "server": FAST})
    busy.set(running_offset=40)
    eventually(lambda: metric(px.metrics(), "adaptspec_worker_running", worker="busy") == 40)
    client = px.client()
    workers = [_ask(client)["x-adaptspec-worker"] for _ in range(6)]
    assert workers == ["idle"] * 6


@pytest.mark.parametrize(("alpha", "direction"), [(0.97, +1), (0.03, -1)])
def test_alpha_estimate_moves_with_per_request_feedback(upstreams, proxies, alpha, direction):
    up = upstreams("w0", alpha=alpha)
    px = proxies({"pools": [pool("spec", [up], proposers=["ngram"], profile="cpu-tiny")],
                  "policy": {"kind": "static", "proposer": "ngram", "gamma": 4}})
    client = px.client()
    priors = px.metrics()  # before any feedback: the prior of every class
    cls = _ask(client)["x-adaptspec-class"]
    key = {"worker": "w0", "proposer": "ngram", "content_class": cls}
    before = metric(priors, "adaptspec_alpha_estimate", **key)
    for _ in range(19):
        assert _ask(client)["x-adaptspec-class"] == cls
    text = px.metrics()
    after = metric(text, "adaptspec_alpha_estimate", **key)
    # the worker accepts `alpha` of its drafts: the estimate moves at least halfway there from the prior
    assert direction * (after - before) > 0 and abs(after - alpha) < 0.5 * abs(before - alpha), (before, after)
    # the proxy's token counters are exactly the sum of what the worker reported per request
    reported = up.state()
    assert metric(text, "adaptspec_draft_tokens_total", **key) == reported["draft"]
    assert metric(text, "adaptspec_accepted_tokens_total", **key) == reported["accepted"]
    assert metric(text, "adaptspec_output_tokens_total", **key) == 20 * 8


def test_fixed_vllm_pool_learns_alpha_from_scraped_counters(upstreams, proxies):
    up = upstreams("n0", engine="vllm", fixed_gamma=4, alpha=0.97)
    px = proxies({"pools": [pool("vllm-ngram", [up], engine="vllm", per_request=False, proposers=["ngram"],
                                 gamma=4, profile="cpu-tiny")], "server": FAST})
    client = px.client()
    priors = px.metrics()
    h = _ask(client)
    assert (h["x-adaptspec-proposer"], h["x-adaptspec-gamma"]) == ("ngram", "4")  # what the pool runs
    key = {"worker": "n0", "proposer": "ngram", "content_class": h["x-adaptspec-class"]}
    before = metric(priors, "adaptspec_alpha_estimate", **key)
    for _ in range(19):
        _ask(client)
    # the engine-wide counters (vllm:spec_decode_*) reach the estimate through the scraper
    eventually(lambda: metric(px.metrics(), "adaptspec_alpha_estimate", **key) > before + 0.2, timeout=5)
    body = up.requests()[-1]["body"]
    assert "speculation" not in body and "vllm_xargs" not in body  # fixed pool: body untouched
    assert metric(px.metrics(), "adaptspec_draft_tokens_total", **key) == 0  # no per-request stats here (created at 0)
