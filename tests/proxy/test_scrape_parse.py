from adaptspec.proxy.scrape import parse_metrics

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 8.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.7e9
adaptspec:spec_decode_num_draft_tokens_by_class_total{content_class="code",proposer="ngram"} 12
adaptspec:spec_decode_num_accepted_tokens_by_class_total{content_class="code",proposer="ngram"} 6
adaptspec:spec_decode_num_drafts_by_class_total{content_class="code",proposer="ngram"} 3
python_gc_objects_collected_total{generation="0"} 5.0
"""

SGLANG = """\
sglang:num_running_reqs{model_name="m"} 7.0
sglang:num_queue_reqs{model_name="m"} 1.0
sglang:token_usage{model_name="m"} 0.5
sglang:spec_accept_length{model_name="m"} 2.5
"""


def test_vllm_occupancy_sums_and_averages():
    s = parse_metrics(VLLM)
    assert (s.running, s.waiting) == (5.0, 4.0)
    assert s.kv_usage == 0.5  # averaged over engines


def test_vllm_spec_samples_kept_with_labels():
    names = [(n, lab.get("position"), lab.get("content_class"), v) for n, lab, v in parse_metrics(VLLM).spec]
    assert ("vllm:spec_decode_num_draft_tokens_total", None, None, 40.0) in names
    assert ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "1", None, 8.0) in names
    assert ("adaptspec:spec_decode_num_accepted_tokens_by_class_total", None, "code", 6.0) in names
    assert not any(n.endswith("_created") or n.startswith("python_") for n, *_ in names)
    assert len(names) == 8


def test_sglang_families():
    s = parse_metrics(SGLANG)
    assert (s.running, s.waiting, s.kv_usage) == (7.0, 1.0, 0.5)
    assert s.spec == [("sglang:spec_accept_length", {"model_name": "m"}, 2.5)]


def test_garbage_lines_are_skipped():
    s = parse_metrics("vllm:num_requests_running{a=\"b\"} notanumber\nvllm:num_requests_waiting\n"
                      "vllm:num_requests_running 1\n")
    assert s.running == 1.0 and s.waiting is None


def test_escaped_label_values():
    s = parse_metrics('adaptspec:spec_decode_num_draft_tokens_by_class_total{content_class="a\\"b",'
                      'proposer="draft"} 2\n')
    assert s.spec == [("adaptspec:spec_decode_num_draft_tokens_by_class_total",
                       {"content_class": 'a"b', "proposer": "draft"}, 2.0)]


STEPS = """\
adaptspec:engine_steps_total{engine="0",model_name="m"} 10.0
adaptspec:engine_steps_total{engine="1",model_name="m"} 5.0
adaptspec:engine_step_seconds_total{engine="0",model_name="m"} 0.25
adaptspec:engine_batched_tokens_total{engine="0",model_name="m"} 100.0
adaptspec:engine_kv_tokens_total{engine="0",model_name="m"} 4000.0
adaptspec:engine_drafted_tokens_total{engine="0",model_name="m",proposer="draft"} 30.0
adaptspec:engine_drafted_tokens_total{engine="1",model_name="m",proposer="draft"} 6.0
adaptspec:engine_drafted_tokens_total{engine="0",model_name="m",proposer="ngram"} 8.0
adaptspec:engine_draft_passes_total{engine="0",model_name="m",proposer="draft"} 9.0
adaptspec:engine_draft_calls_total{engine="0",model_name="m",proposer="draft"} 3.0
adaptspec:engine_draft_calls_total{engine="1",model_name="m",proposer="draft"} 2.0
adaptspec:engine_steps_created{engine="0",model_name="m"} 1.7e9
"""


def test_step_telemetry_summed_over_engines_per_proposer():
    s = parse_metrics(VLLM + STEPS).steps
    assert (s.steps, s.step_seconds, s.batched_tokens, s.kv_tokens) == (15.0, 0.25, 100.0, 4000.0)
    assert s.drafted_tokens == {"draft": 36.0, "ngram": 8.0}
    assert s.draft_passes == {"draft": 9.0}
    assert s.draft_calls == {"draft": 5.0}


def test_no_step_telemetry_without_the_steps_counter():
    assert parse_metrics(VLLM).steps is None
    assert parse_metrics(SGLANG).steps is None
