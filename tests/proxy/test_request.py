"""The parsed request (request.py): one temperature, read the same way by the regime key and the features."""

from __future__ import annotations

import dataclasses

import pytest

from adaptspec.control.alpha import DEFAULT_TEMPERATURE, GREEDY, SAMPLED
from adaptspec.control.config import parse_config
from adaptspec.control.predict import FEATURE_NAMES
from adaptspec.proxy.app import Proxy
from adaptspec.proxy.request import Generation, generation_of, parse_generation

POOLS = [{"name": "p", "engine": "adaptspec", "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]
MESSAGES = [{"role": "user", "content": "Rename x to y:\n```\nx = 1\nprint(x)\n```"}]


@pytest.mark.parametrize(("fields", "temperature", "regime"), [
    ({}, DEFAULT_TEMPERATURE, SAMPLED),  # absent: the engines' default (vLLM, SGLang, the adaptspec worker: 1)
    ({"temperature": None}, DEFAULT_TEMPERATURE, SAMPLED),
    ({"temperature": 0}, 0.0, GREEDY),
    ({"temperature": 0.0}, 0.0, GREEDY),
    ({"temperature": 0.7}, 0.7, SAMPLED),
    ({"temperature": 2}, 2.0, SAMPLED),
    ({"temperature": True}, DEFAULT_TEMPERATURE, SAMPLED),  # not a number: the default, for both readers
    ({"temperature": 0.7, "top_k": 1}, 0.7, GREEDY),  # top_k 1 is greedy decoding whatever the temperature
])
def test_the_regime_and_the_prediction_features_read_one_temperature(fields, temperature, regime):
    req = generation_of({"model": "m", "messages": MESSAGES, **fields})
    assert (req.temperature, req.regime) == (temperature, regime)
    _, feats = Proxy(parse_config({"pools": POOLS})).classify_body(req)
    assert feats.x[FEATURE_NAMES.index("temperature")] == temperature
    if "top_k" not in fields:  # greedy exactly when the features see temperature 0
        assert (regime == GREEDY) == (feats.x[FEATURE_NAMES.index("temperature")] == 0.0)


def test_the_parsed_request_is_frozen_and_keeps_the_bytes():
    raw = b'{"model": "m", "prompt": "a", "max_completion_tokens": 5}'
    req = parse_generation(raw, "completions")
    assert (req.kind, req.raw, req.model, req.stream, req.max_tokens) == ("completions", raw, "m", False, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.temperature = 0.0


def test_a_parsed_request_is_an_ordinary_generation():
    """parse_generation builds it without the dataclass's __init__ (request._Unfrozen): same type, same
    fields, as frozen, slots only."""
    req = generation_of({"model": "m", "messages": MESSAGES, "temperature": 0, "max_tokens": 3})
    same = Generation(**{f.name: getattr(req, f.name) for f in dataclasses.fields(Generation)})
    assert type(req) is Generation and req == same and repr(req) == repr(same)
    assert (req.temperature, req.regime, req.max_tokens, req.kind) == (0.0, GREEDY, 3, "chat")
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.body = {}
    assert not hasattr(req, "__dict__")
