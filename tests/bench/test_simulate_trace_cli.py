"""`adaptspec simulate --trace ... --truth-profile ...`: the scripted-check interface of issue 10."""

from __future__ import annotations

import json

from adaptspec.bench.report import check_targets, throughput_table
from adaptspec.bench.traces import dump, synthesize
from adaptspec.bench.workloads import get_workload
from adaptspec.cli import main

ROW_KEYS = {"policy", "concurrency", "output_tokens_per_s", "tpot_ms_p50", "ttft_ms_p50", "speculation_share",
            "mean_gamma", "proposer_mix", "acceptance_rate", "profile", "truth_profile", "workload", "seed"}


def test_trace_replay_cli_rows_and_oracle_column(tmp_path, capsys):
    a = dump(synthesize(get_workload("code"), 12, seed=1, max_k=6, proposers=("ngram", "eagle")), tmp_path / "a.jsonl")
    b = dump(synthesize(get_workload("chat"), 12, seed=2, max_k=6, proposers=("ngram",)), tmp_path / "b.jsonl")
    out = tmp_path / "rows.json"
    rc = main(["simulate", "--trace", str(a), "--trace", str(b), "--profile", "h200-llama3-70b",
               "--truth-profile", "h100-llama3-8b", "--proposers", "ngram,eagle",
               "--policies", "off,static:eagle:3,adaptive,oracle", "--concurrency", "1,8", "--requests", "16",
               "--warmup", "4", "--seed", "3", "--json", str(out), "--no-progress"])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [(r["policy"], r["concurrency"]) for r in rows] == [
        (p, c) for p in ("off", "static:eagle:3", "adaptive", "oracle") for c in (1, 8)]
    for r in rows:
        assert set(r) >= ROW_KEYS
        assert r["workload"] == "a+b" and r["truth_profile"] == "h100-llama3-8b" and r["requests"] == 16
    # the chat trace has no eagle runs: those requests are not offered eagle, so static:eagle:3 runs off for them
    by = {(r["policy"], r["concurrency"]): r for r in rows}
    assert 0 < by[("static:eagle:3", 1)]["proposer_mix"]["eagle"] < 1
    # --proposers ngram,eagle: the truth profile's draft model is not offered, to any policy
    assert all(r["proposer_mix"]["draft"] == 0 for r in rows)
    assert by[("adaptive", 1)]["speculation_share"] > 0.5 and by[("oracle", 1)]["speculation_share"] > 0.5
    text = capsys.readouterr().out
    assert "adaptive / oracle" in text and "x oracle at the lowest load" in text
    t = check_targets(rows)
    assert set(t["ratio_to_oracle"]) == {1, 8}
    assert "adaptive / oracle" in throughput_table(rows)


def test_trace_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "class": "code", "prompt_tokens": 3, "output_tokens": 2, "max_k": 2, '
                   '"accept_runs": {"ngram": [1, 9]}}\n')
    assert main(["simulate", "--trace", str(bad), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "line 1" in err and "accept_runs.ngram[1]" in err and str(bad) in err
    assert main(["simulate", "--policies", "oracle", "--requests", "4", "--no-progress"]) == 2
    assert "needs acceptance traces" in capsys.readouterr().err
    assert main(["simulate", "--truth-profile", "tpu-x", "--no-progress"]) == 2
    assert "unknown profile" in capsys.readouterr().err
