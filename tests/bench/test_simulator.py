"""The simulator against closed forms (Leviathan et al. 2023), its randomness, determinism and rows."""

from __future__ import annotations

import numpy as np
import pytest

from adaptspec.bench.simulator import (
    ProfileCost,
    SimConfig,
    _uniforms,
    _with_load,
    accept_counts,
    simulate,
)
from adaptspec.bench.workloads import Acceptance, AlphaModel, ClassSpec, Workload, get_workload
from adaptspec.control.costmodel import (
    DraftCost,
    StepTimeModel,
    expected_tokens,
    expected_tokens_per_position,
    leviathan_speedup,
)
from adaptspec.control.estimators import TrafficShape
from adaptspec.control.profiles import Profile, load_profile
from adaptspec.control.types import CONTENT_CLASSES, Decision, WorkerState


class Fixed:
    """A policy that always gives the same (proposer, gamma): the static arm, spelled out."""

    def __init__(self, proposer: str, gamma: int) -> None:
        self.name, self.proposer, self.gamma = "fixed", proposer, gamma

    def decide(self, content_class, workers, alphas) -> Decision:
        return Decision(workers[0].name, self.proposer, self.gamma, content_class, self.name, "fixed")


class NoAlphas:
    def get(self, worker, proposer, content_class):
        raise AssertionError("a fixed policy reads no estimates")


LONG = Workload("long", {"chat": 1.0}, specs={"chat": ClassSpec(16, 0.0, 4000, 0.0, output_max=4000)})


@pytest.mark.parametrize(("alpha", "gamma", "c"), [(0.8, 4, 0.1), (0.6, 3, 0.05), (0.9, 7, 0.02), (0.5, 1, 0.2)])
def test_batch1_memory_bound_matches_leviathan(alpha, gamma, c):
    cost = ProfileCost(Profile.memory_bound(c))
    truth = AlphaModel.constant(alpha)
    cfg = SimConfig(concurrency=1, requests=30, warmup=1, max_gamma=8)
    off = simulate(Fixed("none", 0), cost, LONG, cfg, truth=truth, alphas=NoAlphas()).row()
    spec = simulate(Fixed("draft", gamma), cost, LONG, cfg, truth=truth, alphas=NoAlphas()).row()
    assert off["output_tokens_per_s"] == pytest.approx(1.0, rel=1e-3)  # one token per 1-second step
    ratio = spec["output_tokens_per_s"] / off["output_tokens_per_s"]
    assert ratio == pytest.approx(leviathan_speedup(alpha, gamma, c), rel=0.02)
    assert spec["speculation_share"] == 1.0 and spec["mean_gamma"] == gamma


@pytest.mark.parametrize(("alpha", "gamma"), [(0.8, 4), (0.5, 2)])
def test_compute_bound_batch_speculation_costs_gamma_plus_one(alpha, gamma):
    """Compute-bound verification (time per batched token, free drafts): speculation at batch 16 changes
    throughput by E / (gamma + 1) < 1, the slowdown the adaptive policy exists to avoid."""
    prof = Profile("compute-bound", StepTimeModel(compute_s_per_token=1e-3), 0.0,
                   {"draft": DraftCost("eagle", fraction=0.0)}, {})
    cost, truth = ProfileCost(prof), AlphaModel.constant(alpha)
    cfg = SimConfig(concurrency=16, requests=32, warmup=8)
    off = simulate(Fixed("none", 0), cost, LONG, cfg, truth=truth, alphas=NoAlphas()).row()
    spec = simulate(Fixed("draft", gamma), cost, LONG, cfg, truth=truth, alphas=NoAlphas()).row()
    ratio = spec["output_tokens_per_s"] / off["output_tokens_per_s"]
    assert ratio == pytest.approx(expected_tokens(alpha, gamma) / (gamma + 1), rel=0.02)
    assert ratio < 1.0


def test_per_position_decay_matches_expected_tokens():
    cost = ProfileCost(Profile.memory_bound(0.0))
    truth = AlphaModel({"draft": dict.fromkeys(CONTENT_CLASSES, Acceptance(0.9, 0.8))})
    cfg = SimConfig(concurrency=1, requests=30, warmup=1)
    row = simulate(Fixed("draft", 5), cost, LONG, cfg, truth=truth, alphas=NoAlphas()).row()
    expected = expected_tokens_per_position(Acceptance(0.9, 0.8).curve(5))
    assert row["output_tokens_per_s"] == pytest.approx(expected, rel=0.02)


def test_accept_length_distribution_is_exact():
    """n = 2^17 draws of the counter-based coins: each accept length within 6 sigma of n*p (STYLE.md)."""
    n = 1 << 17
    a = np.array([0.8, 0.7, 0.6, 0.5])
    u = _uniforms(7, np.arange(n), np.zeros(n, dtype=np.int64), 1, 4)[:, 0, :]  # [n, 4]
    acc = accept_counts(u, a[None, :], np.full(n, 4))
    run = np.concatenate([[1.0], np.cumprod(a)])  # P(reach position j)
    p = np.array([run[j] * (1 - a[j]) for j in range(4)] + [run[4]])
    counts = np.bincount(acc, minlength=5)
    assert np.all(np.abs(counts - n * p) <= 6 * np.sqrt(n * p * (1 - p)) + 5)
    # gamma caps the run: gamma 2 never accepts more than 2
    acc2 = accept_counts(u, a[None, :], np.full(n, 2))
    assert acc2.max() == 2 and np.bincount(acc2, minlength=5)[3:].sum() == 0
    # the coins themselves: 16 equal bins per column
    for col in range(4):
        h = np.bincount((u[:, col] * 16).astype(int), minlength=16)
        assert np.all(np.abs(h - n / 16) <= 6 * np.sqrt(n / 16 * 15 / 16) + 5)


def _run(seed=0, fast=True, conc=6, policy=None, rate=None):
    cost = ProfileCost(load_profile("h200-llama3-70b"))
    cfg = SimConfig(concurrency=None if rate else conc, rate=rate, requests=40, warmup=4, seed=seed)
    return simulate(policy or Fixed("draft", 3), cost, get_workload("mixed"), cfg,
                    truth=AlphaModel(aliases=cost.truth_aliases()), alphas=NoAlphas(), worker=cost.worker(),
                    fast=fast).row()


def test_deterministic_under_seed_and_span_fast_path_is_exact():
    a, b = _run(seed=3), _run(seed=3)
    assert a == b
    assert _run(seed=4) != a
    assert _run(seed=3, fast=False) == a  # the multi-step fast path changes nothing
    assert _run(seed=1, rate=2.0, fast=False) == _run(seed=1, rate=2.0)


def test_row_schema_and_consistency():
    row = _run()
    for key in ("output_tokens_per_s", "requests_per_s", "tpot_ms_p50", "tpot_ms_p99", "ttft_ms_p50",
                "ttft_ms_p99", "e2e_s_p50", "e2e_s_p99", "speculation_share", "mean_gamma", "proposer_mix",
                "acceptance_rate", "mean_running", "requests"):
        assert key in row
    assert row["requests"] == 40
    assert row["proposer_mix"]["draft"] == 1.0 and row["speculation_share"] == 1.0
    assert row["tpot_ms_p50"] <= row["tpot_ms_p99"] and row["ttft_ms_p50"] <= row["ttft_ms_p99"]
    assert 0 < row["acceptance_rate"] < 1
    assert row["mean_running"] == pytest.approx(6.0)  # 6 closed-loop clients, no think time: 6 running


def test_calibration_anchors():
    """The profile + workload reproduce the public anchors the module docstring cites."""
    cost = ProfileCost(load_profile("h100-llama3-70b"))
    off = _run(policy=Fixed("none", 0), conc=1)
    h100 = simulate(Fixed("none", 0), cost, LONG, SimConfig(concurrency=1, requests=4, warmup=1),
                    alphas=NoAlphas(), worker=cost.worker()).row()
    assert 35 <= h100["tpot_ms_p50"] <= 47  # ~41 ms/token for 70B on H100 at batch 1
    # n-gram: Spec-Bench's ~2.4-2.7x on summarization, ~1.05x on translation (batch 1)
    h200 = ProfileCost(load_profile("h200-llama3-70b"))
    cfg = SimConfig(concurrency=1, requests=24, warmup=2)
    speed = {}
    for cls in ("summarize", "translate"):
        wl = get_workload(cls)
        base = simulate(Fixed("none", 0), h200, wl, cfg, alphas=NoAlphas(), worker=h200.worker()).row()
        ng = simulate(Fixed("ngram", 4), h200, wl, cfg, alphas=NoAlphas(), worker=h200.worker()).row()
        speed[cls] = base["tpot_ms_p50"] / ng["tpot_ms_p50"]
    assert 2.2 <= speed["summarize"] <= 2.9
    assert 0.95 <= speed["translate"] <= 1.10
    assert off["output_tokens_per_s"] > 0


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="exactly one"):
        SimConfig(concurrency=4, rate=1.0)
    with pytest.raises(ValueError, match="concurrency"):
        SimConfig(concurrency=0)


def test_draft_passes_are_shared_by_the_step():
    """A draft model runs max(gamma) passes; pass k carries the requests drafting at least k tokens."""
    prof = load_profile("h200-llama3-70b")
    cost = ProfileCost(prof)
    model = prof.draft("draft").model
    kv = 4000
    t = cost.draft_time("draft", np.array([1, 4, 4, 2]), kv)
    expect = (model.time(4, kv) + model.time(3, kv * 3 / 4) + 2 * model.time(2, kv * 2 / 4))
    assert t == pytest.approx(expect)
    # prompt lookup: one lookup per step whatever gamma
    ng = prof.draft("ngram")
    assert cost.draft_time("ngram", np.array([1, 8]), kv) == pytest.approx(ng.step_s + 2 * ng.request_s)


def test_the_simulated_proxy_learns_the_prefill_ratio_from_finished_requests():
    """The policy sees what the real proxy would: moving averages of finished requests' prompt and output tokens."""
    traffic = TrafficShape()
    assert _with_load(WorkerState("w"), 3, 1, traffic).prefill_ratio == 0.0  # nothing finished yet
    traffic.note(1000.0, 100.0)
    w = _with_load(WorkerState("w"), 3, 1, traffic)
    assert (w.prefill_ratio, w.prompt_tokens, w.load) == (10.0, 1000.0, 4.0)
    for _ in range(1000):
        traffic.note(200.0, 200.0)
    assert _with_load(WorkerState("w"), 0, 0, traffic).prefill_ratio == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("warm", [True, False])
def test_a_warm_sweep_keeps_one_policy_object_from_point_to_point(monkeypatch, warm):
    """A live proxy keeps its policy object while its load moves (the calibration probes' schedules and back-offs,
    the rule book, the kept pass group): a warm sweep builds the policy once and plays every point with it; a cold
    start builds a fresh one per point."""
    import adaptspec.control.policy as policy_module
    from adaptspec.bench.simulator import parse_policy, sweep

    built = []
    real = policy_module.build_policy

    def spy(cfg):
        built.append(real(cfg))
        return built[-1]

    monkeypatch.setattr(policy_module, "build_policy", spy)
    spec = parse_policy("adaptive", "h100-llama3-8b-measured", 0)
    rows = sweep([spec], "h100-llama3-8b-measured", get_workload("mixed"),
                 [("concurrency", 1.0), ("concurrency", 4.0), ("concurrency", 8.0)], requests=16, warmup=4,
                 progress=False, warm_start=warm)
    assert [r["concurrency"] for r in rows] == [1.0, 4.0, 8.0]
    assert len(built) == (1 if warm else 3)
    assert len({id(p) for p in built}) == len(built)
