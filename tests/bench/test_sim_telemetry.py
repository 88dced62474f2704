"""The simulated engine's step telemetry: window deltas fit the truth step-time model exactly."""

from __future__ import annotations

import random

import numpy as np
import pytest

from adaptspec.bench.simulator import ProfileCost, SimConfig, simulate
from adaptspec.bench.workloads import AlphaModel, get_workload
from adaptspec.control.profiles import parse_profile
from adaptspec.control.types import Decision

# additive truth, every cost linear in the counters: target o + c*tokens + k*kv; draft model o_d per pass +
# c_d per drafted token; measured EAGLE per_token_s per drafted token
O_T, C, K, O_D, C_D, E_T = 0.005, 2.0e-5, 2.0e-8, 1.0e-3, 5.0e-6, 1.5e-5
TRUTH = parse_profile({
    "name": "linear", "target": {"combine": "sum", "overhead_s": O_T, "memory_floor_s": 0.0, "kv_s_per_token": K,
                                 "compute_s_per_token": C},
    "proposers": {"draft": {"kind": "draft", "combine": "sum", "overhead_s": O_D, "memory_floor_s": 0.0,
                            "compute_s_per_token": C_D},
                  "eagle": {"kind": "eagle", "per_token_s": E_T}}}, "linear")


class RandomPlans:
    """Each request gets a random proposer and gamma (so passes and drafted tokens vary independently)."""

    name = "random"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def decide(self, content_class, workers, alphas) -> Decision:
        p = self.rng.choice(["none", "draft", "eagle"])
        g = 0 if p == "none" else self.rng.randint(1, 6)
        return Decision(workers[0].name, p, g, content_class, self.name, "random")


def run(concurrency: int, seed: int = 0) -> tuple[list[tuple[float, object]], object]:
    cost = ProfileCost(TRUTH)
    reports = []
    res = simulate(RandomPlans(seed), cost, get_workload("mixed"), SimConfig(concurrency=concurrency, requests=150,
                   warmup=10, seed=seed), truth=AlphaModel.constant(0.7), worker=cost.worker(),
                   telemetry=lambda now, c: reports.append((now, c)))
    return reports, res


def test_window_deltas_recover_the_truth_coefficients():
    reports, res = run(16)
    assert len(reports) > 20
    times = [t for t, _ in reports]
    assert all(b - a >= 0.25 for a, b in zip(times[:-2], times[1:-1], strict=True))  # at most every 0.25 s
    assert reports[-1][1] == res.counters and res.counters.steps >= res.steps
    rows, y = [], []
    for (_, a), (_, b) in zip(reports, reports[1:], strict=False):
        d = b.since(a)
        assert d is not None
        rows.append([d.steps, d.batched_tokens, d.kv_tokens, d.draft_passes.get("draft", 0.0),
                     d.drafted_tokens.get("draft", 0.0), d.drafted_tokens.get("eagle", 0.0),
                     d.draft_passes.get("eagle", 0.0)])
        y.append(d.step_seconds)
    x = np.array(rows)  # [windows, 7]
    scale = x.max(axis=0)
    coef = np.linalg.lstsq(x / scale, np.array(y), rcond=None)[0] / scale
    truth = [O_T, C, K, O_D, C_D, E_T]
    assert coef[:6] == pytest.approx(truth, rel=1e-6)
    assert abs(coef[6]) < 1e-9  # a measured EAGLE cost is per drafted token here, nothing per pass


def test_counters_are_the_truth_costs_summed():
    reports, res = run(4, seed=1)
    c = res.counters
    predicted = (O_T * c.steps + C * c.batched_tokens + K * c.kv_tokens + O_D * c.draft_passes["draft"]
                 + C_D * c.drafted_tokens["draft"] + E_T * c.drafted_tokens["eagle"])
    assert c.step_seconds == pytest.approx(predicted, rel=1e-9)
    assert c.step_seconds == pytest.approx(res.sim_time_s, rel=1e-9)  # the engine is never idle in a closed loop
    assert "ngram" not in c.drafted_tokens
