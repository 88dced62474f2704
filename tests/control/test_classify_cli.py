"""`adaptspec classify` as a user runs it: a real subprocess, text and JSONL modes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

from adaptspec.control.types import CONTENT_CLASSES


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "adaptspec", "classify", *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )


def test_text_mode_prints_class_and_scores():
    out = _run("Translate the following English text into German:\n\nThe shop opens at nine.")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["class"] == "translate"
    assert tuple(result["scores"]) == CONTENT_CLASSES
    assert abs(sum(result["scores"].values()) - 1.0) < 1e-5
    assert result["scores"]["translate"] == max(result["scores"].values())


def test_jsonl_mode_one_result_per_line_in_order(tmp_path):
    lines = [
        {"prompt": "Write a Go function that parses a CSV line into fields."},
        {"messages": [{"role": "user", "content": "Translate to Spanish: I lost my keys."}]},
        {"messages": [{"role": "user", "content": "What's the weather in Rome?"}],
         "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]},
        {"prompt": "Sara has 4 boxes with 12 pencils each. She gives away 15 pencils. How many are left?"},
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    out = _run("--jsonl", str(path))
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["class"] for r in results] == ["code", "translate", "structured", "math"]
    assert results[2]["forced_by"] == "tools"
    assert "forced_by" not in results[0]
    # stdin works the same way
    piped = _run("--jsonl", "-", stdin=path.read_text(encoding="utf-8"))
    assert piped.returncode == 0 and piped.stdout == out.stdout


def test_jsonl_bad_line_names_its_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "hello"}\n{"prompt": "fine"}\n{"prompt": "broken"\n{"prompt": "never"}\n')
    out = _run("--jsonl", str(path))
    assert out.returncode == 2
    assert len(out.stdout.splitlines()) == 2  # the lines before the bad one were written
    assert "line 3" in out.stderr and str(path) in out.stderr

    path.write_text('{"prompt": "ok"}\n{"text": "no prompt field"}\n')
    out = _run("--jsonl", str(path))
    assert out.returncode == 2 and "line 2" in out.stderr and "'prompt' or 'messages'" in out.stderr

    path.write_text('{"messages": [{"role": "user", "content": 7}]}\n')
    out = _run("--jsonl", str(path))
    assert out.returncode == 2 and "line 1" in out.stderr and "content" in out.stderr

    path.write_text("[1, 2]\n")
    out = _run("--jsonl", str(path))
    assert out.returncode == 2 and "line 1" in out.stderr and "JSON object" in out.stderr


def test_missing_file_and_missing_argument():
    out = _run("--jsonl", "/nonexistent/requests.jsonl")
    assert out.returncode == 2 and "cannot read /nonexistent/requests.jsonl" in out.stderr
    out = _run()
    assert out.returncode == 2 and "required" in out.stderr
