"""Engine hardening: thread defaults, per-request isolation of bad inputs, the greedy fast path."""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path

import pytest
import torch
from engine_requests import chat_ids, greedy_request

from adaptspec.errors import RequestError
from adaptspec.worker import stepping as stepping_module
from adaptspec.worker.engine import Engine, GenRequest
from adaptspec.worker.sampling import logits_to_probs
from adaptspec.worker.verify import greedy_verify, verify_drafts

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"


@pytest.fixture(scope="module")
def engine():
    e = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=8, max_model_len=512)
    e.start()
    yield e
    e.stop()


def _threads_seen_by_step_thread(engine: Engine) -> int:
    """torch.get_num_threads() as seen by the engine's step thread (the sink runs on it)."""
    seen: list[int] = []
    done = threading.Event()

    def sink(item):
        seen.append(torch.get_num_threads())
        if isinstance(item, BaseException) or item.finished:
            done.set()

    engine.submit(GenRequest("threads", chat_ids(engine, "Hi"), max_tokens=2, temperature=0.0, ignore_eos=True), sink)
    assert done.wait(60)
    return seen[0]


def test_default_is_one_torch_thread(engine):
    assert engine.num_threads == 1
    assert _threads_seen_by_step_thread(engine) == 1


def test_explicit_thread_override_and_bad_values():
    model_dir = ASSETS / "tiny-target"
    e = Engine.from_dirs(model_dir, None, max_batch=2, max_model_len=128, num_threads=2)
    try:
        assert e.num_threads == 2
        assert _threads_seen_by_step_thread(e) == 2
    finally:
        e.stop()
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_threads"):
            Engine.from_dirs(model_dir, None, max_batch=2, max_model_len=128, num_threads=bad)


# ---------------------------------------------------------------- isolation of bad requests
GOOD_PROMPTS = ["Tom has 3 apples and buys 5 more. How many apples does he have?",
                "Complete this Python function.\n\ndef add_numbers(a, b):\n",
                "Summarize: the council met on Tuesday to discuss the new park."]


_req = functools.partial(greedy_request, max_tokens=12)


@pytest.fixture(scope="module")
def reference(engine) -> dict[int, list[int]]:
    return {i: engine.generate_sync([_req(f"ref{i}", chat_ids(engine, p))])[f"ref{i}"]
            for i, p in enumerate(GOOD_PROMPTS)}


@pytest.mark.parametrize("field,value", [
    ("top_p", 1e-300),  # rounds to 0.0 in float32: used to raise inside the batched step
    ("top_p", float("nan")), ("top_p", 0.0), ("top_p", 1.5),
    ("temperature", 1e-300),  # rounds to 0.0: would silently turn a sampled request greedy
    ("temperature", 1e-40),  # a float32 denormal: logits / T overflows
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", -0.5),
    ("temperature", "0.7"), ("seed", 2**64), ("seed", 1.5)])
def test_bad_sampling_values_are_refused_at_admission(engine, field, value):
    with pytest.raises(RequestError, match=field) as e:
        engine.submit(_req("bad", chat_ids(engine, "Hi"), **{field: value}), lambda item: None)
    assert e.value.param == field


async def test_bad_request_next_to_good_ones(engine, reference):
    async def run(r):
        return [t async for o in engine.generate(r) for t in o.new_token_ids]

    good = [_req(f"good{i}", chat_ids(engine, p), "ngram", 3) for i, p in enumerate(GOOD_PROMPTS)]
    bad = _req("bad-top-p", chat_ids(engine, GOOD_PROMPTS[0]), temperature=0.7, top_p=1e-300)
    results = await asyncio.gather(*(run(r) for r in [good[0], bad, *good[1:]]), return_exceptions=True)
    assert isinstance(results[1], RequestError) and results[1].param == "top_p"
    assert [results[0], *results[2:]] == [reference[i] for i in range(len(GOOD_PROMPTS))]


class _FaultyNgram:
    """The real n-gram proposer, except that it raises for requests whose id starts with 'boom'
    (a stand-in for any per-request bug inside a batched step)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, batch):
        if any(it.request_id.startswith("boom") for it in batch):
            raise ValueError("injected proposer fault")
        return self.inner.propose(batch)


def test_step_error_fails_only_the_request_that_causes_it(engine, reference, caplog):
    real = engine._proposers["ngram"]
    engine._proposers["ngram"] = _FaultyNgram(real)
    try:
        results: dict[str, list] = {}
        done = threading.Event()
        lock = threading.Lock()
        reqs = [_req(f"good{i}", chat_ids(engine, p), "ngram", 2) for i, p in enumerate(GOOD_PROMPTS)]
        reqs.insert(1, _req("boom", chat_ids(engine, GOOD_PROMPTS[1]), "ngram", 2))

        def make_sink(rid):
            def sink(item):
                with lock:
                    results.setdefault(rid, []).append(item)
                    if sum(isinstance(v[-1], BaseException) or v[-1].finished for v in results.values()) == len(reqs):
                        done.set()
            return sink

        with engine._lock:  # queue all four before the loop looks, so they share their steps
            for r in reqs:
                engine._waiting.append(engine._make_seq(r, make_sink(r.request_id)))
            engine._wake.notify_all()
        assert done.wait(120)
    finally:
        engine._proposers["ngram"] = real
    boom = results.pop("boom")
    assert len(boom) == 1 and isinstance(boom[0], RuntimeError) and "injected proposer fault" in str(boom[0])
    for i in range(len(GOOD_PROMPTS)):
        outs = results[f"good{i}"]
        assert not any(isinstance(o, BaseException) for o in outs)
        assert [t for o in outs for t in o.new_token_ids] == reference[i]
        assert outs[-1].finish_reason == "length"
    assert "retrying each request alone" in caplog.text
    # the engine loop is alive and serves the next request
    assert engine.generate_sync([_req("after", chat_ids(engine, GOOD_PROMPTS[0]))])["after"] == reference[0]


# ---------------------------------------------------------------- the greedy fast path
def test_greedy_verify_matches_the_general_verifier():
    """Random logits with ties, drafts agreeing with the argmax for a random prefix then (maybe) not."""
    gen = torch.Generator().manual_seed(7)
    vocab = 50
    for _ in range(30):
        b = int(torch.randint(1, 7, (1,), generator=gen))
        ks = torch.randint(0, 6, (b,), generator=gen).tolist()
        # integer-valued logits in a small range: many exact ties (first index wins in both paths)
        logits = torch.randint(-3, 4, (sum(ks) + b, vocab), generator=gen).float()
        am = logits.argmax(-1).tolist()
        drafts, o = [], 0
        for k in ks:
            keep = int(torch.randint(0, k + 1, (1,), generator=gen))
            d = am[o:o + keep] + torch.randint(0, vocab, (k - keep,), generator=gen).tolist()
            drafts.append(d)
            o += k + 1
        fast = greedy_verify(logits, drafts, ks)
        probs = logits_to_probs(logits, 0.0).probs
        general = verify_drafts(probs, torch.tensor([t for d in drafts for t in d], dtype=torch.long), ks,
                                greedy=True).tolist()
        assert fast == [[t for t in row if t >= 0] for row in general]
    with pytest.raises(ValueError, match="rows"):
        greedy_verify(torch.zeros(3, vocab), [[1]], [1])


@pytest.mark.parametrize("mixed", [False, True])
def test_fast_path_and_general_path_give_identical_tokens(engine, mixed, monkeypatch):
    """The same greedy batch (every proposer, several k) through the argmax fast path and through the
    probability path; with `mixed`, seeded sampled requests share the batch (they must match too: seeded
    requests draw only from their own generators)."""
    prompts = [chat_ids(engine, p) for p in GOOD_PROMPTS]
    specs = [("none", 0), ("ngram", 2), ("ngram", 4), ("draft", 1), ("draft", 3)]

    def batch():
        reqs = [_req(f"g-{i}-{p}-{k}", ids, p, k, max_tokens=16)
                for i, ids in enumerate(prompts) for p, k in specs]
        if mixed:
            reqs += [_req(f"s-{i}-{p}-{k}", ids, p, k, max_tokens=16, temperature=0.8, top_p=0.9, seed=11 + i)
                     for i, ids in enumerate(prompts) for p, k in specs[::2]]
        return reqs

    calls = []

    def spy(*args):  # the real function, counted: the fast path must actually run
        calls.append(len(args[1]))
        return greedy_verify(*args)

    monkeypatch.setattr(stepping_module, "greedy_verify", spy)
    assert engine.greedy_fast_path
    fast = engine.generate_sync(batch())
    assert calls
    n_fast = len(calls)
    engine.greedy_fast_path = False
    try:
        general = engine.generate_sync(batch())
    finally:
        engine.greedy_fast_path = True
    assert len(calls) == n_fast  # the general path never calls it
    assert fast == general
    assert all(len(v) == 16 for v in fast.values())


# ---------------------------------------------------------------- prefill apart from decoding
def test_prefill_runs_apart_from_decoding_and_stays_lossless(engine, reference, monkeypatch):
    long_text = " ".join(GOOD_PROMPTS) * 3
    long_ids = chat_ids(engine, long_text)
    assert len(long_ids) > engine.prefill_split_tokens
    long_ref = engine.generate_sync([_req("long-ref", long_ids)])["long-ref"]

    calls: list[list[int]] = []
    steps: list[int] = []
    real_forward = engine.model.forward

    def spy(chunks, *args, **kw):  # the real forward, with the chunk lengths of every call recorded
        calls.append([len(c) for c in chunks])
        steps.append(engine._m.num_steps)  # the step this forward belongs to (counted at commit)
        return real_forward(chunks, *args, **kw)

    monkeypatch.setattr(engine.model, "forward", spy)
    results: dict[str, list[int]] = {}
    done = threading.Event()
    lock = threading.Lock()
    started = threading.Event()
    n = len(GOOD_PROMPTS) + 1

    def make_sink(rid):
        def sink(item):
            assert not isinstance(item, BaseException), item
            with lock:
                results.setdefault(rid, []).extend(item.new_token_ids)
                if rid.startswith("dec") and len(results[rid]) >= 2:
                    started.set()
                if item.finished and sum(1 for _ in results) == n and all(
                        len(v) == 12 for v in results.values()):
                    done.set()
            return None
        return sink

    for i, p in enumerate(GOOD_PROMPTS):
        engine.submit(_req(f"dec{i}", chat_ids(engine, p), "ngram", 2), make_sink(f"dec{i}"))
    assert started.wait(60)  # the short requests are decoding when the long prompt arrives
    engine.submit(_req("long", long_ids, "ngram", 2), make_sink("long"))
    assert done.wait(120)
    monkeypatch.undo()
    assert results["long"] == long_ref
    for i in range(len(GOOD_PROMPTS)):
        assert results[f"dec{i}"] == reference[i]
    limit = engine.prefill_split_tokens
    long_call = next(i for i, c in enumerate(calls) if max(c) > limit)
    # the long prompt was fed in a step that also had decoding requests, in a forward of its own
    assert any(steps[j] == steps[long_call] and max(calls[j]) <= limit for j in range(len(calls)))
    for c in calls:  # ... never in the same forward as a decoding request
        assert all(x > limit for x in c) or all(x <= limit for x in c), c
