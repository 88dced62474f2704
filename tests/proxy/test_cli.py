"""`adaptspec serve` refuses bad input with one clear line and a non-zero exit (no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys

from .conftest import REPO


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adaptspec", "serve", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env=env)


def test_bad_config_names_file_key_and_value(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools:\n  - name: p\n    engine: tgi\n    workers: [{name: a, url: 'http://x:1'}]\n")
    r = _serve("--config", str(bad))
    assert r.returncode == 2
    assert str(bad) in r.stderr and "pools[0].engine" in r.stderr and "'tgi'" in r.stderr and not r.stdout
    assert "Traceback" not in r.stdout + r.stderr


def test_unset_env_var_in_config(tmp_path):
    cfg = tmp_path / "env.yaml"
    cfg.write_text("pools:\n  - name: p\n    workers: [{name: a, url: '${ADAPTSPEC_TEST_UNSET_URL}'}]\n")
    r = _serve("--config", str(cfg))
    assert r.returncode == 2 and "${ADAPTSPEC_TEST_UNSET_URL}" in r.stderr and "line 3" in r.stderr


def test_port_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _serve("--upstream", "http://127.0.0.1:9", "--port", str(port))
    assert r.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert "Traceback" not in r.stderr and "Unclosed" not in r.stderr
