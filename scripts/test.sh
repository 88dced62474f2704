#!/usr/bin/env bash
# The test suite in one command, on a machine with only Python 3 and the project installed:
#
#   bash scripts/test.sh [PYTEST_ARGS]      # e.g. a test file, -x, -k NAME
#
# 1. redis-server and prometheus (real servers the integration tests start on loopback ports) are installed
#    from the Debian/Ubuntu packages when missing (apt-get as root, else through sudo);
# 2. unit tests, then integration tests (`-m integration`); the vLLM tests are scripts/ci_vllm.sh's step, the
#    SGLang wheel check (`-m sglang`, it downloads the pinned wheel) a step of .ci/run.
#
# Python: ADAPTSPEC_TEST_PYTHON if set, else the active virtual environment's `python`, else ./.venv (the
# README's venv), else `python3`. It must have the test dependencies: pip install -e '.[all]'.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -n ${ADAPTSPEC_TEST_PYTHON:-} ]]; then PY=$ADAPTSPEC_TEST_PYTHON
elif [[ -n ${VIRTUAL_ENV:-} ]]; then PY=$VIRTUAL_ENV/bin/python
elif [[ -x .venv/bin/python ]]; then PY=.venv/bin/python
else PY=python3
fi

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v prometheus >/dev/null || need+=(prometheus)
if ((${#need[@]})); then
  echo "scripts/test.sh: installing ${need[*]} (Debian packages)" >&2
  if ! command -v apt-get >/dev/null; then
    echo "scripts/test.sh: no apt-get here; install ${need[*]} and put them on PATH" >&2
    exit 1
  fi
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { echo "scripts/test.sh: need root or sudo to install ${need[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 \
    || { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "${need[@]}"; }
fi

if ! "$PY" -c "import adaptspec, pytest, pytest_asyncio, pytest_timeout, openai, torch" 2>/dev/null; then
  echo "scripts/test.sh: $PY lacks adaptspec or its test dependencies; first: pip install -e '.[all]'" >&2
  exit 1
fi

# PYTEST_ARGS (e.g. a file) may leave one phase with nothing to run: pytest's exit 5, fine only then.
run() {
  local rc=0
  "$PY" -m pytest "$@" || rc=$?
  if ((rc == 5 && had_args)); then echo "(no tests of this kind in the selection)"; rc=0; fi
  return "$rc"
}
had_args=$(($# > 0))
echo "==== unit tests ($PY)"
run -m "not integration and not vllm and not sglang" -q "$@"
echo "==== integration tests (real servers on loopback)"
run -m "integration and not vllm and not sglang" -q "$@"
