"""Trace replay in the simulator: exact hand-computed arithmetic, the oracle bound, truth vs belief."""

from __future__ import annotations

import numpy as np
import pytest

from adaptspec.bench.oracle import Oracle, decode_walk
from adaptspec.bench.simulator import ProfileCost, SimConfig, parse_policy, replay_accepts, simulate, sweep
from adaptspec.bench.traces import TraceRequest, TraceWorkload, synthesize
from adaptspec.bench.workloads import get_workload
from adaptspec.control.config import StaticPolicy
from adaptspec.control.policy import build_policy
from adaptspec.control.profiles import Profile
from adaptspec.control.types import Decision
from adaptspec.errors import ConfigError

# one request: prefill emits token 0, decoding starts at position 1
RUNS = (9, 3, 1, 2, 4, 1, 1, 2, 1, 1)
REQ = TraceRequest("r", "code", 4, 10, 8, {"draft": RUNS})


class Fixed:
    def __init__(self, proposer: str, gamma: int) -> None:
        self.name, self.proposer, self.gamma = "fixed", proposer, gamma

    def decide(self, content_class, workers, alphas) -> Decision:
        return Decision(workers[0].name, self.proposer, self.gamma, content_class, self.name, "fixed")


def one_second_steps() -> ProfileCost:
    """Every step costs 1 s whatever it carries; drafting is free (memory-bound, c = 0)."""
    return ProfileCost(Profile.memory_bound(0.0))


@pytest.mark.parametrize(("gamma", "decode_steps", "accepted"), [
    # pos 1 run 3 -> 3 tokens, pos 4 run 4 -> 3, pos 7 run 2 -> 2, pos 9 run 1 -> 1: 4 steps, 2+2+1+0 accepted
    (2, 4, 5),
    # pos 1 -> 3 (run 3), pos 4 -> 4 (run 4), pos 8 -> 1, pos 9 -> 1
    (8, 4, 5),
    # pos 1 -> 2, pos 3 -> 2, pos 5 -> 1, pos 6 -> 1, pos 7 -> 2, pos 9 -> 1
    (1, 6, 3),
])
def test_replay_arithmetic_by_hand(gamma, decode_steps, accepted):
    assert decode_walk(RUNS, gamma, 4)[0] == decode_steps
    cfg = SimConfig(concurrency=1, requests=5, warmup=0)
    res = simulate(Fixed("draft", gamma), one_second_steps(), TraceWorkload([REQ]), cfg)
    row = res.row()
    steps = 1 + decode_steps  # the prefill step, then the decode steps; each takes 1 s
    assert res.steps == 5 * steps and res.output_tokens == 5 * 10
    assert row["output_tokens_per_s"] == pytest.approx(10 / steps, rel=1e-12)
    assert res.draft_tokens == 5 * decode_steps * gamma and res.accepted_tokens == 5 * accepted
    assert row["tpot_ms_p50"] == pytest.approx(1e3 * decode_steps / 9, rel=1e-12)


def test_replay_accepts_follows_each_request_position():
    runs = np.array([[1, 3, 1, 2, 4], [1, 1, 5, 5, 5]])  # [slots, L]
    out = replay_accepts(runs, np.array([0, 1]), np.array([1, 1]), np.array([4, 1]), 3)
    # slot 0 (gamma 4): pos 1 run 3 -> accept 2, pos 4 run 4 -> 3, pos 8 (clipped to 4) -> 3
    # slot 1 (gamma 1): pos 1 run 1 -> 0, pos 2 run 5 -> 1 (capped), pos 4 -> 1
    assert out.tolist() == [[2, 3, 3], [0, 1, 1]]


def test_a_proposer_missing_from_the_trace_is_not_offered():
    req = TraceRequest("n", "chat", 4, 10, 8, {"ngram": RUNS})
    cfg = SimConfig(concurrency=1, requests=3, warmup=0)
    cost = one_second_steps()  # offers only "draft"
    static = build_policy(StaticPolicy(kind="static", proposer="draft", gamma=4))
    res = simulate(static, cost, TraceWorkload([req]), cfg, worker=cost.worker())
    assert res.row()["speculation_share"] == 0.0 and res.steps == 3 * 10  # off: one token a step
    # a policy that asks for it anyway gets no draft accepted (run 1 everywhere)
    res = simulate(Fixed("draft", 4), cost, TraceWorkload([req]), cfg, worker=cost.worker())
    assert res.accepted_tokens == 0 and res.steps == 3 * 10


def test_trace_requests_come_in_file_order_for_every_policy():
    reqs = synthesize(get_workload("mixed"), 7, seed=2, max_k=4)
    wl = TraceWorkload(reqs)
    cls_idx, prompt, output = wl.sample(None, 10)
    assert [wl.classes[i] for i in cls_idx] == [reqs[i % 7].content_class for i in range(10)]
    assert prompt.tolist() == [reqs[i % 7].prompt_tokens for i in range(10)]
    assert output.tolist() == [reqs[i % 7].output_tokens for i in range(10)]


TRACE = synthesize(get_workload("mixed"), 60, seed=4, max_k=8, proposers=("ngram", "eagle"))
STATICS = ["off", "static:ngram:2", "static:ngram:4", "static:ngram:8", "static:eagle:1", "static:eagle:3",
           "static:eagle:5", "static:eagle:8"]


def test_oracle_beats_every_static_policy_at_batch_one():
    specs = [parse_policy(s, "h100-llama3-8b") for s in [*STATICS, "oracle"]]
    rows = sweep(specs, "h100-llama3-8b", TraceWorkload(TRACE), [("concurrency", 1)], requests=60, warmup=0,
                 progress=False)
    tput = {r["policy"]: r["output_tokens_per_s"] for r in rows}
    for s in STATICS:
        assert tput["oracle"] >= tput[s], s
    assert tput["oracle"] > 1.05 * max(tput[s] for s in STATICS)  # per-request choice pays on this trace


def test_oracle_needs_a_trace():
    with pytest.raises(ConfigError, match="needs acceptance traces"):
        sweep([parse_policy("oracle", "h100-llama3-8b")], "h100-llama3-8b", get_workload("mixed"),
              [("concurrency", 1)], progress=False)
    with pytest.raises(ConfigError, match="needs acceptance traces"):
        Oracle(one_second_steps()).decide("chat", [], None)


def test_truth_changes_costs_not_acceptance():
    specs = [parse_policy(s, "h100-llama3-8b") for s in ("static:eagle:3", "static:ngram:4")]
    loads = [("concurrency", 1), ("concurrency", 16)]
    wl = TraceWorkload(TRACE)
    same = sweep(specs, "h100-llama3-8b", wl, loads, requests=40, warmup=8, progress=False)
    other = sweep(specs, "h100-llama3-8b", wl, loads, truth_profile="h200-llama3-70b", requests=40, warmup=8,
                  progress=False)
    for a, b in zip(same, other, strict=True):
        assert b["truth_profile"] == "h200-llama3-70b" and "truth_profile" not in a
        assert a["acceptance_rate"] == b["acceptance_rate"] and a["tokens_per_step"] == b["tokens_per_step"]
        assert b["output_tokens_per_s"] < 0.5 * a["output_tokens_per_s"]  # 70B on TP2 is much slower than 8B


def test_proposers_restrict_what_the_worker_offers():
    specs = [parse_policy(s, "h100-llama3-8b") for s in ("adaptive", "oracle")]
    kw = {"requests": 16, "warmup": 4, "progress": False}
    wl = TraceWorkload(TRACE)
    free = sweep(specs, "h100-llama3-8b", wl, [("concurrency", 1)], **kw)
    only = sweep(specs, "h100-llama3-8b", wl, [("concurrency", 1)], proposers=["ngram"], **kw)
    assert all(r["proposer_mix"]["eagle"] > 0.3 for r in free)
    assert all(r["proposer_mix"]["eagle"] == 0 and r["proposer_mix"]["ngram"] > 0 for r in only)
