"""Start and stop real servers (vLLM, the adaptspec proxy, Prometheus) for the integration tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
TINY_TARGET = ROOT / "adaptspec" / "assets" / "tiny-target"
TINY_DRAFT = ROOT / "adaptspec" / "assets" / "tiny-draft"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A subprocess in its own session (vLLM forks an engine-core child), logging to a file."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, log: Path, cwd: Path | None = None):
        self.log = log
        self._fh = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, env=env, stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=cwd)

    def wait_http(self, url: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; log tail:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            time.sleep(1.0)
        raise TimeoutError(f"{url} not ready after {timeout_s} s; log tail:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        return self.log.read_bytes()[-n:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._fh.close()


def worker_and_static_proxy(tmp: Path, worker_port: int, proxy_port: int, servers: list[Server]) -> None:
    """Start the reference worker (the tiny pair, 1 thread) and `adaptspec serve` in front of it with a static
    n-gram policy; appended to `servers` (the caller stops them). Not waited for: the caller waits."""
    servers.append(Server([sys.executable, "-m", "adaptspec", "worker", "--port", str(worker_port), "--threads", "1"],
                          log=tmp / "worker.log", cwd=ROOT))
    config = tmp / "proxy.yaml"
    config.write_text(yaml.safe_dump({
        "policy": {"kind": "static", "proposer": "ngram", "gamma": 3},
        "pools": [{"name": "ref", "engine": "adaptspec", "per_request": True, "proposers": ["ngram", "draft"],
                   "max_gamma": 4, "workers": [{"name": "w0", "url": f"http://127.0.0.1:{worker_port}"}]}],
        "server": {"host": "127.0.0.1", "port": proxy_port, "scrape_interval_s": 0.25},
    }))
    servers.append(Server([sys.executable, "-m", "adaptspec", "serve", "--config", str(config)],
                          log=tmp / "proxy.log", cwd=ROOT))
