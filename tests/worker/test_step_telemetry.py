"""Step telemetry of the reference worker (control/telemetry.py): the engine's counters add up to what its
requests did, and the server exports them on /metrics under the contract's names."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from engine_requests import chat_ids, greedy_request
from prometheus_client.parser import text_string_to_metric_families

from adaptspec.control import telemetry
from adaptspec.worker.engine import Engine

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"


def _delta(engine: Engine, run) -> tuple[telemetry.StepCounters, float]:
    before = engine.metrics().step_counters
    t0 = time.perf_counter()
    run()
    wall = time.perf_counter() - t0
    window = engine.metrics().step_counters.since(before)
    assert window is not None
    return window, wall


def test_plain_decoding_counts_every_token_and_the_context_it_attends(engine):
    ids = chat_ids(engine, "Tom has 3 apples and buys 5 more. How many apples does he have?")
    n, length = 12, len(ids)
    w, wall = _delta(engine, lambda: engine.generate_sync([greedy_request("p", ids, max_tokens=n)]))
    assert w.steps == n  # one token per step without speculation
    assert w.batched_tokens == length + n - 1  # the prompt, then the previous step's token each step
    assert w.kv_tokens == sum(length + i for i in range(n))  # step i attends to the prompt and i tokens
    assert w.drafted_tokens == {} and w.draft_passes == {}
    assert w.requests == n  # one request in each step
    assert 0 < w.step_seconds <= wall


@pytest.mark.parametrize("proposer,k", [("draft", 3), ("ngram", 4)])
def test_drafting_counts_tokens_and_model_passes(engine, proposer, k):
    ids = chat_ids(engine, "Complete this Python function.\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n")
    outs = []

    async def collect():
        async for o in engine.generate(greedy_request("d", ids, proposer, k, max_tokens=24)):
            outs.append(o)

    w, wall = _delta(engine, lambda: asyncio.run(collect()))
    last = outs[-1]
    assert 0 < w.step_seconds <= wall
    assert w.steps == last.steps
    assert w.drafted_tokens.get(proposer, 0.0) == last.draft_tokens
    assert w.batched_tokens == len(ids) + last.steps - 1 + last.draft_tokens
    if proposer == "draft":
        assert last.draft_tokens > 0
        assert w.draft_passes["draft"] == last.draft_tokens  # alone: one pass per drafted token
        # one call per step that drafted: at k = 3, ceil(drafted / 3) <= calls <= steps
        assert -(-last.draft_tokens // k) <= w.draft_calls["draft"] <= w.steps
    else:
        assert not any(w.draft_passes.values())  # a lookup, no model pass
        assert not any(w.draft_calls.values())


def test_concurrent_draft_requests_share_their_passes(engine):
    ids = chat_ids(engine, "Summarize: the council met on Tuesday to discuss the new park and its pond.")
    reqs = [greedy_request(f"c{i}", ids, "draft", 4, max_tokens=16) for i in range(4)]
    w, _ = _delta(engine, lambda: engine.generate_sync(reqs))
    # a step drafts for several requests with max(k) passes, so passes < drafted tokens once they overlap
    assert 0 < w.draft_passes["draft"] < w.drafted_tokens["draft"]
    assert w.draft_passes["draft"] >= w.drafted_tokens["draft"] / 4
    assert w.steps < w.requests <= 4 * w.steps  # up to 4 requests a step, several in most


def test_hybrid_counts_lookup_steps_as_ngram_and_only_model_steps_as_passes(engine):
    """Regression: every hybrid step used to count max(k) model passes, even the steps n-gram lookup drafted."""
    hybrid = engine._proposers["hybrid"]  # the conftest engine has no head: lookup, else the draft model
    ids = chat_ids(engine, "Fix the typo and return the whole function.\n\ndef total(items, tax):\n"
                           "    subtotal = sum(i.price for i in items)\n    return subtotl + subtotal * tax\n")
    outs = []

    async def collect():
        async for o in engine.generate(greedy_request("h", ids, "hybrid", 4, max_tokens=48)):
            outs.append(o)

    by_source = dict(hybrid.drafts_by_source)
    w, _ = _delta(engine, lambda: asyncio.run(collect()))
    last = outs[-1]
    lookup_steps = hybrid.drafts_by_source["ngram"] - by_source["ngram"]
    model_steps = hybrid.drafts_by_source["draft"] - by_source["draft"]
    assert lookup_steps > 0 and model_steps > 0  # both parts drafted in this request
    assert last.lookup_drafts == lookup_steps and last.drafts == lookup_steps + model_steps
    assert "hybrid" not in w.drafted_tokens and "hybrid" not in w.draft_passes  # counted by what ran
    assert w.drafted_tokens["ngram"] + w.drafted_tokens["draft"] == last.draft_tokens
    assert w.drafted_tokens["ngram"] >= lookup_steps  # each lookup step drafted at least one token
    assert w.draft_passes.get("ngram", 0.0) == 0.0
    # alone, a model step runs one pass per token it drafted; lookup steps run none
    assert w.draft_passes["draft"] == w.drafted_tokens["draft"]
    assert w.batched_tokens == len(ids) + last.steps - 1 + last.draft_tokens
    # the same steps split by source, as the proxy learns them (requests.SourceTally; trace replay's form)
    lk, model = last.by_source["ngram"], last.by_source["draft"]
    assert (lk.drafts, model.drafts, model.steps) == (lookup_steps, model_steps, model_steps)
    assert (lk.draft_tokens, model.draft_tokens) == (w.drafted_tokens["ngram"], w.drafted_tokens["draft"])
    assert lk.accepted_tokens + model.accepted_tokens == last.accepted_tokens
    # lookup steps + the output positions every other step emitted: each step emits its accepted tokens and one
    # more (the prefill step is left out when it drafted nothing)
    other = last.steps - lookup_steps - (0 if outs[0].drafts else 1)
    assert lk.steps == lookup_steps + other + (last.accepted_tokens - lk.accepted_tokens)
    assert lk.tried_per_position[0] == lookup_steps and model.tried_per_position[0] == model_steps
    assert all(outs[i].by_source is None for i in range(len(outs) - 1))  # reported once, when it finishes


def test_a_hybrids_misses_share_the_model_call_of_the_requests_that_ask_the_model(engine):
    """One set of model passes per step: the draft model runs once per step over the requests that asked
    for it and the hybrid requests whose lookup missed (not once per proposer name), so the step's passes
    are the longest draft of either."""
    model, forward = engine._proposers["draft"], engine.model.forward
    log: list[object] = []

    def propose(batch):
        log.append({b.request_id for b in batch})
        return real_propose(batch)

    def counted_forward(*a, **kw):
        log.append("step")
        return forward(*a, **kw)

    real_propose = model.propose
    ids = chat_ids(engine, "Write a short poem about the sea, the wind and a lighthouse keeper at night.")
    reqs = [greedy_request("h", ids, "hybrid", 3, max_tokens=24), greedy_request("d", ids, "draft", 3, max_tokens=24)]
    model.propose, engine.model.forward = propose, counted_forward
    try:
        w, _ = _delta(engine, lambda: engine.generate_sync(reqs))
    finally:
        del model.propose, engine.model.forward  # back to the class's methods
    steps, calls = [], []
    for item in log:
        if item == "step":
            steps.append(calls)
            calls = []
        else:
            calls.append(item)
    assert all(len(c) <= 1 for c in steps)  # at most one call of the model per step
    assert any(c == [{"h", "d"}] for c in steps)  # and the hybrid's misses rode along with the draft requests
    assert w.draft_passes["draft"] < w.drafted_tokens["draft"]  # shared passes: max(k), not the sum


@pytest.mark.integration
def test_server_exports_the_step_counters():
    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    eng = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=8, max_model_len=512,
                           num_threads=1)
    server = ServerThread(build_app(eng, WorkerSettings(served_model_name="tiny", max_model_len=512))).start()
    try:
        def scrape() -> dict[tuple[str, tuple], float]:
            out = {}
            for family in text_string_to_metric_families(httpx.get(server.url + "/metrics").text):
                for s in family.samples:
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
            return out

        base = (("engine", "0"), ("model_name", "tiny"))
        before = scrape()
        for p in ("ngram", "draft", "eagle", "hybrid"):  # the closed proposer label set, always exported
            assert (telemetry.METRIC_DRAFTED_TOKENS + "_total", (*base, ("proposer", p))) in before
        t0 = time.perf_counter()
        body = {"model": "tiny", "prompt": "def f(x):\n    return x\n\ndef f(x):\n", "max_tokens": 20,
                "temperature": 0, "speculation": {"proposer": "draft", "num_speculative_tokens": 3}}
        r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
        wall = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        spec = r.json()["usage"]["speculative"]
        after = scrape()

        def delta(name, labels=base):
            return after[(name + "_total", labels)] - before[(name + "_total", labels)]

        assert delta(telemetry.METRIC_STEPS) == spec["steps"]
        assert delta(telemetry.METRIC_STEP_REQUESTS) == spec["steps"]  # the one request, in each of its steps
        assert delta(telemetry.METRIC_DRAFTED_TOKENS, (*base, ("proposer", "draft"))) == spec["draft_tokens"]
        assert delta(telemetry.METRIC_DRAFT_PASSES, (*base, ("proposer", "draft"))) == spec["draft_tokens"]
        assert delta(telemetry.METRIC_DRAFTED_TOKENS, (*base, ("proposer", "ngram"))) == 0
        assert delta(telemetry.METRIC_BATCHED_TOKENS) == (r.json()["usage"]["prompt_tokens"] + spec["steps"] - 1
                                                          + spec["draft_tokens"])
        assert 0 < delta(telemetry.METRIC_STEP_SECONDS) <= wall
        assert delta(telemetry.METRIC_KV_TOKENS) >= delta(telemetry.METRIC_BATCHED_TOKENS)
    finally:
        server.stop()
        eng.stop()


def test_rows_of_one_model_draft_at_the_k_most_of_them_asked(engine):
    """Two requests ask the draft model for k=2 and one for k=4 in the same steps: the step runs the model's
    passes for the majority's 2 (the k=4 row drafts 2 while they share steps), not 4 passes for one row's tokens;
    greedy output is the same as the k=4 request alone (a draft length never changes the output)."""
    ids = chat_ids(engine, "Complete this Python function.\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n")
    alone = engine.generate_sync([greedy_request("solo", ids, "draft", 4, max_tokens=16)])["solo"]
    # the k=2 rows outlive the k=4 one and run_sync queues the three at once (they join the same step: a late
    # joiner's prompt would run in a forward group of its own, whose draft call adds passes), so every step the
    # k=4 row runs in holds them
    reqs = [greedy_request(f"r{i}", ids, "draft", k, max_tokens=n) for i, (k, n) in enumerate(((2, 48), (2, 48),
                                                                                                (4, 16)))]
    ran: dict = {}
    w, _ = _delta(engine, lambda: ran.update(engine.run_sync(reqs)))
    assert ran["r2"][0] == alone
    assert set(ran["r2"][1].steps_by_gamma) == {2}  # all its steps shared with the k=2 rows
    assert w.draft_passes["draft"] <= 2 * w.steps
