"""Gamma schedules in the simulator and the goodput policy; the ramp load; the long-output workload."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from adaptspec.bench.simulator import ProfileCost, SimConfig, parse_policy, simulate
from adaptspec.bench.workloads import AlphaModel, ClassSpec, Workload, get_workload
from adaptspec.control.config import GoodputPolicy
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.profiles import Profile, load_profile
from adaptspec.control.schedule import ANY_BATCH, cap_at
from adaptspec.control.types import Decision

WL = Workload("w", {"chat": 1.0}, specs={"chat": ClassSpec(16, 0.0, 200, 0.5, output_max=600)})


class Fixed:
    """Always the same proposer, k and schedule."""

    def __init__(self, proposer: str, k: int, schedule=None) -> None:
        self.name, self.proposer, self.k, self.schedule = "fixed", proposer, k, schedule

    def decide(self, content_class, workers, alphas) -> Decision:
        return Decision(workers[0].name, self.proposer, self.k, content_class, self.name, "fixed",
                        schedule=self.schedule)


class NoAlphas:
    def get(self, worker, proposer, content_class):
        raise AssertionError("a fixed policy reads no estimates")


def _run(policy, concurrency: int, **cfg):
    cost = ProfileCost(Profile.memory_bound(0.1))
    config = SimConfig(concurrency=concurrency, requests=60, warmup=4, **cfg)
    return simulate(policy, cost, WL, config, truth=AlphaModel.constant(0.7), alphas=NoAlphas()).row()


@pytest.mark.parametrize(("concurrency", "same_as"), [(1, 4), (4, 1)])
def test_schedule_runs_exactly_the_capped_gamma(concurrency, same_as):
    """k=4 capped to 1 above batch 2: alone it is static gamma 4, at a steady batch of 4 static gamma 1 (same
    requests, same coins: the same tokens at the same times)."""
    sched = ((2, 4), (ANY_BATCH, 1))
    got = _run(Fixed("draft", 4, sched), concurrency)
    ref = _run(Fixed("draft", same_as), concurrency)
    assert got["output_tokens_per_s"] == ref["output_tokens_per_s"]
    assert got["acceptance_rate"] == ref["acceptance_rate"]
    assert set(got["steps_by_gamma"]) == {str(same_as)} and got["mean_step_gamma"] == pytest.approx(same_as)
    assert got["mean_gamma"] == 4  # the request's k


def test_schedule_above_its_last_row_is_off():
    got = _run(Fixed("draft", 4, ((2, 4),)), 4)
    ref = _run(Fixed("none", 0), 4)
    assert got["output_tokens_per_s"] == ref["output_tokens_per_s"] and got["steps_by_gamma"].keys() == {"0"}


def test_ramp_phases_and_validation():
    cfg = SimConfig(concurrency=None, ramp=((5.0, 1), (5.0, 8)))
    assert [cfg.target_clients(t) for t in (0.0, 4.9, 5.0, 9.9, 10.0, 15.0)] == [1, 1, 8, 8, 1, 8]
    assert [cfg.next_phase(t) for t in (0.0, 5.0, 7.0, 10.0)] == [5.0, 10.0, 10.0, 15.0]
    assert cfg.clients == 8 and cfg.n_warmup == 32
    with pytest.raises(ValueError, match="ramp replaces"):
        SimConfig(concurrency=4, ramp=((5.0, 1),))
    with pytest.raises(ValueError, match="phases"):
        SimConfig(concurrency=None, ramp=((0.0, 1),))


def test_ramp_load_moves_between_its_levels():
    """1 s steps (memory-bound, off), 10-token replies: 100 s at 1 client, 100 s at 8, cycled -> the batch is
    1 or 8 but for the few seconds a ramp-down waits for replies to end: its mean is ~(1 + 8) / 2."""
    cost = ProfileCost(Profile.memory_bound(0.1))
    short = Workload("s", {"chat": 1.0}, specs={"chat": ClassSpec(16, 0.0, 10, 0.0)})
    cfg = SimConfig(concurrency=None, ramp=((100.0, 1), (100.0, 8)), requests=400, warmup=8)
    row = simulate(Fixed("none", 0), cost, short, cfg, truth=AlphaModel.constant(0.7), alphas=NoAlphas()).row()
    assert 4.0 < row["mean_running"] < 5.2
    steady = simulate(Fixed("none", 0), cost, short, SimConfig(concurrency=8, requests=120, warmup=8),
                      truth=AlphaModel.constant(0.7), alphas=NoAlphas()).row()
    assert steady["mean_running"] == pytest.approx(8.0, rel=1e-6)


def test_long_workload_has_thousands_of_output_tokens():
    wl = get_workload("long")
    _, prompt, out = wl.sample(np.random.default_rng(0), 4000)
    assert 2700 < np.median(out) < 3300 and out.max() <= 8192 and np.median(prompt) == pytest.approx(400, rel=0.1)


@pytest.fixture(scope="module")
def h200():
    cost = ProfileCost(load_profile("h200-llama3-70b"))
    return cost.worker(max_gamma=8, profile="h200-llama3-70b")


def _policy(schedule: bool):
    return build_policy(GoodputPolicy(kind="goodput", default_profile="h200-llama3-70b", schedule=schedule,
                                      explore=0.0))


def test_goodput_schedule_matches_the_admission_plan_at_its_load(h200):
    pol, ref, alphas = _policy(True), _policy(False), AlphaTable()
    for load in (0, 7, 40, 120):
        w = dataclasses.replace(h200, running=float(load), inflight=load)
        plain = ref.decide("code", [w], alphas)
        d = pol.decide("code", [w], alphas)
        assert plain.schedule is None and d.schedule is not None
        assert cap_at(d.schedule, load + 1) == d.gamma == plain.gamma and d.max_k >= d.gamma
        assert d.schedule[-1][0] == ANY_BATCH and "sched=" in d.reason
        # on a 70B GPU profile gamma falls as the batch grows, and a huge batch is off
        assert cap_at(d.schedule, 2) >= cap_at(d.schedule, 64) >= cap_at(d.schedule, 100_000) == 0


def test_goodput_schedule_for_a_request_that_is_off_at_admission(h200):
    pol, alphas = _policy(True), AlphaTable()
    w = dataclasses.replace(h200, running=2000.0, inflight=2000)
    d = pol.decide("code", [w], alphas)
    assert d.gamma == 0 and d.proposer != "none" and d.max_k > 0  # off now, drafts when the batch shrinks
    assert cap_at(d.schedule, 2001) == 0 and cap_at(d.schedule, 1) == d.max_k


def test_parse_policy_names_the_schedule_variant():
    spec = parse_policy("adaptive-schedule", "h200-llama3-70b")
    assert spec.policy.schedule is True and parse_policy("adaptive", "h200-llama3-70b").policy.schedule is False
