"""The vLLM plugin's schedule xarg, parsed without vLLM: "max_running_batch:cap,..." -> rows; errors name it."""

from __future__ import annotations

import pytest

from adaptspec.integrations.vllm_plugin import parse_schedule_xarg, request_schedule, validate_xargs


def test_schedule_xarg_parses_and_is_read_per_request():
    assert parse_schedule_xarg("8:2, 32:1") == ((8, 2), (32, 1))
    assert request_schedule({"adaptspec_schedule": "4:3"}) == ((4, 3),)
    assert request_schedule({"adaptspec_num_spec_tokens": 2}) is None and request_schedule(None) is None


@pytest.mark.parametrize("value, words", [("8", "row 0 must be max_running_batch:cap"), ("8:x", "row 0"),
                                          ("8:2,4:1", "row 1"), ("0:1", ">= 1"), (12, "must be a string")])
def test_bad_schedule_xarg_is_a_value_error_naming_it(value, words):
    with pytest.raises(ValueError, match=words) as e:
        validate_xargs({"adaptspec_schedule": value})
    assert "adaptspec_schedule" in str(e.value)
