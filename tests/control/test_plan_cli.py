import json
import subprocess
import sys

import pytest

from adaptspec.cli import main
from adaptspec.control.costmodel import leviathan_speedup


def _plan(capsys, *argv):
    rc = main(["plan", *argv])
    out = capsys.readouterr()
    return rc, out


def test_plan_memory_bound(capsys):
    rc, out = _plan(capsys, "--alpha", "0.8", "--draft-cost", "0.1", "--max-gamma", "8")
    assert rc == 0
    d = json.loads(out.out)
    assert isinstance(d["gamma"], int) and d["gamma"] == 6
    assert d["speedup"] == pytest.approx(max(leviathan_speedup(0.8, g, 0.1) for g in range(9)), abs=1e-4)


def test_plan_off_when_draft_is_useless(capsys):
    rc, out = _plan(capsys, "--alpha", "0.1", "--draft-cost", "0.5")
    assert rc == 0 and json.loads(out.out)["gamma"] == 0


def test_plan_profile_batches(capsys):
    rc, out = _plan(capsys, "--profile", "h200-llama3-70b", "--batch", "1,256", "--proposer", "draft-8b",
                    "--alpha", "0.8")
    rows = json.loads(out.out)
    assert rc == 0 and [r["batch"] for r in rows] == [1, 256]
    assert rows[0]["gamma"] >= 3 and rows[0]["speedup"] > 1.5
    assert rows[1]["gamma"] == 0 and rows[1]["speedup"] == 1.0


def test_plan_profile_uses_prior(capsys):
    rc, out = _plan(capsys, "--profile", "h100-llama3-8b", "--class", "summarize", "--proposer", "ngram")
    d = json.loads(out.out)
    assert rc == 0 and d["alphas"]["ngram"] == 0.6 and d["proposer"] in ("ngram", "none")


def test_plan_per_position_alpha(capsys):
    rc, out = _plan(capsys, "--profile", "cpu-tiny", "--alpha", "0.84,0.6,0.39,0.27", "--proposer", "ngram")
    assert rc == 0 and json.loads(out.out)["gamma"] >= 1


@pytest.mark.parametrize("argv", [["--alpha", "1.5", "--draft-cost", "0.1"], ["--alpha", "0.5"],
                                  ["--profile", "nope"], ["--profile", "h100-llama3-8b", "--proposer", "hybrid"],
                                  ["--alpha", "x", "--draft-cost", "0.1"]])
def test_plan_bad_input(capsys, argv):
    rc, out = _plan(capsys, *argv)
    assert rc == 2 and out.err.startswith("error:")


def test_plan_console_script():
    out = subprocess.run([sys.executable, "-m", "adaptspec", "plan", "--alpha", "0.7", "--draft-cost", "0.05"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["gamma"] > 0


def test_plan_traffic_terms(capsys):
    """--propose-rate / --prefill-ratio / --prompt-tokens reach the cost model: the same numbers as best_gamma."""
    from adaptspec.control.costmodel import best_gamma
    from adaptspec.control.profiles import load_profile

    base = ["--profile", "h200-llama3-70b", "--batch", "16", "--proposer", "ngram", "--alpha", "0.8"]
    rc, out = _plan(capsys, *base)
    plain = json.loads(out.out)
    rc, out = _plan(capsys, *base, "--propose-rate", "0.4", "--prefill-ratio", "20", "--prompt-tokens", "4000")
    rag = json.loads(out.out)
    assert rc == 0 and rag["speedup"] < plain["speedup"]
    want = best_gamma(load_profile("h200-llama3-70b"), "ngram", 0.8, 16, 8, propose_rate=0.4, prefill_ratio=20,
                      prefill_chunk=4000)
    assert (rag["gamma"], rag["speedup"]) == (want.gamma, round(want.speedup, 4))
    rc, out = _plan(capsys, *base, "--propose-rate", "0")
    assert rc == 2 and "--propose-rate must be in (0, 1]" in out.err
