"""GoodputPolicy's shortcut for one healthy worker that can only run plain: the same Decision as pricing it."""

from __future__ import annotations

import itertools

import pytest

from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.types import WorkerState

PLAIN = [  # (per_request, proposers, gamma): nothing but off to offer
    (True, ()), (True, ("none",)), (False, ()), (False, ("ngram",)),  # the last: fixed at gamma 0
]
LOADS = (0.0, 0.4, 1.0, 2.0, 3.0, 17.0, 130.0)
PREFILL = ((0.0, 0.0), (3.5, 900.0), (40.0, 12_000.0))
PROFILES = (None, "h100-llama3-8b", "h200-llama3-70b", "cpu-tiny")


def _policy(**kw):
    return build_policy(parse_config({"policy": {"kind": "goodput", **kw}}).policy)


@pytest.mark.parametrize("kw", [{}, {"explore": 0.5}, {"margin": 1.3}])
def test_plain_decision_is_the_priced_one(kw):
    policy, alphas = _policy(**kw), AlphaTable()
    cases = itertools.product(PLAIN, LOADS, PREFILL, PROFILES, ("code", "chat", "unclassified"))
    for (per_request, proposers), load, (ratio, tokens), profile, cls in cases:
        w = WorkerState("w0", engine="adaptspec" if per_request else "vllm", per_request=per_request,
                        proposers=proposers, running=load, waiting=load / 4, inflight=int(load),
                        prefill_ratio=ratio, prompt_tokens=tokens, profile=profile)
        priced = policy._priced(cls, [w], alphas)
        assert policy.decide(cls, [w], alphas) == priced, (w, cls)
        assert priced.proposer == "none" and priced.gamma == 0 and priced.expected_speedup == 1.0


def test_shortcut_only_for_one_plain_worker():
    policy, alphas = _policy(), AlphaTable()
    spec = WorkerState("s0", proposers=("ngram",), profile="h100-llama3-8b")
    fixed = WorkerState("f0", engine="vllm", per_request=False, proposers=("ngram",), gamma=3, profile="h100-llama3-8b")
    plain = WorkerState("p0", proposers=(), profile="h100-llama3-8b")
    busy = WorkerState("p1", proposers=(), running=9.0, profile="h100-llama3-8b")
    for workers in ([spec], [fixed], [plain, busy], [plain, spec]):
        assert policy.decide("code", workers, alphas) == policy._priced("code", workers, alphas)
    assert policy.decide("code", [spec], alphas).proposer == "ngram"  # a speculating worker is priced
    assert policy.decide("code", [fixed], alphas).gamma == 3
    assert policy.decide("code", [plain, busy], alphas).worker == "p0"  # two plain workers: the less loaded
    down = WorkerState("s1", proposers=("ngram",), healthy=False)
    assert policy.decide("code", [plain, down], alphas).reason == "goodput: off batch=1"  # one healthy: shortcut
