"""Online calibration through the proxy: a worker's step telemetry -> its fitted step model -> gauges, and the
policy prices that worker with it (a wrong profile stops mattering once the fit is trusted)."""

from __future__ import annotations

import time

import pytest

from adaptspec.control.calibration import StepCalibrator

from .conftest import eventually, metric, pool

pytestmark = pytest.mark.integration

TRUTH = (0.008, 0.0002, 1.3e-6)  # seconds per step, per batched token, per KV token (cpu-tiny-like)


def test_wrong_profile_is_replaced_by_the_fit_of_the_workers_telemetry(upstreams, proxies):
    up = upstreams("w0", step_model=",".join(map(str, TRUTH)))
    px = proxies({"pools": [pool("spec", [up], profile="h200-llama3-70b")], "server": {"scrape_interval_s": 0.05}})
    eventually(lambda: metric(px.metrics(), "adaptspec_step_model_trusted", worker="w0") == 1, timeout=30)

    def close() -> bool:
        text = px.metrics()
        got = [metric(text, "adaptspec_step_model_coefficient", worker="w0", coefficient=c)
               for c in ("overhead_s", "compute_s_per_token", "kv_s_per_token")]
        return all(abs(g - t) <= 0.05 * t for g, t in zip(got, TRUTH, strict=True))

    eventually(close, timeout=30)
    text = px.metrics()
    # noise-free telemetry: the fit's errors are small (only the prior's pull leaves residuals); the eagle head has no data and keeps the prior (NaN error)
    assert metric(text, "adaptspec_step_model_coefficient_error", worker="w0", coefficient="overhead_s") < 0.05 * TRUTH[0]
    assert metric(text, "adaptspec_step_model_steps", worker="w0") >= 0.1 * StepCalibrator.min_steps  # the floor
    eagle = metric(text, "adaptspec_step_model_coefficient_error", worker="w0", coefficient="eagle_pass_s")
    assert eagle != eagle  # NaN


def test_calibrate_cli_prints_a_loadable_profile_of_the_fit(upstreams, tmp_path, capsys):
    from adaptspec.cli import main
    from adaptspec.control.profiles import load_profile

    up = upstreams("w0", step_model=",".join(map(str, TRUTH)))
    assert main(["calibrate", "--url", up.url, "--duration", "3", "--interval", "0.05",
                 "--prior", "h200-llama3-70b", "--name", "fake-worker"]) == 0
    out = capsys.readouterr().out
    path = tmp_path / "fake-worker.yaml"
    path.write_text(out)
    prof = load_profile(str(path))
    assert prof.name == "fake-worker" and prof.target.additive
    got = (prof.target.overhead_s, prof.target.compute_s_per_token, prof.target.kv_s_per_token)
    assert all(abs(g - t) <= 0.05 * t for g, t in zip(got, TRUTH, strict=True)), got
    assert 100 <= prof.context_tokens <= 400  # the fake's contexts
    assert prof.offers("draft") and prof.offers("ngram") and prof.offers("eagle")
    assert "overhead_s" in out.split("name: fake-worker")[0]  # the header lists the errors


def test_calibrate_cli_errors_are_clear(upstreams, capsys):
    from adaptspec.cli import main

    plain = upstreams("w0")  # no step telemetry
    assert main(["calibrate", "--url", plain.url, "--duration", "0"]) == 1
    assert "no adaptspec:engine_* step counters" in capsys.readouterr().err
    assert main(["calibrate", "--url", "http://127.0.0.1:9", "--duration", "0"]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["calibrate", "--url", plain.url, "--prior", "no-such-profile"]) == 2
    assert "unknown profile" in capsys.readouterr().err


def test_calibrate_cli_on_the_real_reference_worker(tmp_path, capsys):
    """`adaptspec worker` under load at two concurrencies: the fit is a valid profile whose step time over
    the scraped period matches the worker's own counters (step seconds / steps) within 15%."""
    import sys
    import threading

    import httpx

    from adaptspec.cli import main
    from adaptspec.control.profiles import load_profile
    from adaptspec.proxy.scrape import parse_metrics
    from tests.integrations._servers import ROOT, Server, free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    worker = Server([sys.executable, "-m", "adaptspec", "worker", "--port", str(port), "--threads", "1",
                     "--max-batch", "16"], log=tmp_path / "worker.log", cwd=ROOT)
    stop = threading.Event()

    def client(i: int) -> None:
        spec = [("none", 0), ("ngram", 3), ("draft", 2)][i % 3]
        while not stop.is_set():
            body = {"model": "tiny", "prompt": f"Request {i}: def add(a, b):\n    return a + b\n", "max_tokens": 32,
                    "temperature": 0, "speculation": {"proposer": spec[0], "num_speculative_tokens": spec[1]}}
            httpx.post(url + "/v1/completions", json=body, timeout=120)

    threads: list[threading.Thread] = []
    try:
        worker.wait_http(url + "/health", timeout_s=120)

        def scrape():
            return parse_metrics(httpx.get(url + "/metrics").text).steps

        for i in range(8):
            threads.append(threading.Thread(target=client, args=(i,), daemon=True))
            threads[-1].start()
            if i in (0, 2):
                time.sleep(4.0)  # one client, then three, then eight: the batch varies
        before = scrape()
        assert main(["calibrate", "--url", url, "--duration", "10", "--interval", "0.25", "--name", "tiny-here"]) == 0
        window = scrape().since(before)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        worker.stop()
    path = tmp_path / "tiny-here.yaml"
    path.write_text(capsys.readouterr().out)
    prof = load_profile(str(path))
    assert prof.target.additive and prof.offers("draft") and window is not None and window.steps > 50
    per_step = {k: v / window.steps for k, v in (("batched", window.batched_tokens), ("kv", window.kv_tokens),
                                                  ("drafted", window.drafted_tokens.get("draft", 0.0)),
                                                  ("passes", window.draft_passes.get("draft", 0.0)))}
    m = prof.draft("draft").model
    predicted = (prof.target.time(per_step["batched"], per_step["kv"]) + per_step["passes"] * m.overhead_s
                 + per_step["drafted"] * m.compute_s_per_token)
    measured = window.step_seconds / window.steps
    assert abs(predicted - measured) <= 0.15 * measured, (predicted, measured, window, path.read_text())


def test_calibrate_cli_reads_history_once(upstreams, tmp_path, capsys):
    """--duration 0: the cumulative counters as one window: the level is fitted, the slopes stay the prior's."""
    from adaptspec.cli import main
    from adaptspec.control.profiles import load_profile

    up = upstreams("w0", step_model=",".join(map(str, TRUTH)))
    # the one read is the history: the fake advances its counters by one window (50-200 steps) per read
    assert main(["calibrate", "--url", up.url, "--duration", "0", "--prior", "cpu-tiny"]) == 0
    captured = capsys.readouterr()
    path = tmp_path / "once.yaml"
    path.write_text(captured.out)
    prof, tiny = load_profile(str(path)), load_profile("cpu-tiny")
    assert prof.target.compute_s_per_token == tiny.target.compute_s_per_token  # (prior)
    assert "(prior)" in captured.out and "provisional: true" in captured.out
    assert "warning: only" in captured.err



def test_calibration_can_be_switched_off_in_the_config():
    """In process: the same telemetry gives the worker a fitted step model unless `calibration.enabled` is false
    (the fit is still kept, for the gauges)."""
    from adaptspec.control.config import parse_config
    from adaptspec.control.telemetry import StepCounters
    from adaptspec.proxy.app import Proxy

    def run(enabled: bool):
        cfg = parse_config({"calibration": {"enabled": enabled, "min_steps": 10},
                            "pools": [{"name": "p", "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}],
                                       "profile": "h200-llama3-70b"}]})
        proxy = Proxy(cfg)
        worker = proxy.pools.workers["w0"]
        total = StepCounters()
        for i in range(1000):  # one-step windows; the prior is worth 20 steps, so 2% of its pull remains
            b = 1 + (i * 7) % 32
            total = total.add_step(0.008 + 2e-4 * b, b, 200.0 * b)
            proxy.feedback.on_steps(worker, total)
        gauges = proxy.feedback.gauges()
        trusted = dict(gauges["adaptspec_step_model_trusted"][1])
        return worker.step_costs, trusted[("w0",)]

    costs, trusted = run(True)
    assert costs is not None and costs.trusted and trusted == 1.0
    assert costs.coefficients["overhead_s"] == pytest.approx(0.008, rel=0.1)
    costs, trusted = run(False)
    assert costs is None and trusted == 1.0
