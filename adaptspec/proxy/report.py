"""The realized-speedup report: `GET /adaptspec/report` (JSON), its Prometheus gauges, and the request hook.

The policy's experiment (control/holdout_policy.py `Experimented`, set up by `policy.holdout` /
`policy.switchback` in the config) holds the numbers; this module only reads them out. Without either
section the report says so (`"enabled": false`) and the gauges are declared without samples.

Gauges (read at scrape time) and PromQL:

    adaptspec_realized_speedup{content_class, load_bucket, arm}          # control / treated decode time per
    adaptspec_realized_speedup_low{...}, adaptspec_realized_speedup_high{...}   # token, 95% interval
    adaptspec_realized_speedup_samples{content_class, load_bucket, arm, group}  # group: treated | control
    adaptspec_switchback_throughput_ratio{load_bucket} (+ _low, _high)  # policy / off windows' tokens per s
    adaptspec_guard_active{content_class, load_bucket, arm}               # 1 while the guard holds it off
    adaptspec_hedge_serving_control{load_bucket, control}  # 1 while a load bucket runs the control plan (guard on
                                                           # the windows: the policy measured slower than it)
    adaptspec_experiment_decisions_total{content_class, load_bucket, arm, reason}  # holdout | guard |
                                                                                   # guard probe | switchback

    # strata where speculation is confidently slower than off
    adaptspec_realized_speedup_high < 1
    # guard actions per minute
    sum by (reason) (rate(adaptspec_experiment_decisions_total{reason=~"guard.*"}[5m])) * 60
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from adaptspec.control.policy_base import PolicyBase


def record(policy: PolicyBase, plan, output_tokens: float, t_first: float | None, t_end: float) -> None:
    """A finished attempt (`plan`: handlers._Plan, decided by `policy`): its decode time per output token after
    the first goes to the experiment, unless the worker ran something else than decided (a client's own
    `speculation`)."""
    exp = policy.experiment
    decision = plan.decision
    if exp is None or decision.assignment is None:
        return
    if (plan.proposer, plan.gamma > 0) != (decision.proposer, decision.max_k > 0) and plan.worker.per_request:
        return
    decode = (t_end - t_first) / (output_tokens - 1) if t_first is not None and output_tokens > 1 else None
    exp.record(decision, output_tokens, decode)


def record_rate(policy: PolicyBase, plan, content_class: str, output_tokens: float, t_start: float,
                t_first: float | None, t_end: float) -> None:
    """A finished attempt's decode rate to the policy's realized-rate corrections (control/realized.py), where its
    decision is evidence and the worker ran it as decided: tokens after the first over the time since it (a
    stream), else every token over the whole attempt."""
    rates, d = policy.rates, plan.decision
    if rates is None or not d.rate_evidence or plan.proposer != d.proposer or plan.gamma != d.gamma:
        return
    if t_first is not None and output_tokens > 1:
        rates.observe(plan.worker.name, content_class, plan.proposer, output_tokens - 1, t_end - t_first,
                      d.expected_speedup)
    else:
        rates.observe(plan.worker.name, content_class, plan.proposer, output_tokens, t_end - t_start,
                      d.expected_speedup)


async def report(request: web.Request) -> web.Response:
    proxy = request.app["proxy"]
    exp = proxy.policy.experiment
    if exp is None:
        return web.json_response({"enabled": False, "requests": [], "windows": [],
                                  "note": "no policy.holdout or policy.switchback in the config"})
    return web.json_response({"enabled": True, **exp.report()})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/adaptspec/report", report)


class ReportCollector(Collector):
    """The report as gauges (and the experiment's changed decisions as a counter), read at scrape time."""

    def __init__(self, policy: Callable[[], PolicyBase]) -> None:
        self._policy = policy  # the current one: a config reload replaces it

    def describe(self):
        return []

    def collect(self):
        exp = self._policy().experiment
        # declared even without an experiment (empty), so dashboards and alerts find the names
        rep = exp.report() if exp is not None else {"requests": [], "windows": [], "changed": [], "control": "off"}
        labels = ["content_class", "load_bucket", "arm"]
        est = GaugeMetricFamily("adaptspec_realized_speedup", "Realized speedup of the policy's arm over the "
                                "holdout: control / treated decode time per token (geometric means)", labels=labels)
        low = GaugeMetricFamily("adaptspec_realized_speedup_low", "Lower end of the realized speedup's interval",
                                labels=labels)
        high = GaugeMetricFamily("adaptspec_realized_speedup_high", "Upper end of the realized speedup's interval",
                                 labels=labels)
        n = GaugeMetricFamily("adaptspec_realized_speedup_samples", "Finished requests behind the estimate",
                              labels=[*labels, "group"])
        guard = GaugeMetricFamily("adaptspec_guard_active", "1 while the guard runs the stratum without "
                                  "speculation", labels=labels)
        for r in rep["requests"]:
            key = [r["content_class"], r["load_bucket"], r["arm"]]
            if r["speedup"] is not None:
                est.add_metric(key, r["speedup"])
                low.add_metric(key, r["low"])
                high.add_metric(key, r["high"])
            n.add_metric([*key, "treated"], r["n_treated"])
            n.add_metric([*key, "control"], r["n_control"])
            guard.add_metric(key, float(r["guarded"]))
        yield from (est, low, high, n, guard)
        thr = GaugeMetricFamily("adaptspec_switchback_throughput_ratio", "System throughput of policy windows "
                                "over off windows (switchback)", labels=["load_bucket"])
        tlo = GaugeMetricFamily("adaptspec_switchback_throughput_ratio_low", "Lower end of its interval",
                                labels=["load_bucket"])
        thi = GaugeMetricFamily("adaptspec_switchback_throughput_ratio_high", "Upper end of its interval",
                                labels=["load_bucket"])
        for r in rep["windows"]:
            if r["throughput_ratio"] is not None:
                thr.add_metric([r["load_bucket"]], r["throughput_ratio"])
                tlo.add_metric([r["load_bucket"]], r["low"])
                thi.add_metric([r["load_bucket"]], r["high"])
        yield from (thr, tlo, thi)
        serving = GaugeMetricFamily("adaptspec_hedge_serving_control", "1 while the load bucket runs the switchback's "
                                    "control plan (off or the fixed plan the policy is hedged against) because the "
                                    "policy is measured slower than it", labels=["load_bucket", "control"])
        for r in rep["windows"]:
            serving.add_metric([r["load_bucket"], rep.get("control", "off")], float(bool(r.get("guarded"))))
        yield serving
        changed = CounterMetricFamily("adaptspec_experiment_decisions", "Decisions the holdout, switchback or "
                                      "guard changed", labels=[*labels, "reason"])
        for c in rep["changed"]:
            changed.add_metric([c["content_class"], c["load_bucket"], c["arm"], c["reason"]], c["count"])
        yield changed
