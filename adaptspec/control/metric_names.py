"""Engine metric names, defined once: what engines expose on /metrics and the proxy scrapes.

Counter families are named here by their base name (as `prometheus_client` registers them); the text
exposition adds `_total`, which is the name a scraper sees (`total(...)`). The adaptspec worker and the
vLLM plugin write these names; control/promtext.py parses them (for the proxy's scraper and the benchmarks);
control/estimators.py ingests the speculation families. Step telemetry names live with their parser in control/telemetry.py.
"""

from __future__ import annotations


def total(counter: str) -> str:
    """A counter family's sample name in the text exposition format."""
    return counter + "_total"


# occupancy gauges (vLLM, and the adaptspec worker, which speaks vLLM's dialect)
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_KV_USAGE = "vllm:kv_cache_usage_perc"
VLLM_KV_USAGE_OLD = "vllm:gpu_cache_usage_perc"  # vLLM before 0.7
# request counters the adaptspec worker exposes like vLLM (not scraped by the proxy)
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens"
VLLM_REQUEST_SUCCESS = "vllm:request_success"
# request latency histograms (vLLM's names; the adaptspec worker exports them too: worker/_metrics.py)
VLLM_TTFT = "vllm:time_to_first_token_seconds"
VLLM_ITL = "vllm:inter_token_latency_seconds"
VLLM_ITL_OLD = "vllm:time_per_output_token_seconds"  # older vLLM (renamed to the one above)
VLLM_E2E = "vllm:e2e_request_latency_seconds"
VLLM_QUEUE_TIME = "vllm:request_queue_time_seconds"
SGLANG_TTFT = "sglang:time_to_first_token_seconds"
# engine-wide speculation counters (base names)
VLLM_SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"  # label: position
# request-steps by the gamma the step allowed the request (label gamma; 0: none; gamma schedules cap it by the
# running batch): the adaptspec worker (counter base name)
ENGINE_STEPS_BY_GAMMA = "adaptspec:engine_steps_by_gamma"
# output tokens the engine emitted, counted at every step (a switchback window's throughput; vLLM's
# generation_tokens counts per step too): the adaptspec worker (counter base name)
ENGINE_OUTPUT_TOKENS = "adaptspec:engine_output_tokens"
# per content class and proposer (adaptspec worker, vLLM plugin; base names)
CLASS_SPEC_DRAFTS = "adaptspec:spec_decode_num_drafts_by_class"
CLASS_SPEC_DRAFT_TOKENS = "adaptspec:spec_decode_num_draft_tokens_by_class"
CLASS_SPEC_ACCEPTED = "adaptspec:spec_decode_num_accepted_tokens_by_class"
# n-gram lookup scored along finished requests that ran without it (control/shadow.py), per content class and
# sampling regime; the two per-position families also by `position` (vLLM plugin; the adaptspec worker reports
# the same counts per response instead: `usage.speculative.shadow`)
SHADOW_NGRAM_STEPS = "adaptspec:shadow_ngram_steps_by_class"
SHADOW_NGRAM_DRAFTS = "adaptspec:shadow_ngram_drafts_by_class"
SHADOW_NGRAM_DRAFT_TOKENS = "adaptspec:shadow_ngram_draft_tokens_by_class"
SHADOW_NGRAM_TRIED = "adaptspec:shadow_ngram_tried_per_pos_by_class"
SHADOW_NGRAM_ACCEPTED = "adaptspec:shadow_ngram_accepted_per_pos_by_class"
# SGLang
SGLANG_RUNNING = "sglang:num_running_reqs"
SGLANG_WAITING = "sglang:num_queue_reqs"
SGLANG_KV_USAGE = "sglang:token_usage"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"  # gauge: mean tokens per verify step
SGLANG_GENERATION_TOKENS = "sglang:generation_tokens"  # counter (base name)
# speculation gauges of a log interval (sglang >= 0.5.23: metrics_collector.py) and the verify-step counter
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"  # gauge: accepted drafts / proposed drafts
SGLANG_NUM_STEPS = "sglang:spec_num_steps"  # gauge: the active speculative_num_steps (moves under --speculative-adaptive)
SGLANG_NUM_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"  # gauge: the active speculative_num_draft_tokens
SGLANG_VERIFY_CALLS = "sglang:spec_verify_calls"  # counter (base name): verification steps

PREFIXES = ("vllm:", "sglang:", "adaptspec:")  # every family the scraper looks at starts with one of these
