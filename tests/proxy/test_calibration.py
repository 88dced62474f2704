"""Online calibration through the proxy: a worker's step telemetry -> its fitted step model -> gauges, and the
policy prices that worker with it (a wrong profile stops mattering once the fit is trusted)."""

from __future__ import annotations

import pytest

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
    # noise-free telemetry: the fit's errors are ~0; the eagle head has no data and keeps the prior (NaN error)
    assert metric(text, "adaptspec_step_model_coefficient_error", worker="w0", coefficient="overhead_s") < 1e-4
    assert metric(text, "adaptspec_step_model_steps", worker="w0") >= 1000
    eagle = metric(text, "adaptspec_step_model_coefficient_error", worker="w0", coefficient="eagle_pass_s")
    assert eagle != eagle  # NaN
