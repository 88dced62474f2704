from pathlib import Path

from adaptspec.cli import main

POLICIES = sorted((Path(__file__).parents[2] / "policies").glob("*.yaml"))


def test_policy_check_all_shipped_files(capsys):
    assert main(["policy", "check", *map(str, POLICIES)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok: ") == len(POLICIES)
    assert "pools: none (embedded reference worker)" in out


def test_policy_check_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools:\n  - {name: a, engine: tgi, workers: [{name: w, url: 'http://h:1'}]}\n")
    assert main(["policy", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and str(bad) in err and "pools[0].engine" in err and "'tgi'" in err


def test_policy_check_mixed_files_fail(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: {kind: nope}\n")
    assert main(["policy", "check", str(POLICIES[0]), str(bad)]) == 1
    assert "ok: " in capsys.readouterr().out
