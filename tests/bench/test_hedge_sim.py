"""The hedge (policy.switchback.control = a fixed plan) against a deliberately wrong cost model, in the simulator.

The policy believes the EAGLE head costs ~10x what it does (benchmarks/profiles/wrong-eagle-overpriced.yaml, no
online calibration) and runs it far less than it pays on the stand-in fleet traffic; static EAGLE:3 is ~1.25x
faster at concurrency 8. Hedged against EAGLE:3 with switchback share s, the guard finds the policy slower and runs
the plan in all but s of the windows: realized goodput within s x the gap of the better of the two (README "The
hedge"), less the windows before the guard engaged."""

from __future__ import annotations

import sys
from pathlib import Path

from adaptspec.bench.holdout_sim import Setup, hedge_check
from adaptspec.bench.simulator import parse_policy
from adaptspec.bench.traces import TraceWorkload
from adaptspec.control.config import HoldoutConfig, SwitchbackConfig

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import standin_traces  # noqa: E402  (the stand-in trace generator, a script)

PROFILES = ROOT / "benchmarks" / "profiles"


def test_hedge_recovers_what_a_wrong_model_loses():
    reqs = standin_traces.make("fleet", 600, 0)
    workload = TraceWorkload(reqs, "fleet-0", order="shuffle", seed=0)
    belief = str(PROFILES / "wrong-eagle-overpriced.yaml")
    s = Setup(belief, workload, 8, 0, 5000, 0, truth_profile=str(PROFILES / "standin-8b-eagle-heavy.yaml"))
    sb = SwitchbackConfig(share=0.2, window_s=30.0, washout_s=10.0, control="eagle:3")
    out = hedge_check(parse_policy("adaptive", belief), s, HoldoutConfig(share=0.02), sb)
    assert out["policy_over_best"] < 0.9  # the wrong model loses >10% to the fixed plan
    assert out["guard_at_s"] is not None and out["guarded_buckets"] == ["8-15"]
    assert out["hedged_over_best"] >= out["bound"] - 0.02  # within the bound, less the first windows
    assert out["hedged_tok_s"] > 1.1 * out["policy_tok_s"]
