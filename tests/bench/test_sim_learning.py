"""Plumbing of benchmarks/sim_learning.py (issue 31 item 5) on a tiny scope: cells and the acceptance block exist.

No threshold assertions on the results: the full-scope numbers live in docs/results/sim-learning.md."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _load(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # the script imports its sibling standin_traces
    spec = importlib.util.spec_from_file_location("sim_learning", REPO / "benchmarks" / "sim_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_scope_writes_cells_and_acceptance(tmp_path, capsys, monkeypatch):
    mod = _load(monkeypatch)
    md, js = tmp_path / "s.md", tmp_path / "s.json"
    rc = mod.main(["--seeds", "0", "--families", "short", "--n", "120", "--concurrency", "1,8",
                   "--profiles", "standin-8b-eagle-heavy", "--oracle-requests", "80", "--md", str(md), "--json", str(js)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "[1/1] standin-8b-eagle-heavy short seed=0" in out  # one progress line per case

    data = json.loads(js.read_text())
    assert "rows" not in data  # the cells, not the raw rows
    cells = data["cells"]
    assert [(c["profile"], c["family"], c["seed"], c["concurrency"]) for c in cells] == [
        ("standin-8b-eagle-heavy", "short", 0, 1), ("standin-8b-eagle-heavy", "short", 0, 8)]
    for c in cells:
        assert c["best_static"] in ("off", "static:eagle:3", "static:eagle:8", "static:ngram:8")
        assert set(c["statics"]) == {"off", "static:eagle:3", "static:eagle:8", "static:ngram:8"}
        for k in ("adaptive_over_best_static", "warm_over_cold", "adaptive_over_oracle"):
            assert c[k] > 0
        assert "gamma" in c["adaptive_ran"] and "gamma" in c["adaptive_cold_ran"]
    # c=1 is the first point: warm and cold adaptive both start from the priors there
    assert cells[0]["warm_over_cold"] == 1.0

    acc = data["acceptance"]
    assert set(acc) == {"adaptive_over_best_static", "warm_over_cold", "adaptive_over_oracle",
                        "adaptive_over_oracle_long"}
    assert cells[0]["oracle_requests"] == 80 and cells[0]["adaptive_over_oracle_long"] > 0
    assert cells[1]["adaptive_over_oracle_long"] is None  # only at the lowest level
    assert acc["adaptive_over_best_static"]["cells"] == 2 and acc["warm_over_cold"]["cells"] == 2
    assert acc["adaptive_over_oracle"]["cells"] == 1 and acc["adaptive_over_oracle"]["concurrency"] == 1
    assert acc["adaptive_over_oracle_long"]["cells"] == 1
    for a in acc.values():
        assert a["min"] is not None and isinstance(a["under"], list)

    text = md.read_text()
    assert "| standin-8b-eagle-heavy | short | 0 |" in text
    assert "A/S c=1" in text and "W/C c=8" in text and "A/O c=1" in text
    assert "## Acceptance" in text
    assert text.count("target >= ") == 4
    assert text in out  # printed too

    # --render re-draws the same summary from the --json file, without simulating
    again = tmp_path / "again.md"
    assert mod.main(["--render", str(js), "--md", str(again)]) == 0
    assert again.read_text() == text
