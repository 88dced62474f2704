"""Generate the Grafana dashboards in this folder (`python dashboards/generate.py`).

The JSON files are committed; this script is their source so that every panel has the same shape
(datasource, units, legend) and a reviewer reads the PromQL in one place. Metric names come from
docs/INTERFACES.md ("Proxy metrics", "Worker") and the engines' own /metrics (SGLang: sglang:*); the engine
latency panels read the engines' histograms (vLLM's names, which the adaptspec worker exports too:
adaptspec/control/metric_names.py) next to the proxy's;
tests/test_dashboards.py checks every expression against them and, with a real Prometheus, evaluates each.

Derived quantities (vLLM's conventions):
    acceptance rate alpha        = accepted draft tokens / draft tokens
    mean acceptance length       = 1 + accepted tokens / drafts      (tokens emitted per verify step)
    speculation on share         = decisions with proposer != "none" / all decisions
"""

from __future__ import annotations

import json
from pathlib import Path

from adaptspec.control import metric_names as names

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
RI = "$__rate_interval"


def _target(expr: str, legend: str, ref: str) -> dict:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, "range": True}


def panel(title: str, targets: list[tuple[str, str]], *, unit: str = "short", kind: str = "timeseries",
          description: str = "", stack: bool = False, minmax: tuple[float, float] | None = None) -> dict:
    defaults: dict = {"unit": unit, "custom": {}}
    if kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if stack else 0,
                              "showPoints": "never", "stacking": {"mode": "normal" if stack else "none"}}
    if minmax:
        defaults["min"], defaults["max"] = minmax
    return {
        "type": kind, "title": title, "description": description, "datasource": DS,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}} if kind == "timeseries" else {},
        "targets": [_target(e, lg, chr(ord("A") + i)) for i, (e, lg) in enumerate(targets)],
    }


def row(title: str) -> dict:
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


def layout(panels: list[dict]) -> list[dict]:
    """Two panels per row at half width; a row header spans the width."""
    out, x, y, pid = [], 0, 0, 1
    for p in panels:
        p = dict(p, id=pid)
        pid += 1
        if p["type"] == "row":
            if x:
                x, y = 0, y + 8
            p["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
            y += 1
        else:
            p["gridPos"] = {"h": 8, "w": 12, "x": x, "y": y}
            x += 12
            if x >= 24:
                x, y = 0, y + 8
        out.append(p)
    return out


def dashboard(uid: str, title: str, panels: list[dict], variables: list[dict]) -> dict:
    ds_var = {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source",
              "current": {"selected": False, "text": "Prometheus", "value": "prometheus"}, "hide": 0}
    return {
        "uid": uid, "title": title, "tags": ["adaptspec"], "timezone": "browser", "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "10s", "time": {"from": "now-30m", "to": "now"},
        "templating": {"list": [ds_var, *variables]}, "annotations": {"list": []},
        "panels": layout(panels),
    }


def query_var(name: str, query: str, label: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DS, "query": query,
            "definition": query, "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"selected": True, "text": "All", "value": "$__all"}, "hide": 0, "sort": 1}


def q(metric_le: str, p: float, by: str = "") -> str:
    grouping = f"le{', ' + by if by else ''}"
    return f"histogram_quantile({p}, sum by ({grouping}) (rate({metric_le}[{RI}])))"


# the engines' request latency histograms (vLLM's names; the adaptspec worker exports the same ones)
VLLM_TTFT, VLLM_E2E, VLLM_QUEUE = names.VLLM_TTFT, names.VLLM_E2E, names.VLLM_QUEUE_TIME
VLLM_ITL, VLLM_ITL_OLD = names.VLLM_ITL, names.VLLM_ITL_OLD
SGLANG_TTFT = names.SGLANG_TTFT


def _itl(p: float, selector: str = "", by: str = "") -> str:
    """Inter-token latency quantile from the current name, or the older one where that is all there is."""
    grouping = f"le{', ' + by if by else ''}"
    return (f"histogram_quantile({p}, sum by ({grouping}) (rate({VLLM_ITL}_bucket{selector}[{RI}]) "
            f"or rate({VLLM_ITL_OLD}_bucket{selector}[{RI}])))")


def proxy_dashboard() -> dict:
    w = '{worker=~"$worker"}'
    panels = [
        row("Decisions"),
        panel("Decisions by class / proposer / gamma",
              [(f"sum by (content_class, proposer, gamma) (rate(adaptspec_decisions_total[{RI}]))",
                "{{content_class}} {{proposer}} g={{gamma}}")], unit="reqps", stack=True,
              description="What the policy chose per second, split by content class, proposer and gamma."),
        panel("Speculation on / off share",
              [(f'sum(rate(adaptspec_decisions_total{{proposer!="none"}}[{RI}])) '
                f"/ sum(rate(adaptspec_decisions_total[{RI}]))", "on"),
               (f'sum(rate(adaptspec_decisions_total{{proposer="none"}}[{RI}])) '
                f"/ sum(rate(adaptspec_decisions_total[{RI}]))", "off")],
              unit="percentunit", minmax=(0, 1), stack=True),
        panel("Decisions by gamma",
              [(f"sum by (gamma) (rate(adaptspec_decisions_total[{RI}]))", "gamma={{gamma}}")],
              unit="reqps", stack=True, description="gamma=0 is speculation off."),
        panel("Gamma schedules: engine steps by the gamma allowed",
              [(f"sum by (gamma) (rate({names.ENGINE_STEPS_BY_GAMMA}_total[{RI}]))", "gamma={{gamma}}")],
              stack=True,
              description="Request-steps per second by the gamma each step allowed (reference worker): with "
                          "gamma schedules (policy schedule: true) steps at a high running batch fall to the "
                          "schedule's lower caps; gamma=0 is no speculation."),
        panel("Decisions by policy",
              [(f"sum by (policy) (rate(adaptspec_decisions_total[{RI}]))", "{{policy}}")], unit="reqps"),
        row("Acceptance (alpha)"),
        panel("alpha estimate vs observed",
              [(f"adaptspec_alpha_estimate{w}", "est {{worker}} {{proposer}} {{content_class}}"),
               (f"sum by (worker, proposer, content_class) (rate(adaptspec_accepted_tokens_total{w}[5m])) "
                f"/ sum by (worker, proposer, content_class) (rate(adaptspec_draft_tokens_total{w}[5m]))",
                "obs {{worker}} {{proposer}} {{content_class}}")],
              unit="percentunit", minmax=(0, 1),
              description="Posterior mean used by the policy against accepted/draft tokens over 5 min."),
        panel("Shadow n-gram alpha (lookup scored on requests that ran without it)",
              [(f"sum by (worker, content_class) (rate(adaptspec_shadow_accepted_tokens_total{w}[5m])) "
                f"/ sum by (worker, content_class) (rate(adaptspec_shadow_draft_tokens_total{w}[5m]))",
                "{{worker}} {{content_class}}")],
              unit="percentunit", minmax=(0, 1),
              description="The reference worker scores n-gram lookup along every request that ran with another "
                          "proposer or none (usage.speculative.shadow); the proxy counts it into the n-gram "
                          "estimate, so lookup is learnt from all traffic without being tried."),
        panel("alpha estimate uncertainty (std)",
              [(f"adaptspec_alpha_estimate_std{w}", "{{worker}} {{proposer}} {{content_class}}")],
              unit="percentunit"),
        panel("Propose rate (steps that had a draft)",
              [(f"adaptspec_propose_rate_estimate{w}", "{{worker}} {{proposer}} {{content_class}}")],
              unit="percentunit", minmax=(0, 1),
              description="n-gram lookup drafts only when the context repeats; the cost model prices the "
                          "steps without a draft as plain decode steps."),
        panel("Engine-reported acceptance rate (vLLM counters)",
              [(f"sum by (instance) (rate(vllm:spec_decode_num_accepted_tokens_total[{RI}])) "
                f"/ sum by (instance) (rate(vllm:spec_decode_num_draft_tokens_total[{RI}]))", "{{instance}}")],
              unit="percentunit", minmax=(0, 1)),
        panel("Engine acceptance by content class (adaptspec plugin / worker)",
              [(f"sum by (content_class, proposer) "
                f"(rate(adaptspec:spec_decode_num_accepted_tokens_by_class_total[{RI}])) "
                f"/ sum by (content_class, proposer) "
                f"(rate(adaptspec:spec_decode_num_draft_tokens_by_class_total[{RI}]))",
                "{{content_class}} {{proposer}}")], unit="percentunit", minmax=(0, 1)),
        row("Workers"),
        panel("Occupancy per worker (running / waiting)",
              [(f"adaptspec_worker_running{w}", "{{worker}} running"),
               (f"adaptspec_worker_waiting{w}", "{{worker}} waiting")]),
        panel("Prefill per generated token",
              [(f"adaptspec_worker_prefill_ratio{w}", "{{worker}}")],
              description="Prompt tokens prefilled per generated token in recent traffic: prefill shares the "
                          "decode steps, so a high ratio leaves less spare compute for speculation."),
        panel("Proxy in-flight per worker",
              [(f"adaptspec_worker_inflight{w}", "{{worker}}")]),
        panel("KV cache usage per worker",
              [(f"adaptspec_worker_kv_usage{w}", "{{worker}}")], unit="percentunit", minmax=(0, 1)),
        panel("Worker health", [(f"adaptspec_worker_healthy{w}", "{{worker}}")], minmax=(0, 1)),
        row("Step-time calibration"),
        panel("Calibrated step model: per-step and per-pass seconds",
              [('adaptspec_step_model_coefficient{worker=~"$worker",coefficient=~"overhead_s|.*_pass_s"}',
                "{{worker}} {{coefficient}}"),
               ('adaptspec_step_model_coefficient_error{worker=~"$worker",coefficient=~"overhead_s|.*_pass_s"}',
                "{{worker}} {{coefficient}} +-")], unit="s",
              description="Fitted online from the workers' step telemetry (control/calibration.py), with the "
                          "standard error of each coefficient; the policy prices a worker with it once trusted."),
        panel("Calibrated step model: per-token seconds",
              [('adaptspec_step_model_coefficient{worker=~"$worker",coefficient=~".*_token.*"}',
                "{{worker}} {{coefficient}}"),
               ('adaptspec_step_model_coefficient_error{worker=~"$worker",coefficient=~".*_token.*"}',
                "{{worker}} {{coefficient}} +-")], unit="s"),
        panel("Calibration trusted / evidence (steps)",
              [(f"adaptspec_step_model_trusted{w}", "{{worker}} trusted"),
               (f"adaptspec_step_model_steps{w}", "{{worker}} steps")]),
        panel("Measured mean step time (engine counters)",
              [(f"sum by (instance) (rate(adaptspec:engine_step_seconds_total[{RI}])) "
                f"/ sum by (instance) (rate(adaptspec:engine_steps_total[{RI}]))", "{{instance}}")], unit="s",
              description="What the fit should reproduce at the live batch: step seconds / steps."),
        row("Latency"),
        panel("TTFT percentiles",
              [(q("adaptspec_ttft_seconds_bucket", 0.5), "p50"),
               (q("adaptspec_ttft_seconds_bucket", 0.9), "p90"),
               (q("adaptspec_ttft_seconds_bucket", 0.99), "p99")], unit="s"),
        panel("TPOT percentiles",
              [(q("adaptspec_tpot_seconds_bucket", 0.5), "p50"),
               (q("adaptspec_tpot_seconds_bucket", 0.9), "p90"),
               (q("adaptspec_tpot_seconds_bucket", 0.99), "p99")], unit="s"),
        panel("TPOT p50 by proposer",
              [(q("adaptspec_tpot_seconds_bucket", 0.5, "proposer"), "{{proposer}}")], unit="s"),
        panel("End-to-end latency percentiles",
              [(q("adaptspec_e2e_seconds_bucket", 0.5), "p50"),
               (q("adaptspec_e2e_seconds_bucket", 0.99), "p99")], unit="s"),
        panel("Proxy overhead and decision time (p50 / p99)",
              [(q("adaptspec_proxy_overhead_seconds_bucket", 0.5), "overhead p50"),
               (q("adaptspec_proxy_overhead_seconds_bucket", 0.99), "overhead p99"),
               (q("adaptspec_decision_seconds_bucket", 0.5), "decision p50"),
               (q("adaptspec_decision_seconds_bucket", 0.99), "decision p99")], unit="s"),
        row("Latency: proxy vs engine (the engines' own histograms)"),
        panel("TTFT: proxy vs engine (p50 / p99)",
              [(q("adaptspec_ttft_seconds_bucket", 0.5), "proxy p50"),
               (q("adaptspec_ttft_seconds_bucket", 0.99), "proxy p99"),
               (q(f"{VLLM_TTFT}_bucket", 0.5), "engine p50"),
               (q(f"{VLLM_TTFT}_bucket", 0.99), "engine p99"),
               (q(f"{SGLANG_TTFT}_bucket", 0.5), "SGLang p50")], unit="s",
              description="The proxy's TTFT includes its own overhead, the network and, for non-stream requests, "
                          "the whole answer; the engine's starts when the request reaches the engine."),
        panel("Inter-token latency: engine vs proxy TPOT (p50 / p99)",
              [(_itl(0.5), "engine ITL p50"), (_itl(0.99), "engine ITL p99"),
               (q("adaptspec_tpot_seconds_bucket", 0.5), "proxy TPOT p50"),
               (q("adaptspec_tpot_seconds_bucket", 0.99), "proxy TPOT p99")], unit="s",
              description="Engine: time between a request's outputs (one per step; a step that emitted several "
                          "speculated tokens counts once). Proxy: decode time per output token of streams."),
        panel("End-to-end: proxy vs engine (p50 / p99)",
              [(q("adaptspec_e2e_seconds_bucket", 0.5), "proxy p50"),
               (q("adaptspec_e2e_seconds_bucket", 0.99), "proxy p99"),
               (q(f"{VLLM_E2E}_bucket", 0.5), "engine p50"),
               (q(f"{VLLM_E2E}_bucket", 0.99), "engine p99")], unit="s"),
        panel("Engine queue time (p50 / p99)",
              [(q(f"{VLLM_QUEUE}_bucket", 0.5), "p50"), (q(f"{VLLM_QUEUE}_bucket", 0.99), "p99")], unit="s",
              description="Time a request waited in the engine's queue before joining the running batch."),
        row("Goodput"),
        panel("Goodput: output tokens/s per worker",
              [(f"sum by (worker) (rate(adaptspec_output_tokens_total{w}[{RI}]))", "{{worker}}")],
              unit="short", stack=True),
        panel("Output tokens/s by proposer",
              [(f"sum by (proposer) (rate(adaptspec_output_tokens_total[{RI}]))", "{{proposer}}")],
              unit="short", stack=True),
        row("Realized speedup (holdout / switchback)"),
        panel("Realized speedup by class / load / arm (holdout, 95% interval)",
              [("adaptspec_realized_speedup", "{{content_class}} {{load_bucket}} {{arm}}"),
               ("adaptspec_realized_speedup_low", "low {{content_class}} {{load_bucket}} {{arm}}"),
               ("adaptspec_realized_speedup_high", "high {{content_class}} {{load_bucket}} {{arm}}")],
              description="Decode time per token of held-out requests over speculating ones (> 1: faster). "
                          "Needs policy.holdout."),
        panel("Switchback throughput ratio and guard",
              [("adaptspec_switchback_throughput_ratio", "throughput policy/off {{load_bucket}}"),
               ("sum(adaptspec_guard_active)", "guarded strata"),
               (f"sum by (reason) (rate(adaptspec_experiment_decisions_total[{RI}]))", "{{reason}}/s")],
              description="System throughput of policy windows over off windows; strata the guard holds off; "
                          "decisions changed by holdout / switchback / guard. Needs policy.switchback."),
        panel("Hedge: policy vs its fixed control plan",
              [("adaptspec_switchback_throughput_ratio", "policy/control {{load_bucket}}"),
               ("adaptspec_switchback_throughput_ratio_low", "low {{load_bucket}}"),
               ("max by (load_bucket, control) (adaptspec_hedge_serving_control)",
                "serving {{control}} {{load_bucket}}")],
              description="With policy.switchback.control set to a fixed plan (e.g. eagle:3): the system "
                          "throughput of policy windows over control windows per load bucket, and 1 while the "
                          "bucket runs the fixed plan (in all but switchback.share of its windows) because the "
                          "policy measured slower. README: the hedge's bound."),
        panel("Measured correction of the model's price at batch 1",
              [(f"adaptspec_realized_correction{w}", "{{worker}} {{content_class}} {{proposer}}")],
              description="Per worker, class and proposer: the factor on the cost model's goodput that its "
                          "batch-1 requests' decode rates are sure of (1: the model agrees, or too little "
                          "evidence). Below 1: the model overprices the proposer for the class; the policy ranks "
                          "it lower there."),
        row("Errors and health"),
        panel("Request rate by status code",
              [(f"sum by (code) (rate(adaptspec_requests_total[{RI}]))", "{{code}}")], unit="reqps"),
        panel("Error ratio (non-2xx)",
              [(f'sum(rate(adaptspec_requests_total{{code!~"2.."}}[{RI}])) '
                f"/ sum(rate(adaptspec_requests_total[{RI}]))", "errors")], unit="percentunit"),
        panel("Upstream retries",
              [(f"sum by (worker) (rate(adaptspec_upstream_retries_total{w}[{RI}]))", "{{worker}}")]),
        panel("Scrape health",
              [(f"sum by (worker) (rate(adaptspec_scrape_errors_total{w}[{RI}]))", "errors/s {{worker}}"),
               ('up{job=~"adaptspec-proxy|vllm-workers|sglang-workers"}', "up {{job}} {{instance}}")]),
        panel("State backend (Redis)",
              [("adaptspec_state_backend_up", "up {{backend}} {{instance}}"),
               (f"sum by (backend) (rate(adaptspec_state_backend_errors_total[{RI}]))", "errors/s {{backend}}")]),
        panel("Config reloads",
              [("sum by (result) (increase(adaptspec_config_reloads_total[1h]))", "{{result}}")]),
    ]
    return dashboard("adaptspec-proxy", "adaptspec: adaptive speculation", panels,
                     [query_var("worker", "label_values(adaptspec_worker_healthy, worker)", "Worker")])


def engines_dashboard() -> dict:
    inst = '{instance=~"$instance"}'
    panels = [
        row("vLLM workers"),
        panel("vLLM running / waiting",
              [(f"vllm:num_requests_running{inst}", "{{instance}} running"),
               (f"vllm:num_requests_waiting{inst}", "{{instance}} waiting")]),
        panel("vLLM KV cache usage", [(f"vllm:kv_cache_usage_perc{inst}", "{{instance}}")],
              unit="percentunit", minmax=(0, 1)),
        panel("vLLM mean acceptance length (1 + accepted / drafts)",
              [(f"1 + sum by (instance) (rate(vllm:spec_decode_num_accepted_tokens_total{inst}[{RI}])) "
                f"/ sum by (instance) (rate(vllm:spec_decode_num_drafts_total{inst}[{RI}]))", "{{instance}}")]),
        panel("vLLM acceptance per draft position",
              [(f"sum by (instance, position) "
                f"(rate(vllm:spec_decode_num_accepted_tokens_per_pos_total{inst}[{RI}])) "
                f"/ on (instance) group_left sum by (instance) "
                f"(rate(vllm:spec_decode_num_drafts_total{inst}[{RI}]))", "{{instance}} pos {{position}}")],
              unit="percentunit", minmax=(0, 1)),
        panel("vLLM workers running the adaptspec plugin",
              [(f"sum by (instance, version, vllm_version) (adaptspec:vllm_plugin_info{inst})",
                "{{instance}} adaptspec {{version}} / vLLM {{vllm_version}}")], minmax=(0, 1),
              description="0 or missing: per-request gamma (vllm_xargs) would be ignored by that worker."),
        panel("Draft tokens/s by content class (plugin)",
              [(f"sum by (content_class, proposer) "
                f"(rate(adaptspec:spec_decode_num_draft_tokens_by_class_total{inst}[{RI}]))",
                "{{content_class}} {{proposer}}")], stack=True),
        panel("Drafts/s by content class (plugin)",
              [(f"sum by (content_class, proposer) "
                f"(rate(adaptspec:spec_decode_num_drafts_by_class_total{inst}[{RI}]))",
                "{{content_class}} {{proposer}}")], stack=True),
        row("vLLM / adaptspec worker latency (per instance)"),
        panel("Engine TTFT p50 / p99",
              [(q(f"{VLLM_TTFT}_bucket{inst}", 0.5, "instance"), "{{instance}} p50"),
               (q(f"{VLLM_TTFT}_bucket{inst}", 0.99, "instance"), "{{instance}} p99")], unit="s"),
        panel("Engine inter-token latency p50 / p99",
              [(_itl(0.5, inst, "instance"), "{{instance}} p50"), (_itl(0.99, inst, "instance"), "{{instance}} p99")],
              unit="s", description="vllm:inter_token_latency_seconds (older vLLM: "
                                    "vllm:time_per_output_token_seconds)."),
        panel("Engine end-to-end latency p50 / p99",
              [(q(f"{VLLM_E2E}_bucket{inst}", 0.5, "instance"), "{{instance}} p50"),
               (q(f"{VLLM_E2E}_bucket{inst}", 0.99, "instance"), "{{instance}} p99")], unit="s"),
        panel("Engine queue time p50 / p99",
              [(q(f"{VLLM_QUEUE}_bucket{inst}", 0.5, "instance"), "{{instance}} p50"),
               (q(f"{VLLM_QUEUE}_bucket{inst}", 0.99, "instance"), "{{instance}} p99")], unit="s"),
        row("SGLang workers"),
        panel("SGLang running / queued",
              [(f"sglang:num_running_reqs{inst}", "{{instance}} running"),
               (f"sglang:num_queue_reqs{inst}", "{{instance}} queued")]),
        panel("SGLang token usage", [(f"sglang:token_usage{inst}", "{{instance}}")],
              unit="percentunit", minmax=(0, 1)),
        panel("SGLang mean acceptance length", [(f"sglang:spec_accept_length{inst}", "{{instance}}")]),
        panel("SGLang generation throughput (tokens/s)",
              [(f"sglang:gen_throughput{inst}", "{{instance}}")]),
        panel("SGLang TTFT p50 / p99",
              [(q(f"{SGLANG_TTFT}_bucket{inst}", 0.5, "instance"), "{{instance}} p50"),
               (q(f"{SGLANG_TTFT}_bucket{inst}", 0.99, "instance"), "{{instance}} p99")], unit="s"),
    ]
    return dashboard("adaptspec-engines", "adaptspec: engine workers", panels,
                     [query_var("instance", 'label_values(up{job=~"vllm-workers|sglang-workers"}, instance)',
                                "Instance")])


def main() -> None:
    for name, dash in (("adaptspec.json", proxy_dashboard()), ("engines.json", engines_dashboard())):
        (HERE / name).write_text(json.dumps(dash, indent=2) + "\n")


if __name__ == "__main__":
    main()
