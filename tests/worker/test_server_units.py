"""Unit tests of the worker server's pure parts: stop strings, request validation, metrics exposition."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adaptspec.errors import RequestError
from adaptspec.worker import _metrics
from adaptspec.worker._generation import TextTracker as _TextTracker
from adaptspec.worker._openai import (
    ChatCompletionRequest,
    CompletionRequest,
    Speculation,
    check_unsupported,
    error_body,
    parse_body,
    resolve_speculation,
)


def _bytes_decode(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def _feed(tracker: _TextTracker, text: bytes, step: int) -> list[str]:
    out = []
    for i in range(0, len(text), step):
        out.append(tracker.add(list(text[i : i + step])))
        if tracker.stopped:
            break
    return out


@pytest.mark.parametrize("step", [1, 2, 3, 7, 100])
def test_stop_string_truncates_before_it_whatever_the_step_size(step):
    t = _TextTracker(_bytes_decode, ["STOP", "\n\n"])
    deltas = _feed(t, b"abc def STOP ghi", step)
    assert t.stopped
    assert t.text == "abc def "
    assert "".join(deltas) == "abc def "  # streamed text never shows any part of the stop string


def test_earliest_of_several_stop_strings_wins():
    t = _TextTracker(_bytes_decode, ["zz", "b"])
    t.add(list(b"a b zz"))
    assert t.stopped and t.text == "a "


def test_partial_stop_prefix_is_held_back_then_released():
    t = _TextTracker(_bytes_decode, ["STOP"])
    assert t.add(list(b"abc ST")) == "abc "
    assert t.add(list(b"ART")) == "START"
    assert not t.stopped
    assert t.flush() == ""


def test_incomplete_utf8_is_held_until_complete():
    t = _TextTracker(_bytes_decode, None)
    euro = "€".encode()  # 3 bytes
    assert t.add([ord("x"), euro[0]]) == "x"
    assert t.add([euro[1]]) == ""
    assert t.add([euro[2]]) == "€"


def test_no_stops_streams_everything_and_flush_is_idempotent():
    t = _TextTracker(_bytes_decode, None)
    assert "".join(_feed(t, b"hello world", 4)) == "hello world"
    assert t.flush() == "" and t.text == "hello world"


def test_lazy_tracker_decodes_once_at_the_end():
    calls = []

    def decode(ids):
        calls.append(len(ids))
        return _bytes_decode(ids)

    t = _TextTracker(decode, None, lazy=True)
    assert _feed(t, b"hello world", 3) == ["", "", "", ""]
    assert t.flush() == "hello world" and t.text == "hello world" and calls == [11]
    with_stops = _TextTracker(decode, ["wor"], lazy=True)  # stop strings need the text every step
    assert "".join(_feed(with_stops, b"hello world", 3)) == "hello " and with_stops.stopped


def test_parse_body_errors_are_400_with_the_field():
    with pytest.raises(RequestError) as e:
        parse_body(b"{not json", CompletionRequest)
    assert e.value.status == 400 and "not valid JSON" in e.value.message
    with pytest.raises(RequestError) as e:
        parse_body(b"[1, 2]", CompletionRequest)
    assert "JSON object" in e.value.message
    with pytest.raises(RequestError) as e:
        parse_body(b'{"prompt": "x", "temperature": -1}', CompletionRequest)
    assert e.value.param == "temperature"
    with pytest.raises(RequestError) as e:
        parse_body(b'{"prompt": "x", "max_tokens": 0}', CompletionRequest)
    assert e.value.param == "max_tokens"
    with pytest.raises(RequestError) as e:
        parse_body(b'{"messages": []}', ChatCompletionRequest)
    assert e.value.param == "messages"
    with pytest.raises(RequestError) as e:
        parse_body(b'{"prompt": "x", "speculation": {"proposer": "ngram", "gamma": 3}}', CompletionRequest)
    assert e.value.param == "speculation.gamma"
    with pytest.raises(RequestError) as e:
        parse_body(b'{"prompt": "x", "stop": ["", "a"]}', CompletionRequest)
    assert e.value.param == "stop"


def test_parse_body_accepts_openai_shapes_and_ignores_unknown_fields():
    r = parse_body(b'{"prompt": [1, 2, 3], "stop": "x", "frequency_penalty": 0, "logit_bias": {}}',
                   CompletionRequest)
    assert r.prompt == [1, 2, 3] and r.stop == ["x"]
    c = parse_body(b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},'
                   b'{"type": "text", "text": "b"}]}], "max_completion_tokens": 5}', ChatCompletionRequest)
    assert c.messages[0].text() == "ab" and c.max_completion_tokens == 5


def test_unsupported_fields_are_refused_clearly():
    for body, param in [(b'{"prompt": "x", "n": 2}', "n"), (b'{"prompt": "x", "echo": true}', "echo"),
                        (b'{"prompt": "x", "logprobs": 2}', "logprobs"),
                        (b'{"prompt": "x", "best_of": 3}', "best_of")]:
        with pytest.raises(RequestError) as e:
            check_unsupported(parse_body(body, CompletionRequest))
        assert e.value.status == 400 and e.value.param == param
    image = parse_body(b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}',
                       ChatCompletionRequest)
    with pytest.raises(RequestError, match="text content"):
        image.messages[0].text()


_OFFER = {"default_proposer": "none", "default_k": 4, "proposers": ("ngram", "draft"), "max_k": 8}


def test_resolve_speculation_defaults_and_off_forms():
    assert resolve_speculation(None, **_OFFER).proposer == "none"
    on = resolve_speculation(Speculation(proposer="ngram"), **_OFFER)
    assert (on.proposer, on.k) == ("ngram", 4)
    k0 = resolve_speculation(Speculation(proposer="draft", num_speculative_tokens=0, content_class="code"),
                             **_OFFER)
    assert (k0.proposer, k0.k, k0.content_class) == ("none", 0, "code")
    default_on = resolve_speculation(Speculation(num_speculative_tokens=2),
                                     **{**_OFFER, "default_proposer": "draft"})
    assert (default_on.proposer, default_on.k) == ("draft", 2)


@pytest.mark.parametrize("spec, param", [
    (Speculation(proposer="medusa"), "speculation.proposer"),
    (Speculation(proposer="ngram", num_speculative_tokens=-1), "speculation.num_speculative_tokens"),
    (Speculation(proposer="ngram", num_speculative_tokens=9), "speculation.num_speculative_tokens"),
    (Speculation(proposer="ngram", content_class="poetry"), "speculation.content_class"),
])
def test_resolve_speculation_rejects_bad_values(spec, param):
    with pytest.raises(RequestError) as e:
        resolve_speculation(spec, **_OFFER)
    assert e.value.status == 400 and e.value.param == param and e.value.message


def test_error_body_shape():
    body = error_body(404, "nope", code="model_not_found", param="model")
    assert body == {"error": {"message": "nope", "type": "not_found_error", "code": "model_not_found",
                              "param": "model"}}


def test_metrics_exposition_uses_vllm_names_and_labels():
    counters = _metrics.ServerCounters()
    counters.finished(10, 5, "stop")
    counters.finished(3, 7, "length")
    counters.aborted(2, 1)
    snapshot = {"running": 2, "waiting": 1, "kv_cache_usage": 0.25, "spec_num_drafts": 4,
                "spec_num_draft_tokens": 12, "spec_num_accepted_tokens": 7, "spec_accepted_per_pos": [4, 2, 1],
                "spec_by_class": {("code", "ngram"): (3, 9, 6), (None, "draft"): (1, 3, 1)}}
    text = _metrics.render(snapshot, counters, "tiny").decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    base = (("engine", "0"), ("model_name", "tiny"))
    assert samples[("vllm:num_requests_running", base)] == 2
    assert samples[("vllm:num_requests_waiting", base)] == 1
    assert samples[("vllm:kv_cache_usage_perc", base)] == 0.25
    assert samples[("vllm:prompt_tokens_total", base)] == 15
    assert samples[("vllm:generation_tokens_total", base)] == 13
    assert samples[("vllm:request_success_total", (("engine", "0"), ("finished_reason", "stop"),
                                                   ("model_name", "tiny")))] == 1
    assert samples[("vllm:spec_decode_num_drafts_total", base)] == 4
    assert samples[("vllm:spec_decode_num_draft_tokens_total", base)] == 12
    assert samples[("vllm:spec_decode_num_accepted_tokens_total", base)] == 7
    for pos, value in enumerate([4, 2, 1]):
        assert samples[("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                        (*base, ("position", str(pos))))] == value
    code = (("content_class", "code"), ("engine", "0"), ("model_name", "tiny"), ("proposer", "ngram"))
    assert samples[("adaptspec:spec_decode_num_drafts_by_class_total", code)] == 3
    assert samples[("adaptspec:spec_decode_num_draft_tokens_by_class_total", code)] == 9
    assert samples[("adaptspec:spec_decode_num_accepted_tokens_by_class_total", code)] == 6
    unknown = (("content_class", "unknown"), ("engine", "0"), ("model_name", "tiny"), ("proposer", "draft"))
    assert samples[("adaptspec:spec_decode_num_accepted_tokens_by_class_total", unknown)] == 1
    assert "_created" not in text
