"""The holdout / switchback / guard in the simulator against its paired truth (small versions of
benchmarks/holdout.sh; the full 20-seed figures are in docs/results/holdout.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adaptspec.bench.holdout_sim import Setup, _workload, cost_check, coverage, guard_check, switchback_check
from adaptspec.bench.simulator import parse_policy
from adaptspec.control.config import HoldoutConfig, SwitchbackConfig

TRACE = str(Path(__file__).resolve().parents[2] / "benchmarks" / "traces" / "tiny-shipped.jsonl")


@pytest.fixture(scope="module")
def trace():
    return _workload(TRACE, "mixed")


def test_request_level_interval_covers_the_paired_truth_at_low_load(trace):
    rows = coverage(parse_policy("adaptive", "cpu-tiny"), Setup("cpu-tiny", trace, 1, 0, 900, 0),
                    HoldoutConfig(share=0.1, seed=0))
    assert rows, "no stratum got an interval"
    top = max(rows, key=lambda r: r["n_control"])
    assert top["n_control"] >= 10 and top["covered"], top
    assert sum(r["covered"] for r in rows) >= len(rows) - 1


def test_synthetic_workload_interval_covers_too():
    s = Setup("h200-llama3-70b", _workload(None, "mixed"), 1, 3, 400, 0)
    rows = coverage(parse_policy("adaptive", "h200-llama3-70b"), s, HoldoutConfig(share=0.1, seed=3))
    top = max(rows, key=lambda r: r["n_control"])
    assert top["covered"] and 1.5 < top["truth"] < 3.0, top


def test_a_two_percent_holdout_costs_little_throughput(trace):
    out = cost_check(parse_policy("adaptive", "cpu-tiny"), Setup("cpu-tiny", trace, 1, 0, 600, 0),
                     HoldoutConfig(share=0.02))
    # the claim is the upper bound; below zero is the run's path (held requests change what the policy learns
    # and when it probes: -2.9% on the re-measured cpu-tiny, +1.5% on the 2026-11-30 one), bounded for sanity
    assert -0.03 <= out["cost"] <= 0.015, out
    assert out["held"] >= 6


def test_guard_turns_a_slower_always_on_policy_off(trace):
    # one seed; over 20 seeds it engaged within 2 minutes in 20 (median 82 s, docs/results/holdout.md)
    sb = SwitchbackConfig(share=0.5, window_s=3.0, washout_s=0.6)
    out = guard_check(parse_policy("static:draft:4", "cpu-tiny"), Setup("cpu-tiny", trace, 1, 0, 250, 0),
                      HoldoutConfig(share=0.02), sb)
    assert out["slower_than_off"] and out["guarded_buckets"] == ["1"]
    assert out["guard_at_s"] is not None and out["guard_at_s"] <= 240.0, out
    assert out["tok_s_with_guard"] > out["tok_s_off"] * out["ratio_truth"]  # better than always-on


def test_guard_leaves_a_faster_policy_alone(trace):
    sb = SwitchbackConfig(share=0.5, window_s=3.0, washout_s=0.6)
    out = guard_check(parse_policy("static:ngram:4", "cpu-tiny"), Setup("cpu-tiny", trace, 1, 0, 250, 0),
                      HoldoutConfig(share=0.02), sb)
    assert not out["slower_than_off"] and out["guard_at_s"] is None and out["guarded_buckets"] == []


def test_switchback_estimates_the_system_throughput_ratio_at_high_load(trace):
    # a short run (12000 requests, ~8 windows each): the estimate lands near the truth and says "slower"; the
    # 20-seed coverage figure needs the long windows of benchmarks/holdout.sh (docs/results/holdout.md). The
    # windows must outlast the carry-over of a 128-request queue: on the re-measured cpu-tiny, 80 s windows with
    # 30 s washout read 0.887 for a truth of 0.848 (+4.5%), 120 s with 45 s washout 0.851 (+0.4%)
    sb = SwitchbackConfig(share=0.5, window_s=120.0, washout_s=45.0, cooldown_s=20.0)
    out = switchback_check(parse_policy("static:draft:4", "cpu-tiny"), Setup("cpu-tiny", trace, 128, 0, 12000, 600),
                           sb)
    assert out["windows_policy"] >= 3 and out["windows_off"] >= 3
    assert out["truth"] < 0.9 and out["high"] < 1.0
    assert out["estimate"] == pytest.approx(out["truth"], rel=0.03), out


ABBA = {"share": 0.5, "window_s": 120.0, "washout_s": 30.0, "order": "abba"}


def test_guard_at_load_engages_once_the_drafting_requests_have_drained():
    # H200-70B c=128, forced always-on draft:4 (0.72x of off). Seed 5's schedule runs the policy in window 0, then
    # two off windows: the requests of the switch at 120 s are pure only once the last drafting one has ended
    # (51-72 s after a switch, 20 seeds), so the guard cannot engage before ~170 s; over 20 seeds the seeds whose
    # schedule starts with the policy engaged at 194-236 s (docs/results/holdout.md)
    s = Setup("h200-llama3-70b", _workload(None, "mixed"), 128, 5, 1500, 0)
    out = guard_check(parse_policy("static:draft:4", "h200-llama3-70b"), s, HoldoutConfig(share=0.02, seed=5),
                      SwitchbackConfig(**ABBA, seed=5))
    assert out["slower_than_off"] and out["guarded_buckets"] == ["128-255"]
    assert 120.0 + 51.0 <= out["guard_at_s"] <= 300.0, out
    ev = out["evidence"]["128-255"]["requests"]
    assert ev["high"] < 1.0 and ev["n_control"] >= 10 and ev["n_treated"] >= 10


def test_guard_at_moderate_load_leaves_a_faster_policy_alone():
    # c=32: always-on draft:4 makes 1.14x of off; its pure requests estimate above that (1.17-1.39 over 20 seeds)
    s = Setup("h200-llama3-70b", _workload(None, "mixed"), 32, 0, 1500, 0)
    out = guard_check(parse_policy("static:draft:4", "h200-llama3-70b"), s, HoldoutConfig(share=0.02, seed=0),
                      SwitchbackConfig(**ABBA, seed=0))
    assert not out["slower_than_off"] and out["guard_at_s"] is None and out["guarded_buckets"] == []
    assert out["evidence"]["32-63"]["requests"]["low"] > 1.0
