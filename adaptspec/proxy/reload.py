"""Config hot reload: on SIGHUP and when the file changes (polled mtime/size/inode).

A valid file replaces policy, pools, API keys and limits at once (`apply`: `Proxy.apply_config`); requests in
flight keep the worker records they hold, so nothing is dropped. An invalid file is rejected with the
loader's ConfigError (file, key, value) in the log, counted in
`adaptspec_config_reloads_total{result="error"}`, and the last good config stays. Sections that cannot
change without a restart (`state`, `server.host`/`port`/`keepalive_timeout_s`) are reported and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable

from adaptspec.errors import ConfigError
from adaptspec.proxy.metrics import ProxyMetrics

log = logging.getLogger(__name__)


def _stamp(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class Reloader:
    """Loads `path` with `load` and hands a valid config to `apply` (which raises ConfigError or ValueError to
    reject it); `current` gives the config in force, `describe` a line on what runs now (for the log)."""

    def __init__(self, path: str, load: Callable[[str], object], *, apply: Callable[[object], None],
                 current: Callable[[], object], metrics: ProxyMetrics, describe: Callable[[], str] = lambda: "",
                 poll_s: float = 1.0) -> None:
        self.path, self.load, self.poll_s = path, load, poll_s
        self.apply, self.current, self.metrics, self.describe = apply, current, metrics, describe
        self._stamp = _stamp(path)
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(self.reload("SIGHUP")))
        except (NotImplementedError, RuntimeError, ValueError) as exc:  # not the main thread / platform
            log.info("SIGHUP reload unavailable (%s); file watching only", exc)
        if self.poll_s > 0:
            self._task = loop.create_task(self._watch(), name="adaptspec-config-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            stamp = _stamp(self.path)
            if stamp is not None and stamp != self._stamp:
                self._stamp = stamp
                await self.reload("file change")

    async def reload(self, why: str) -> bool:
        async with self._lock:
            self._stamp = _stamp(self.path)
            try:
                new = self.load(self.path)
                old = self.current()
                self.apply(new)
            except (ConfigError, ValueError) as exc:
                self.metrics.config_reloads.labels("error").inc()
                log.error("config reload (%s) rejected, keeping the last good config: %s", why, exc)
                return False
            for section, attrs in (("state", ("backend", "url", "key_prefix")),
                                   ("server", ("host", "port", "keepalive_timeout_s"))):
                a, b = getattr(old, section, None), getattr(new, section, None)
                for attr in attrs:
                    if getattr(a, attr, None) != getattr(b, attr, None):
                        log.warning("config reload: %s.%s changed; it takes effect on restart", section, attr)
            self.metrics.config_reloads.labels("ok").inc()
            log.info("config reloaded from %s (%s): %s", self.path, why, self.describe())
            return True
