"""CLI conventions, through the real `python -m adaptspec` in a subprocess: --version, --log-level and
--log-format before or after the subcommand, ADAPTSPEC_* environment defaults, errors on stderr with a
non-zero exit.

The serve cases use the port-in-use path: `adaptspec serve` logs one ERROR line and exits 1 without
serving, which shows where it tried to listen and how it logs, in well under a second of work.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import adaptspec

ROOT = Path(__file__).resolve().parents[1]
ENV_VARS = ("ADAPTSPEC_CONFIG", "ADAPTSPEC_HOST", "ADAPTSPEC_PORT", "ADAPTSPEC_LOG_LEVEL", "ADAPTSPEC_LOG_FORMAT")


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    return subprocess.run([sys.executable, "-m", "adaptspec", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**base, **env})


@pytest.fixture
def taken_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def serve_upstream(*args: str, **env: str) -> subprocess.CompletedProcess:
    """`adaptspec serve` with one (unused) upstream: pass a taken port to make it fail at bind."""
    return cli("serve", "--upstream", "http://127.0.0.1:9", *args, **env)


def test_version():
    r = cli("--version")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert r.returncode == 0 and r.stdout.strip() == f"adaptspec {version}" == f"adaptspec {adaptspec.__version__}"


def test_no_command_is_a_usage_error_on_stderr():
    r = cli()
    assert r.returncode == 2 and not r.stdout and "give a command" in r.stderr


@pytest.mark.integration
def test_log_options_after_the_subcommand(taken_port):
    r = serve_upstream("--port", str(taken_port), "--log-format", "json", "--log-level", "warning")
    assert r.returncode == 1 and not r.stdout
    lines = [json.loads(line) for line in r.stderr.splitlines()]
    [error] = [x for x in lines if x["level"] == "ERROR"]
    assert f"cannot listen on 127.0.0.1:{taken_port}" in error["message"] and error["logger"].startswith("adaptspec")
    assert {x["level"] for x in lines} <= {"WARNING", "ERROR", "CRITICAL"}


@pytest.mark.integration
def test_log_level_before_the_subcommand_and_the_later_one_wins(taken_port):
    quiet = cli("--log-level", "CRITICAL", "serve", "--upstream", "http://127.0.0.1:9", "--port", str(taken_port))
    assert quiet.returncode == 1 and "cannot listen" not in quiet.stderr
    loud = cli("--log-level", "CRITICAL", "serve", "--upstream", "http://127.0.0.1:9", "--port", str(taken_port),
               "--log-level", "ERROR")
    assert loud.returncode == 1 and "cannot listen" in loud.stderr and " ERROR " in loud.stderr  # text format


@pytest.mark.integration
def test_environment_defaults_and_flags_win(taken_port):
    r = serve_upstream(ADAPTSPEC_PORT=str(taken_port), ADAPTSPEC_HOST="127.0.0.1",
                       ADAPTSPEC_LOG_FORMAT="json", ADAPTSPEC_LOG_LEVEL="error")
    [line] = r.stderr.splitlines()
    assert r.returncode == 1 and f"cannot listen on 127.0.0.1:{taken_port}" in json.loads(line)["message"]
    flag = serve_upstream("--port", str(taken_port), ADAPTSPEC_PORT="1")
    assert f"cannot listen on 127.0.0.1:{taken_port}" in flag.stderr


def test_config_from_environment_errors_name_file_key_and_value(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: {kind: psychic}\n")
    r = cli("serve", ADAPTSPEC_CONFIG=str(bad))
    assert r.returncode == 2 and not r.stdout
    assert str(bad) in r.stderr and "policy" in r.stderr and "psychic" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(("var", "value"), [("ADAPTSPEC_PORT", "eighty"), ("ADAPTSPEC_PORT", "70000"),
                                            ("ADAPTSPEC_LOG_LEVEL", "loud"), ("ADAPTSPEC_LOG_FORMAT", "xml")])
def test_bad_environment_values_name_the_variable(var, value):
    r = cli("serve", **{var: value})
    assert r.returncode == 2 and not r.stdout and f"{var}={value!r}" in r.stderr


def test_serve_help_lists_the_environment():
    r = cli("serve", "--help")
    assert r.returncode == 0
    for var in ENV_VARS:
        assert f"\n  {var} " in r.stdout, var


def test_log_options_reach_nested_subcommands():
    r = cli("policy", "check", "--log-format", "json", "--log-level", "debug", "policies/default.yaml")
    assert r.returncode == 0 and r.stdout.startswith("ok: policies/default.yaml")


def test_errors_go_to_stderr_with_non_zero_exit(tmp_path):
    missing = tmp_path / "missing.yaml"
    for args in (("policy",), ("policy", "check", str(missing)), ("plan", "--alpha", "0.8"), ("worker", "--default-k", "-1"),
                 ("plan", "--log-level", "noisy")):
        r = cli(*args)
        assert r.returncode != 0 and not r.stdout and r.stderr.strip(), args


def test_tracing_without_the_otel_extra_is_a_clear_error():
    # as if opentelemetry were not installed: a None entry in sys.modules makes its import fail
    code = ("import sys; sys.modules['opentelemetry'] = None; from adaptspec.cli import main; "
            "sys.exit(main(['serve', '--upstream', 'http://127.0.0.1:9']))")
    base = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={**base, "ADAPTSPEC_OTEL": "1"})
    assert r.returncode == 2 and not r.stdout
    assert "pip install 'adaptspec[otel]'" in r.stderr and "ADAPTSPEC_OTEL" in r.stderr
