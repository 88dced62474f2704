"""Per-request gamma schedules in the reference engine: k capped by the running batch at every step, greedy
output unchanged whatever the schedule, steps counted per gamma, bad schedules refused per request."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_requests import chat_ids, greedy_request

from adaptspec.errors import RequestError
from adaptspec.worker.engine import Engine, StepOutput

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"
TEXTS = [
    "Summarize this article in one sentence.\n\nArticle: The city council met on Tuesday to discuss the new "
    "park. The new park will have a playground, a pond and a small library.",
    "Complete this Python function.\n\ndef add_numbers(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n",
    "Tom has 3 apples and buys 5 more. How many apples does he have?",
]


def run(engine: Engine, reqs) -> dict[str, tuple[list[int], StepOutput]]:
    """Submit `reqs` together; -> {id: (tokens, last StepOutput)}."""
    return engine.run_sync(reqs)


def test_schedule_caps_gamma_alone(engine):
    ids = chat_ids(engine, TEXTS[0])
    out = run(engine, [greedy_request("alone", ids, "draft", 5, max_tokens=24, schedule=[[1, 3], [8, 1]])])
    tokens, last = out["alone"]
    assert last.steps_by_gamma == {3: last.steps}  # running batch 1 at every step -> min(5, 3)
    # draft tokens never exceed 3 per drafting step
    assert last.draft_tokens <= 3 * last.drafts and last.drafts > 0


def test_schedule_follows_the_running_batch_and_keeps_greedy_output(engine):
    ids = [chat_ids(engine, TEXTS[i % len(TEXTS)]) for i in range(6)]
    lengths = [8, 12, 16, 20, 28, 40]  # the batch shrinks as requests finish: 6, 5, ..., 1
    plain = run(engine, [greedy_request(f"p{i}", x, max_tokens=n) for i, (x, n) in enumerate(zip(ids, lengths, strict=True))])
    sched = [[1, 5], [3, 2], [5, 1]]  # batch 6 -> off, 4-5 -> 1, 2-3 -> 2, 1 -> 5
    for proposer in ("ngram", "draft"):
        out = run(engine, [greedy_request(f"{proposer}{i}", x, proposer, 4, max_tokens=n, schedule=sched)
                           for i, (x, n) in enumerate(zip(ids, lengths, strict=True))])
        for i in range(6):
            tokens, last = out[f"{proposer}{i}"]
            assert tokens == plain[f"p{i}"][0], (proposer, i)
            assert sum(last.steps_by_gamma.values()) == last.steps
            assert set(last.steps_by_gamma) <= {0, 1, 2, 4}  # min(4, cap)
        # the first step runs all six together (above the last row: off); the longest one ends alone at k=4
        assert out[f"{proposer}0"][1].steps_by_gamma.get(0, 0) >= 1
        longest = out[f"{proposer}5"][1].steps_by_gamma
        assert longest.get(4, 0) >= 1 and longest.get(0, 0) >= 1


def test_no_schedule_reports_every_step_at_k(engine):
    ids = chat_ids(engine, TEXTS[1])
    _, last = run(engine, [greedy_request("nosched", ids, "ngram", 3, max_tokens=16)])["nosched"]
    assert last.steps_by_gamma == {3: last.steps}
    _, off = run(engine, [greedy_request("off", ids, max_tokens=8)])["off"]
    assert off.steps_by_gamma == {0: off.steps}


@pytest.mark.parametrize("schedule, words", [
    ([], "at least one"),
    ([[4, 2], [4, 1]], "increase"),
    ([[0, 2]], ">= 1"),
    ([[4, 99]], "cap must be between 0 and 16"),
    ([[4, True]], "pair of integers"),
    ("fast", "list"),
])
def test_bad_schedule_is_a_request_error(engine, schedule, words):
    ids = chat_ids(engine, TEXTS[2])
    with pytest.raises(RequestError) as e:
        engine.submit(greedy_request("bad", ids, "ngram", 3, max_tokens=4, schedule=schedule), lambda _: None)
    assert e.value.param == "speculation.schedule" and words in e.value.message
