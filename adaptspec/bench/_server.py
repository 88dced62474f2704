"""A child process serving HTTP on loopback, for the commands that start their own servers (`bench compare`).

Started and health-checked on enter, stopped on exit. An engine that forks children (vLLM's engine core)
runs in its own session (`new_session=True`) so that stopping it stops the whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path


class Server:
    """`argv` serving on `port`; ready once GET `ready_path` answers 200 (the body, if JSON, in `health`)."""

    def __init__(self, argv: Sequence[str], port: int, log_path: Path, name: str, start_timeout_s: float = 180.0,
                 *, env: Mapping[str, str] | None = None, cwd: Path | None = None, ready_path: str = "/health",
                 new_session: bool = False):
        self.argv, self.port, self.log_path, self.name = list(argv), port, log_path, name
        self.start_timeout_s, self.ready_path, self.new_session = start_timeout_s, ready_path, new_session
        self.env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.health: object = None  # the /health body once healthy (a worker's reports its proposers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     cwd=self.cwd, start_new_session=self.new_session)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._stop()
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} while starting:\n{self.tail()}")
            with contextlib.suppress(urllib.error.URLError, OSError), \
                    urllib.request.urlopen(self.url + self.ready_path, timeout=2) as resp:
                if resp.status == 200:
                    with contextlib.suppress(ValueError):
                        self.health = json.loads(resp.read())
                    return self
            time.sleep(0.3)
        self._stop()
        raise RuntimeError(f"{self.name} did not become healthy within {self.start_timeout_s:.0f}s "
                           f"(log: {self.log_path}):\n{self.tail()}")

    def tail(self, n: int = 2000) -> str:
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            if self.new_session:
                os.killpg(self.proc.pid, sig)  # the engine's children too
            else:
                self.proc.send_signal(sig)

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()

    def __exit__(self, *exc: object) -> None:
        self._stop()
