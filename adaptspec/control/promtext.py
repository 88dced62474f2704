"""The Prometheus text exposition of an engine's /metrics, parsed into one `WorkerSample`.

Beside the names it reads (metric_names.py, telemetry.py), so that measurement code (adaptspec.bench,
benchmarks/, `adaptspec calibrate`) parses a worker's metrics without importing the proxy; the proxy's
scraper (proxy/scrape.py) polls the workers and hands each text here. Three dialects:

    vLLM / adaptspec worker   vllm:num_requests_running, vllm:num_requests_waiting,
                              vllm:kv_cache_usage_perc (older vLLM: vllm:gpu_cache_usage_perc),
                              vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total,
                              vllm:spec_decode_num_accepted_tokens_per_pos_total{position}
    per class (adaptspec)     adaptspec:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_by_class_total
                              {content_class, proposer}
    shadow n-gram (vLLM plugin)  adaptspec:shadow_ngram_{steps,drafts,draft_tokens}_by_class_total,
                              adaptspec:shadow_ngram_{tried,accepted}_per_pos_by_class_total
                              {content_class, regime[, position]}
    SGLang                    sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage,
                              sglang:spec_verify_calls_total + sglang:generation_tokens_total (counters),
                              sglang:spec_{accept_length,accept_rate,num_steps,num_draft_tokens} (gauges)
    step telemetry            adaptspec:engine_{steps,step_seconds,batched_tokens,kv_tokens}_total,
                              adaptspec:engine_{drafted_tokens,draft_passes}_total{proposer}
                              (telemetry.py; summed over other labels into one StepCounters)

Occupancy series of one family with several label sets (data-parallel engines, several models) are
summed, except the KV usage fraction, which is averaged. Speculation families are kept as samples, for
`counters.ingest_vllm` / `ingest_sglang`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from adaptspec.control import metric_names as names
from adaptspec.control import telemetry
from adaptspec.control.counters import SGLANG_STYLE, SHADOW_STYLE, VLLM_STYLE

_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_RUNNING = (names.VLLM_RUNNING, names.SGLANG_RUNNING)
_WAITING = (names.VLLM_WAITING, names.SGLANG_WAITING)
_KV = (names.VLLM_KV_USAGE, names.VLLM_KV_USAGE_OLD, names.SGLANG_KV_USAGE)
_SPEC = VLLM_STYLE | SGLANG_STYLE | SHADOW_STYLE  # to the engine adapter's `ingest` (shadow: feedback.on_sample)

_OUTPUT_TOKENS = names.ENGINE_OUTPUT_TOKENS + "_total"
Sample = tuple[str, dict[str, str], float]  # as adaptspec.control.estimators.ingest_* take them

_STEP_SCALARS = {telemetry.METRIC_STEPS + "_total": "steps", telemetry.METRIC_STEP_SECONDS + "_total": "step_seconds",
                 telemetry.METRIC_BATCHED_TOKENS + "_total": "batched_tokens",
                 telemetry.METRIC_KV_TOKENS + "_total": "kv_tokens",
                 telemetry.METRIC_STEP_REQUESTS + "_total": "requests"}
_STEP_BY_PROPOSER = {telemetry.METRIC_DRAFTED_TOKENS + "_total": "drafted_tokens",
                     telemetry.METRIC_DRAFT_PASSES + "_total": "draft_passes",
                     telemetry.METRIC_DRAFT_CALLS + "_total": "draft_calls"}


@dataclass
class WorkerSample:
    """One scrape of one worker: occupancy, plus the speculation samples for the estimators' ingest_*."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    spec: list[Sample] = field(default_factory=list)
    steps: telemetry.StepCounters | None = None  # cumulative step telemetry, when the worker exports it
    output_tokens: float | None = None  # adaptspec:engine_output_tokens_total (counted per step; engine_switch.py)


def _labels(text: str) -> dict[str, str]:
    return {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL_RE.findall(text)}


def parse_metrics(text: str) -> WorkerSample:
    """Parse Prometheus text exposition into a WorkerSample (other families are skipped)."""
    sample = WorkerSample()
    running: list[float] = []
    waiting: list[float] = []
    kv: list[float] = []
    scalars: dict[str, float] = {}
    by_proposer: dict[str, dict[str, float]] = {"drafted_tokens": {}, "draft_passes": {}, "draft_calls": {}}
    for line in text.splitlines():
        if not line.startswith(names.PREFIXES):
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            name, labels, rest = line[:brace], line[brace + 1:close], line[close + 1:]
        else:
            name, _, rest = line.partition(" ")
            labels = ""
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if name in _RUNNING:
            running.append(value)
        elif name in _WAITING:
            waiting.append(value)
        elif name in _KV:
            kv.append(value)
        elif name in _SPEC:
            sample.spec.append((name, _labels(labels), value))
        elif name in _STEP_SCALARS:
            key = _STEP_SCALARS[name]
            scalars[key] = scalars.get(key, 0.0) + value
        elif name == _OUTPUT_TOKENS:
            sample.output_tokens = (sample.output_tokens or 0.0) + value
        elif name in _STEP_BY_PROPOSER:
            per = by_proposer[_STEP_BY_PROPOSER[name]]
            proposer = _labels(labels).get("proposer", "")
            per[proposer] = per.get(proposer, 0.0) + value
    if running:
        sample.running = sum(running)
    if waiting:
        sample.waiting = sum(waiting)
    if kv:
        sample.kv_usage = sum(kv) / len(kv)
    if "steps" in scalars:
        sample.steps = telemetry.StepCounters(**scalars, **by_proposer)
    return sample
