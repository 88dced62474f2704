"""The embedded default worker: `adaptspec worker` on a free loopback port, as a child process.

`adaptspec serve` without pools starts one, waits for its /health, routes to it (offering per request the
proposers its /health reports that the `cpu-tiny` profile prices: ngram, draft, eagle, hybrid with the
built-in models), and stops it on exit
(SIGTERM, then SIGKILL after a grace period). Its output goes to the proxy's stderr, prefixed by the
worker's own logging.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from adaptspec.control.config import pool_proposers
from adaptspec.proxy.upstream import Worker

log = logging.getLogger(__name__)

EMBEDDED_POOL = "embedded"
PROFILE = "cpu-tiny"  # the built-in tiny pair on this kind of CPU


def _json_or_none(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:  # an older worker's plain body: the default proposers
        return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class EmbeddedWorker:
    def __init__(self, extra_args: list[str] | None = None, startup_timeout_s: float = 300.0) -> None:
        self.extra_args = list(extra_args or [])
        self.startup_timeout_s = startup_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Worker:
        cmd = [sys.executable, "-m", "adaptspec", "worker", "--host", "127.0.0.1", "--port", str(self.port),
               *self.extra_args]
        log.info("starting the embedded reference worker: %s", " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=os.environ.copy())
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the embedded worker exited with status {self.proc.returncode} during startup")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1.0) as resp:
                    if resp.status == 200:
                        proposers = tuple(pool_proposers(_json_or_none(resp.read()), PROFILE))
                        log.info("embedded worker ready at %s (proposers %s)", self.url, ", ".join(proposers))
                        return Worker(name="embedded-0", url=self.url, pool=EMBEDDED_POOL, engine="adaptspec",
                                      per_request=True, proposers=proposers, max_gamma=8, profile=PROFILE)
            except (urllib.error.URLError, OSError):
                pass  # not listening yet
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the embedded worker did not answer /health within {self.startup_timeout_s:.0f}s")

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            log.warning("embedded worker did not stop within %.0fs; killing it", grace_s)
            self.proc.kill()
            self.proc.wait()
