"""Run the proxy in the foreground: embedded worker if needed, signals, reload, clean shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time

log = logging.getLogger(__name__)


def serve(config, *, host: str, port: int, config_path: str | None = None, watch_s: float = 1.0,
          worker_args: list[str] | None = None) -> int:
    from adaptspec.errors import AdaptspecError
    from adaptspec.proxy.embedded import EmbeddedWorker

    embedded = None
    extra = []
    if not config.pools:
        embedded = EmbeddedWorker(worker_args)
        try:
            extra = [embedded.start()]
        except RuntimeError as exc:
            log.error("%s", exc)
            return 1
    try:
        return _run(_main(config, host, port, config_path, watch_s, extra))
    except AdaptspecError as exc:  # e.g. a profile that cannot be loaded
        log.error("cannot start the proxy: %s", exc)
        return 1
    except OSError as exc:  # the port is taken, the address is not local, ...
        log.error("cannot listen on %s:%d: %s", host, port, exc.strerror or exc)
        return 1
    finally:
        if embedded is not None:
            embedded.stop()


def _run(coro) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


async def _main(config, host: str, port: int, config_path: str | None, watch_s: float, extra) -> int:
    from adaptspec.proxy.app import Proxy, create_app, start_site
    from adaptspec.proxy.configfile import load_config_file
    from adaptspec.proxy.reload import Reloader

    proxy = Proxy(config, config_path=config_path, extra_workers=extra)
    app = create_app(proxy)
    runner = await start_site(app, host, port)
    # Everything built so far lives until exit: keep it out of the collector's scans (shorter GC pauses).
    gc.collect()
    gc.freeze()
    signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signals.put_nowait, sig)
    reloader = None
    if config_path:
        reloader = Reloader(config_path, load_config_file, apply=proxy.apply_config, current=lambda: proxy.config,
                            metrics=proxy.metrics, describe=proxy.describe, poll_s=watch_s)
        reloader.start()
    else:  # SIGHUP's default action would end the process
        loop.add_signal_handler(signal.SIGHUP, lambda: log.info("SIGHUP: no --config file to reload"))
    names = ", ".join(f"{w.name}={w.safe_url}" for w in proxy.pools.workers.values())
    log.info("adaptspec proxy on http://%s:%d (policy %s, state %s) -> %s", host, port,
             proxy.policy.name, proxy.state.backend, names)
    drained = False
    try:
        sig = await signals.get()
        await drain(proxy, runner, sig, signals)
        drained = True
    finally:
        if reloader is not None:
            await reloader.stop()
        if not drained:  # a second cleanup would run the app's on_cleanup (proxy.stop) twice
            await runner.cleanup()
    return 0


async def drain(proxy, runner, sig: signal.Signals, signals: asyncio.Queue) -> None:
    """Stop serving without dropping anything: readiness 503 at once; new connections still accepted for
    `server.drain_delay_s` after SIGTERM (none after SIGINT, an interactive stop; a second signal cuts the
    delay short); then the listener closes and what is in flight gets until `server.grace_period_s` after
    the first signal, when anything left is cancelled."""
    server = proxy.config.server
    start = time.monotonic()
    proxy.draining = True
    delay = server.drain_delay_s if sig == signal.SIGTERM else 0.0
    log.info("%s: draining (readiness 503; accepting new connections for %gs, then finishing what is in flight "
             "within %gs of the signal)", sig.name, delay, server.grace_period_s)
    if delay > 0:
        try:
            sig2 = await asyncio.wait_for(signals.get(), delay)
            log.info("%s: ending the drain delay early", sig2.name)
        except asyncio.TimeoutError:
            pass  # the delay ran out: the usual way
    # what runner.cleanup() waits at most for the handlers still running once the listener is closed
    left = max(0.0, server.grace_period_s - (time.monotonic() - start))
    runner.set_shutdown_timeout(left)
    inflight = sum(w.inflight for w in proxy.pools.workers.values())
    log.info("closing the listener; waiting up to %.1fs for %d upstream request(s) in flight", left, inflight)
    await runner.cleanup()
    log.info("drained in %.1fs", time.monotonic() - start)
