"""`adaptspec simulate` end to end: a small sweep with the controller's real policies (CI smoke run)."""

from __future__ import annotations

import json

import pytest

from adaptspec.bench.report import check_targets
from adaptspec.bench.simulator import parse_policy
from adaptspec.cli import main
from adaptspec.errors import ConfigError

ROW_KEYS = {"policy", "concurrency", "output_tokens_per_s", "tpot_ms_p50", "tpot_ms_p99", "ttft_ms_p50",
            "e2e_s_p50", "e2e_s_p99", "speculation_share", "mean_gamma", "proposer_mix", "profile", "workload"}


def test_smoke_sweep_rows_plot_and_policy_file(tmp_path, capsys):
    pol = tmp_path / "cautious.yaml"
    pol.write_text("policy: {kind: goodput, margin: 1.2, default_profile: h200-llama3-70b}\n")
    out = tmp_path / "sim.json"
    rc = main(["simulate", "--profile", "h200-llama3-70b", "--workload", "mixed",
               "--policies", "off,static:draft:4,adaptive,bandit", "--policy-file", str(pol),
               "--concurrency", "1,64", "--requests", "24", "--warmup", "8", "--seed", "5",
               "--json", str(out), "--plot", str(tmp_path / "sim.png"), "--md", str(tmp_path / "sim.md"),
               "--no-progress"])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [(r["policy"], r["concurrency"]) for r in rows] == [
        (p, c) for p in ("off", "static:draft:4", "adaptive", "bandit", "cautious") for c in (1, 64)]
    for r in rows:
        assert set(r) >= ROW_KEYS
        assert r["requests"] == 24 and r["output_tokens_per_s"] > 0
    by = {(r["policy"], r["concurrency"]): r for r in rows}
    assert by[("off", 1)]["speculation_share"] == 0.0
    assert by[("static:draft:4", 1)]["proposer_mix"]["draft"] == 1.0
    # at batch 1 speculation pays: the adaptive policy speculates and beats off
    assert by[("adaptive", 1)]["speculation_share"] > 0.9
    assert by[("adaptive", 1)]["output_tokens_per_s"] > 1.5 * by[("off", 1)]["output_tokens_per_s"]
    assert (tmp_path / "sim.png").read_bytes()[:4] == b"\x89PNG"
    assert "| concurrency |" in capsys.readouterr().out


def test_same_seed_same_rows(tmp_path):
    args = ["simulate", "--policies", "threshold,adaptive", "--concurrency", "4", "--requests", "16",
            "--warmup", "4", "--no-progress"]
    main([*args, "--seed", "1", "--json", str(tmp_path / "a.json")])
    main([*args, "--seed", "1", "--json", str(tmp_path / "b.json")])
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()


def test_open_loop_rate(tmp_path):
    rc = main(["simulate", "--policies", "off", "--rate", "0.5,2", "--requests", "16", "--warmup", "4",
               "--no-progress", "--json", str(tmp_path / "r.json")])
    assert rc == 0
    rows = json.loads((tmp_path / "r.json").read_text())
    assert [r["rate"] for r in rows] == [0.5, 2.0]
    # below saturation an open loop delivers about the offered load
    assert rows[0]["requests_per_s"] == pytest.approx(0.5, rel=0.6)


@pytest.mark.parametrize(("argv", "msg"), [
    (["--policies", "static:draft"], "static:<proposer>:<gamma>"),
    (["--policies", "sometimes"], "unknown policy"),
    (["--profile", "tpu-llama"], "unknown profile"),
    (["--workload", "poetry"], "unknown workload"),
    (["--concurrency", "0"], "concurrency"),
    (["--proposers", "medusa"], "proposers"),
])
def test_bad_arguments_are_clear_errors(argv, msg, capsys):
    assert main(["simulate", "--no-progress", "--requests", "4", *argv]) == 2
    assert msg in capsys.readouterr().err


def test_policy_names():
    assert parse_policy("off", "h200-llama3-70b").policy.gamma == 0
    assert parse_policy("static:ngram:3", "h200-llama3-70b").policy.proposer == "ngram"
    assert parse_policy("adaptive", "h200-llama3-70b").policy.kind == "goodput"
    assert parse_policy("explore", "h200-llama3-70b").policy.kind == "bandit"
    with pytest.raises(ConfigError):
        parse_policy("static:medusa:3", "h200-llama3-70b")


def test_target_check_is_computed_from_rows():
    rows = [{"policy": p, "concurrency": c, "output_tokens_per_s": v}
            for p, c, v in [("off", 1, 10), ("off", 64, 100), ("static:draft:4", 1, 20), ("static:draft:4", 64, 80),
                            ("adaptive", 1, 21), ("adaptive", 64, 99)]]
    t = check_targets(rows)
    assert t["ok"] and t["min_ratio_to_best"] == pytest.approx(0.99)
    rows[-1]["output_tokens_per_s"] = 90
    t = check_targets(rows)
    assert not t["t1_ok"] and t["t3_ok"]
