"""`report.round_spread`: the run-to-run spread of adaptive / best static from the rounds of one compare run."""

from __future__ import annotations

import pytest

from adaptspec.bench import report


def _row(policy: str, merged: float, rounds: list[float], c: int = 128) -> dict:
    return {"concurrency": c, "policy": policy, "output_tokens_per_s": merged, "round_output_tokens_per_s": rounds}


def test_ratios_per_round_against_the_best_static_of_the_merged_rows():
    rows = [_row("off", 300.0, [280.0, 320.0, 300.0]), _row("static:ngram:4", 290.0, [300.0, 270.0, 300.0]),
            _row("adaptive", 297.0, [266.0, 320.0, 305.0])]
    s = report.round_spread(rows)[128]
    assert s["best"] == "off"  # best by the merged rows, although ngram won round 1
    assert s["ratios"] == pytest.approx([266 / 280, 1.0, 305 / 300])
    assert s["merged"] == pytest.approx(0.99)
    text = report.round_spread_text(rows)
    assert "per round 0.95, 1.00, 1.02 (spread 0.95-1.02)" in text and "concurrency 128" in text


def test_no_spread_without_rounds_or_adaptive():
    rows = [_row("off", 300.0, [300.0]), _row("adaptive", 290.0, [290.0])]
    assert report.round_spread_text(rows) == ""  # one round: no spread to state
    assert report.round_spread([_row("off", 1.0, [1.0, 1.0])]) == {}
    assert report.round_spread([{"concurrency": 1, "policy": "off", "output_tokens_per_s": 5.0},
                                {"concurrency": 1, "policy": "adaptive", "output_tokens_per_s": 5.0}]) == {}


def test_engine_summary_and_table_show_what_the_workers_did():
    from adaptspec.bench.compare import engine_summary
    from adaptspec.control.telemetry import StepCounters

    w = StepCounters(10, 2.5, 1500, 64000, {"ngram": 40.0, "eagle": 0.0}, {"eagle": 0.0}, 1280)
    e = engine_summary(w)
    assert e == {"steps": 10, "step_ms": 250.0, "batched_per_step": 150.0, "kv_per_step": 6400.0,
                 "requests_per_step": 128.0,
                 "passes_per_step": {}, "drafted_per_step": {"ngram": 4.0}}
    text = report.engine_table([{"concurrency": 128, "policy": "adaptive", "engine": e}, _row("off", 1.0, [1.0])])
    assert "| 128 | adaptive | 10 | 250.0 | 150.0 | 128.0 | – | ngram:4.0 |" in text
    assert "off" not in text  # rows without telemetry are left out
    assert report.engine_table([_row("off", 1.0, [1.0])]) == ""
