"""benchmarks/measure_calibration.py: the fit read from the proxy's gauges is built by ONE function, live and from a
saved run (--from-json), and a coefficient the proxy did not export is the prior's, not a fitted one."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from adaptspec.control.calibration import feature_names, prior_coefficients
from adaptspec.control.profiles import load_profile

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "measure_calibration.py"


@pytest.fixture(scope="module")
def mc():
    spec = importlib.util.spec_from_file_location("measure_calibration", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_and_nan_coefficients_are_the_prior_not_fitted(mc):
    prior = load_profile("h200-llama3-70b")
    theta = dict(zip(feature_names(), prior_coefficients(prior), strict=True))
    coef = {"overhead_s": 0.005, "compute_s_per_token": 0.0004, "kv_s_per_token": 3e-6, "draft_pass_s": 0.002}
    err = {"overhead_s": 3e-4, "compute_s_per_token": 5e-6, "kv_s_per_token": 3e-7, "draft_pass_s": math.nan}
    costs = mc.fitted_costs(coef, err, steps=3000.0, trusted=True, prior=prior, context_tokens=150.0)
    assert {n for n, f in costs.fitted.items() if f} == {"overhead_s", "compute_s_per_token", "kv_s_per_token"}
    # exported with a NaN error: the proxy held it at the prior; the value is what it exported
    assert costs.coefficients["draft_pass_s"] == 0.002 and math.isnan(costs.errors["draft_pass_s"])
    # not exported at all (the old live path counted these as fitted: None == None): the prior's value
    for name in ("draft_token_s", "eagle_pass_s", "eagle_token_s"):
        assert costs.coefficients[name] == pytest.approx(theta[name])
        assert math.isnan(costs.errors[name])
    assert costs.snapped == costs.coefficients and costs.context_tokens == 150.0 and costs.trusted
    # the fitted target prices; the unfitted draft model keeps the profile's price times the box's factor, here
    # the target's (fitted / profile step at the fit's mean batched tokens; no model proposer was fitted)
    priced = costs.apply(prior)
    assert priced.target.time(10, 1500) == pytest.approx(0.005 + 0.0004 * 10 + 3e-6 * 1500)
    tokens = max(1.0, costs.batch)
    box = priced.target.time(tokens) / prior.target.time(tokens)
    assert costs.box_scale(prior, []) == pytest.approx(min(4.0, max(0.25, box)))
    assert priced.draft("draft").time(1, 4, 150, priced.target) == pytest.approx(
        costs.box_scale(prior, []) * prior.draft("draft").time(1, 4, 150, priced.target))


def test_replay_builds_the_same_costs_as_the_live_path(mc, tmp_path, capsys, monkeypatch):
    """A saved run round-trips through JSON (NaN errors included) to the same CalibratedCosts."""
    coef = {"overhead_s": 0.006, "compute_s_per_token": 0.0005, "kv_s_per_token": 2e-6, "draft_pass_s": 0.003}
    err = {"overhead_s": 4e-4, "compute_s_per_token": 6e-6, "kv_s_per_token": 2e-7, "draft_pass_s": math.nan}
    points = [{"steps": 100.0, "batched_per_step": 10.0, "kv_per_step": 300.0, "requests_per_step": 2.0},
              {"steps": 50.0, "batched_per_step": 60.0, "kv_per_step": 2400.0, "requests_per_step": 16.0}]
    run = {"profile": "h200-llama3-70b", "steps": 150.0, "trusted": True, "coefficients": coef, "errors": err,
           "points": points}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    built = []
    real = mc.fitted_costs

    def recording(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(mc, "fitted_costs", recording)
    assert mc._replay(str(path)) == 0
    live = real(coef, err, 150.0, True, load_profile("h200-llama3-70b"), mc.mean_context(points))
    (replayed,) = built
    assert replayed.fitted == live.fitted and replayed.coefficients == live.coefficients
    assert replayed.context_tokens == live.context_tokens
    assert "Decisions" in capsys.readouterr().out


def test_mean_context_is_kv_per_request_step(mc):
    points = [{"steps": 100.0, "batched_per_step": 10.0, "kv_per_step": 300.0, "requests_per_step": 2.0},
              {"steps": 50.0, "batched_per_step": 60.0, "kv_per_step": 2400.0, "requests_per_step": 16.0}]
    assert mc.mean_context(points) == pytest.approx((100 * 300 + 50 * 2400) / (100 * 2 + 50 * 16))
    # runs saved before requests were recorded: priced as they were then (KV per batched token)
    old = [{k: v for k, v in p.items() if k != "requests_per_step"} for p in points]
    assert mc.mean_context(old) == pytest.approx((100 * 300 + 50 * 2400) / (100 * 10 + 50 * 60))


def test_recorded_scrapes_replay_as_the_proxys_windows(mc):
    """The live run's recorded scrapes (cumulative counters as dicts) become the windows a StepCalibrator sees;
    a counter that went down (engine restart) starts over, as StepCalibrator.update does."""
    from dataclasses import asdict

    from adaptspec.control.telemetry import StepCounters

    a = StepCounters(10, 0.1, 50, 1500, {"ngram": 8}, {}, 20)
    b = a.add_step(0.02, 9, 320, {"ngram": 4}, {}, 2)
    c = b.add_step(0.03, 12, 330, {"ngram": 6, "draft": 2}, {"draft": 2}, 2)
    restarted = StepCounters(1, 0.01, 3, 100, {}, {}, 1)
    d = restarted.add_step(0.01, 4, 120, {}, {}, 1)
    scrapes = [{"t": float(i), **asdict(x)} for i, x in enumerate((a, b, b, c, restarted, d))]
    ws = mc.scrape_windows(scrapes)
    assert [(w.steps, w.batched_tokens, w.kv_tokens, dict(w.drafted_tokens)) for w in ws] == [
        (1, 9, 320, {"ngram": 4}), (1, 12, 330, {"ngram": 6, "draft": 2}), (1, 4, 120, {})]
    assert ws[1].step_seconds == pytest.approx(0.03) and ws[1].draft_passes == {"draft": 2}


def test_simulated_run_fits_the_truth_and_compares_the_42_cells(mc, tmp_path, monkeypatch, capsys):
    """--simulate: the simulated engine costs cpu-tiny (additive), the proxy's calibrator (prior h200-llama3-70b) is
    fed its counters; the fitted target slopes land within 10% of cpu-tiny's, and the decisions of the fit are
    compared with cpu-tiny's over the 6 classes x 7 loads, at the fit's context and at cpu-tiny's."""
    out = tmp_path / "sim.json"
    monkeypatch.setattr("sys.argv", ["measure_calibration.py", "--simulate", "--profile", "h200-llama3-70b",
                                     "--truth-profile", "cpu-tiny", "--concurrency", "1,8", "--requests", "40",
                                     "--json", str(out)])
    assert mc.main() == 0
    run = json.loads(out.read_text())
    coef = run["coefficients"]
    for name in ("overhead_s", "compute_s_per_token", "kv_s_per_token"):
        assert coef[name]["is_fitted"] and abs(coef[name]["rel_error"]) < 0.10, (name, coef[name])
    assert coef["compute_s_per_token"]["truth"] == pytest.approx(load_profile("cpu-tiny").target.compute_s_per_token)
    assert run["trusted"] and [p["concurrency"] for p in run["points"]] == [1, 8]
    for block in (run, run["same_context"]):
        assert block["decisions_equal_to_cpu_tiny"]["of"] == 42
        assert block["decisions_equal_to_cpu_tiny"]["wrong"] == 0  # h200-llama3-70b alone never decides like cpu-tiny
    # at cpu-tiny's context the fit mostly decides like cpu-tiny (the mixed workload's own context is ~4x longer)
    assert run["same_context"]["decisions_equal_to_cpu_tiny"]["fit"] >= 21
    assert "Decisions (6 classes x 7 loads" in capsys.readouterr().out
