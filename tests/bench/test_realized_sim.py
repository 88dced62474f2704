"""Batch-1 realized-rate corrections (control/realized.py) in the simulator, against a deliberately wrong cost model
and a right one.

The wrong belief (benchmarks/profiles/wrong-eagle-step.yaml, no online calibration) prices the EAGLE head's drafting
step 3.3x what the truth (standin-8b-eagle-heavy) costs, so at concurrency 1 the policy runs lookup on about half
the stand-in fleet's requests where the head pays. The requests' decode rates show the head's price too high
against lookup's; beyond their noise, the corrections move classes back to the head. With the right belief they
move (almost) nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from adaptspec.bench.simulator import parse_policy, policy_from_file, sweep
from adaptspec.bench.traces import TraceWorkload

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import standin_traces  # noqa: E402  (the stand-in trace generator, a script)

PROFILES = ROOT / "benchmarks" / "profiles"
TRUTH = str(PROFILES / "standin-8b-eagle-heavy.yaml")


def _rates(belief: str, tmp_path: Path) -> dict[str, dict]:
    off = tmp_path / "unmeasured.yaml"
    off.write_text("policy: {kind: goodput, measured: false}\n")
    workload = TraceWorkload(standin_traces.make("fleet", 600, 2), "fleet-2", order="shuffle", seed=2)
    specs = [parse_policy("static:eagle:8", belief), parse_policy("adaptive", belief), policy_from_file(str(off))]
    rows = sweep(specs, belief, workload, [("concurrency", 1)], truth_profile=TRUTH, seed=2, requests=1600,
                 proposers=["ngram", "eagle"], calibrate=False, progress=False)
    return {r["policy"]: r for r in rows}


def test_measured_corrections_recover_part_of_what_a_wrong_step_price_loses(tmp_path):
    got = _rates(str(PROFILES / "wrong-eagle-step.yaml"), tmp_path)
    eagle, measured, unmeasured = (got[p]["output_tokens_per_s"] for p in ("static:eagle:8", "adaptive",
                                                                            "unmeasured"))
    assert unmeasured < 0.9 * eagle  # the wrong price runs lookup where the head pays
    assert got["adaptive"]["proposer_mix"]["eagle"] > got["unmeasured"]["proposer_mix"]["eagle"] + 0.1
    assert measured > 1.05 * unmeasured


def test_a_right_model_is_not_moved(tmp_path):
    got = _rates(TRUTH, tmp_path)
    assert got["adaptive"]["output_tokens_per_s"] == pytest.approx(got["unmeasured"]["output_tokens_per_s"],
                                                                    rel=0.005)
