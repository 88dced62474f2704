"""Fixtures that start real processes on loopback: redis-server, test upstreams, `adaptspec serve`.

`RedisServer` / the `redis_server` fixture are reusable by other test packages (pytest puts tests/ on
sys.path, so `from proxy.conftest import RedisServer`): Debian's redis-server on a free loopback port,
persistence off, `.stop()` and `.start()` again on the same port to simulate an outage.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None, ok=(200,)) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as r:
                if r.status in ok:
                    return
                last = r.status
        except urllib.error.HTTPError as exc:
            last = exc.code
            if exc.code in ok:
                return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer in {timeout}s (last: {last})")


def http_json(method: str, url: str, body: dict | None = None, headers: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


def stop_process(proc: subprocess.Popen, sig=signal.SIGTERM, grace: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Upstream:
    """One test upstream process (tests/proxy/upstream_app.py)."""

    def __init__(self, name: str = "w0", **opts):
        self.name, self.opts = name, opts
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Upstream:
        cmd = [sys.executable, str(HERE / "upstream_app.py"), "--port", str(self.port), "--name", self.name]
        for k, v in self.opts.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        wait_http(self.url + "/health", proc=self.proc)
        return self

    def kill(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGKILL)

    def state(self) -> dict:
        return http_json("GET", self.url + "/_debug/state")[2]

    def requests(self) -> list[dict]:
        return http_json("GET", self.url + "/_debug/requests")[2]

    def set(self, **values) -> None:
        http_json("POST", self.url + "/_debug/set", values)


@pytest.fixture
def upstreams():
    started: list[Upstream] = []

    def make(name: str = "w0", **opts) -> Upstream:
        u = Upstream(name, **opts).start()
        started.append(u)
        return u

    yield make
    for u in started:
        u.kill()


class RedisServer:
    def __init__(self, tmp: Path):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tmp
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server not installed")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir), "--protected-mode", "no"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGKILL)
            self.proc = None


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


class ProxyProcess:
    """`adaptspec serve --config FILE` as a child process."""

    def __init__(self, config: dict | None, tmp: Path, name: str = "proxy", env: dict | None = None,
                 args: list[str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = tmp / f"{name}.yaml"
        self.log_path = tmp / f"{name}.log"
        self.args = list(args or [])
        if config is not None:
            self.write_config(config)
        else:
            self.config_path = None
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self._clients: list = []

    def write_config(self, config: dict | str) -> None:
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config_path)

    def start(self, timeout: float = 60.0) -> ProxyProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "adaptspec", "serve", "--host", "127.0.0.1", "--port", str(self.port),
             *(["--config", str(self.config_path)] if self.config_path else []), *self.args],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)
        wait_http(self.url + "/health", timeout=timeout, proc=self.proc, ok=(200, 503))
        return self

    def stop(self, sig=signal.SIGINT) -> None:
        """SIGINT: the drain without its delay for new connections (SIGTERM waits server.drain_delay_s)."""
        for c in self._clients:
            c.close()
        if self.proc is not None:
            stop_process(self.proc, sig)
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return r.read().decode()

    def client(self, **kw):
        import openai

        c = openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0, **kw)
        self._clients.append(c)
        return c


@pytest.fixture
def proxies(tmp_path):
    started: list[ProxyProcess] = []

    def make(config: dict | None, name: str = "proxy", env: dict | None = None, args: list[str] | None = None,
             start: bool = True, timeout: float = 60.0) -> ProxyProcess:
        p = ProxyProcess(config, tmp_path, name=name, env=env, args=args)
        started.append(p)
        return p.start(timeout) if start else p

    yield make
    for p in started:
        p.stop()


def pool(name: str, workers: list[Upstream], engine: str = "adaptspec", per_request: bool = True, **extra) -> dict:
    return {"name": name, "engine": engine, "per_request": per_request,
            "workers": [{"name": u.name, "url": u.url} for u in workers], **extra}


def metric(text: str, name: str, **labels) -> float | None:
    """Value of one sample in Prometheus text exposition (sum over samples matching `labels`)."""
    from prometheus_client.parser import text_string_to_metric_families

    total, found = 0.0, False
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
                found = True
    return total if found else None


def eventually(fn, timeout: float = 10.0, interval: float = 0.05):
    """Poll `fn` until it returns a truthy value; return it (or fail with the last value)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")
