"""The version guard through vLLM's own plugin loader: on a vLLM version the plugin does not support,
`load_general_plugins()` (what every vLLM process calls at start-up) raises instead of serving requests
whose per-request limits would be ignored."""

from __future__ import annotations

import os
import subprocess

import pytest

from ._vllm import VLLM_PYTHON, require_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]

LOAD = ("import vllm; vllm.__version__ = {version!r}\n"
        "from vllm.plugins import load_general_plugins\n"
        "load_general_plugins()\n"
        "print('loaded')\n")


def run(version: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VLLM_PYTHON), "-c", LOAD.format(version=version)], capture_output=True, text=True,
                          timeout=240, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.parametrize("version", ["0.34.0", "0.31.2"])
def test_unsupported_vllm_stops_start_up(version):
    require_vllm()
    out = run(version)
    assert out.returncode != 0
    assert "UnsupportedVLLMError" in out.stderr and f"found {version}" in out.stderr


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_supported_vllm_loads(version):
    require_vllm()
    out = run(version)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("loaded")
