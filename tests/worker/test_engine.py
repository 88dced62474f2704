"""The reference engine: losslessness across proposers and k, continuous batching, aborts, seeds, limits."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest
from engine_requests import chat_ids, greedy_request

from adaptspec.errors import RequestError
from adaptspec.worker.engine import Engine, GenRequest, StepOutput

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"
PROMPTS = [
    ("summarize", "Summarize this article in one sentence.\n\nArticle: The city council met on Tuesday to discuss "
                  "the new park. The new park will have a playground, a pond and a small library."),
    ("code", "Complete this Python function.\n\ndef add_numbers(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n"),
    ("math", "Tom has 3 apples and buys 5 more. How many apples does he have?"),
]
SPECS = [("none", 0), ("ngram", 1), ("ngram", 3), ("ngram", 5), ("draft", 1), ("draft", 3), ("draft", 5)]
MAX_NEW = 20


req = functools.partial(greedy_request, max_tokens=MAX_NEW)


@pytest.fixture(scope="module")
def reference(engine) -> dict[str, list[int]]:
    """Greedy output without speculation, each prompt alone."""
    return {cls: engine.generate_sync([req(f"ref-{cls}", chat_ids(engine, text))])[f"ref-{cls}"]
            for cls, text in PROMPTS}


def test_lossless_alone(engine, reference):
    for cls, text in PROMPTS:
        ids = chat_ids(engine, text)
        for proposer, k in SPECS:
            rid = f"alone-{cls}-{proposer}-{k}"
            out = engine.generate_sync([req(rid, ids, proposer, k, content_class=cls)])[rid]
            assert out == reference[cls], (cls, proposer, k)
            assert len(out) == MAX_NEW


def test_lossless_mixed_in_one_batch(engine, reference):
    before = engine.metrics()
    reqs = []
    for i, (proposer, k) in enumerate(SPECS):
        cls, text = PROMPTS[i % len(PROMPTS)]
        reqs.append(req(f"mix-{i}-{cls}", chat_ids(engine, text), proposer, k, content_class=cls))
    out = engine.generate_sync(reqs)
    for r in reqs:
        assert out[r.request_id] == reference[r.content_class], r.request_id
    m = engine.metrics()
    assert m.running == 0 and m.waiting == 0 and m.kv_cache_usage == 0
    drafted = m.spec_num_draft_tokens - before.spec_num_draft_tokens
    accepted = m.spec_num_accepted_tokens - before.spec_num_accepted_tokens
    assert drafted > 0 and 0 <= accepted <= drafted
    assert sum(m.spec_accepted_per_pos) == m.spec_num_accepted_tokens
    assert m.spec_accepted_per_pos == sorted(m.spec_accepted_per_pos, reverse=True)
    by_class = list(m.spec_by_class.values())
    assert sum(v[0] for v in by_class) == m.spec_num_drafts
    assert sum(v[1] for v in by_class) == m.spec_num_draft_tokens
    assert sum(v[2] for v in by_class) == m.spec_num_accepted_tokens
    assert {c for c, _ in m.spec_by_class} <= {c for c, _ in PROMPTS}


async def collect(engine, r: GenRequest) -> list[StepOutput]:
    return [o async for o in engine.generate(r)]


async def test_generate_streams_and_reports_usage(engine, reference):
    cls, text = PROMPTS[0]
    outs = await collect(engine, req("stream", chat_ids(engine, text), "ngram", 3))
    assert [t for o in outs for t in o.new_token_ids] == reference[cls]
    assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
    last = outs[-1]
    assert last.finish_reason == "length" and last.steps == len(outs)
    assert 0 <= last.accepted_tokens <= last.draft_tokens
    assert last.steps + last.accepted_tokens == MAX_NEW or last.steps + last.accepted_tokens > MAX_NEW


@pytest.mark.parametrize(("proposer", "k"), [("ngram", 5), ("draft", 3)])
async def test_per_position_stats_of_a_request_match_the_engine_counters(engine, proposer, k):
    """A request alone: its tried/accepted per position agree with the engine-wide per-position counters,
    and every draft is accounted for (n-gram drafts may be shorter than k)."""
    before = engine.metrics()
    outs = await collect(engine, req(f"pos-{proposer}", chat_ids(engine, PROMPTS[0][1]), proposer, k,
                                     max_tokens=48))
    after, last = engine.metrics(), outs[-1]
    tried, acc = last.tried_per_position, last.accepted_per_position
    assert last.drafts == after.spec_num_drafts - before.spec_num_drafts > 0
    assert tried[0] == last.drafts and len(tried) == len(acc) <= k
    engine_acc = [a - (before.spec_accepted_per_pos[j] if j < len(before.spec_accepted_per_pos) else 0)
                  for j, a in enumerate(after.spec_accepted_per_pos)]
    assert list(acc) == engine_acc[:len(acc)] and not any(engine_acc[len(acc):])
    assert sum(acc) == last.accepted_tokens
    # position j+1 is tried by the drafts that accepted position j and had room past it: a draft model drafts
    # k, and a lookup draft the text cut short counts as a miss where it ends, so only the last steps (room
    # before max_tokens) leave an accepted position's successor untried
    assert all(t1 <= a0 for t1, a0 in zip(tried[1:], acc, strict=False))
    assert sum(a0 - t1 for t1, a0 in zip(tried[1:], acc, strict=False)) <= k


async def test_continuous_batching_join_and_leave(engine, reference):
    """A request joins while another runs, leaves first; both stay exact."""
    (c0, t0), (c1, t1) = PROMPTS[0], PROMPTS[1]
    long_req = req("long", chat_ids(engine, t0), "draft", 3, max_tokens=MAX_NEW)
    seen_running = []

    async def run_long():
        outs = []
        async for o in engine.generate(long_req):
            outs.append(o)
            seen_running.append(engine.metrics().running)
            if len(outs) == 2:
                started.set()
        return outs

    started = asyncio.Event()
    task = asyncio.create_task(run_long())
    await started.wait()
    short = await collect(engine, req("short", chat_ids(engine, t1), "ngram", 2, max_tokens=5))
    long_outs = await task
    assert [t for o in short for t in o.new_token_ids] == reference[c1][:5]
    assert [t for o in long_outs for t in o.new_token_ids] == reference[c0]
    assert max(seen_running) == 2 and engine.metrics().running == 0


async def test_closing_the_iterator_aborts_and_frees_the_slot(engine):
    ids = chat_ids(engine, PROMPTS[2][1])
    gen = engine.generate(req("gone", ids, "draft", 4, max_tokens=400))
    first = await gen.__anext__()
    assert not first.finished
    assert engine.metrics().running == 1
    await gen.aclose()
    for _ in range(200):
        if engine.metrics().running == 0:
            break
        await asyncio.sleep(0.01)
    m = engine.metrics()
    assert m.running == 0 and m.kv_cache_usage == 0
    assert len(engine._free_slots) == engine.max_batch
    assert "gone" not in engine._proposers["draft"]._slot


async def test_abort_by_id(engine):
    ids = chat_ids(engine, PROMPTS[0][1])
    outs = []
    async for o in engine.generate(req("byid", ids, max_tokens=400)):
        outs.append(o)
        if len(outs) == 1:
            engine.abort("byid")
    assert outs[-1].finished and outs[-1].finish_reason == "abort"
    assert len(outs) <= 3
    assert engine.metrics().running == 0


def test_seeded_sampling_is_reproducible(engine):
    ids = chat_ids(engine, PROMPTS[1][1])

    def run(extra: list[GenRequest], tag: str) -> list[list[int]]:
        reqs = [req(f"seed-{tag}-{p}", ids, p, 3, temperature=0.9, top_p=0.95, seed=7) for p in ("draft", "ngram")]
        out = engine.generate_sync(reqs + extra)
        return [out[r.request_id] for r in reqs]

    alone = run([], "a")
    mixed = run([req(f"noise-{i}", chat_ids(engine, PROMPTS[i % 3][1]), "draft", 2, temperature=1.0)
                 for i in range(3)], "b")
    assert alone == mixed
    other = engine.generate_sync([req("seed-other", ids, "draft", 3, temperature=0.9, top_p=0.95, seed=8)])
    assert other["seed-other"] != alone[0]


def test_stop_token_and_limits(engine, reference):
    cls, text = PROMPTS[0]
    ids = chat_ids(engine, text)
    stop = reference[cls][3]
    out = engine.generate_sync([GenRequest("stop", ids, max_tokens=MAX_NEW, temperature=0.0,
                                           stop_token_ids=[stop], proposer="ngram", num_speculative_tokens=4)])
    assert out["stop"] == reference[cls][:reference[cls].index(stop)]
    with pytest.raises(RequestError, match="maximum context length") as e:
        engine.generate_sync([GenRequest("toolong", ids, max_tokens=engine.max_model_len)])
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(RequestError, match="unknown proposer"):
        engine.generate_sync([GenRequest("bad", ids, proposer="medusa", num_speculative_tokens=2)])
    with pytest.raises(RequestError, match="num_speculative_tokens"):
        engine.generate_sync([GenRequest("bad", ids, proposer="ngram", num_speculative_tokens=99)])
    with pytest.raises(RequestError, match="token ids"):
        engine.generate_sync([GenRequest("bad", [engine.vocab_size])])


def test_max_model_len_reached_ends_with_length():
    e = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=2, max_model_len=40)
    with e:
        ids = list(range(100, 130))
        out = e.generate_sync([GenRequest("edge", ids, max_tokens=10, temperature=0.0, ignore_eos=True,
                                          proposer="draft", num_speculative_tokens=8)])
        assert len(out["edge"]) == 10
        assert e.metrics().running == 0
