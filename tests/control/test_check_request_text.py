"""check_request_text raises exactly what request_text raises, for valid and malformed bodies alike."""

from __future__ import annotations

import pytest

from adaptspec.control.classify import check_request_text, request_text
from adaptspec.errors import RequestError

U = {"role": "user", "content": "hi"}
BODIES = [
    {"messages": [U]},
    {"messages": [{"role": "system", "content": "be brief"}, U, {"role": "assistant", "content": None}, U]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
    {"messages": [{"role": "user", "content": [7]}]},
    {"messages": [{"role": "user", "content": 7}]},
    {"messages": [{"role": "user", "content": {"text": "x"}}]},
    {"messages": [{"role": 5, "content": "x"}]},
    {"messages": [{"content": "x"}]},  # no role
    {"messages": [{"role": "tool", "content": 9}]},  # a tool turn is not read: not checked either
    {"messages": ["hi"]},
    {"messages": []},
    {"messages": "hi"},
    {"messages": None, "prompt": "p"},
    {"prompt": "p"},
    {"prompt": ["a", "b"]},
    {"prompt": [1, 2, 3]},
    {"prompt": [1, "b"]},
    {"prompt": 3},
    {"prompt": None},
    {"model": "m"},
    ["not", "a", "body"],
]


def _outcome(fn, body):
    try:
        fn(body)
    except RequestError as exc:
        return ("error", str(exc), exc.status, getattr(exc, "param", None))
    return "ok"


@pytest.mark.parametrize("body", BODIES)
def test_same_outcome_as_request_text(body):
    assert _outcome(check_request_text, body) == _outcome(request_text, body)


def test_bodies_cover_both_outcomes():
    outcomes = [_outcome(request_text, b) for b in BODIES]
    assert outcomes.count("ok") >= 6 and len(outcomes) - outcomes.count("ok") >= 8
