"""The per-step hybrid's rule book behind the proxy: the worker's walks of every rule (`usage.speculative.
hybrid_rules`) feed the policy's `RuleBook` through `Feedback`, the policy names a rule for a class whose walks price
another than the worker's own best, and the adaptspec engine sends it (`speculation.hybrid_rule`)."""

from __future__ import annotations

import pytest

from adaptspec.control import costmodel
from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.hybrid_rule import DEFAULT_RULE, RULES, RuleBook
from adaptspec.control.policy import build_policy
from adaptspec.control.types import WorkerState
from adaptspec.proxy.engines import AdaptspecEngine, VllmEngine
from adaptspec.proxy.feedback import Feedback, rule_stats
from adaptspec.proxy.metrics import ProxyMetrics
from adaptspec.proxy.state import MemoryState
from adaptspec.proxy.upstream import Pools, Worker
from tests.control.test_hybrid_rules import K, _requests


def _payload(walks: dict) -> dict:
    return {"usage": {"completion_tokens": 10, "speculative": {
        "draft_tokens": 0, "accepted_tokens": 0, "steps": 10, "drafts": 0, "tried_per_position": [],
        "accepted_per_position": [], "hybrid_rules": {n: s.to_dict() for n, s in walks.items()}}}}


def test_rule_stats_takes_the_workers_walks_and_refuses_what_is_not_one():
    book_walks = {n: s for n, s in _walks(_requests("abrupt", n=1)[0]).items()}
    got = rule_stats(_payload(book_walks))
    assert got == book_walks
    bad = _payload(book_walks)
    bad["usage"]["speculative"]["hybrid_rules"]["m9x9"] = bad["usage"]["speculative"]["hybrid_rules"]["m2x2"]
    assert rule_stats(bad) is None  # a rule this proxy does not know
    bad = _payload(book_walks)
    bad["usage"]["speculative"]["hybrid_rules"]["m1x4"]["drafts"] = 10**6  # drafts above steps
    assert rule_stats(bad) is None
    assert rule_stats({"usage": {"speculative": {}}}) is None and rule_stats({}) is None


def _walks(req):
    return RuleBook().walks(req.accept_runs["ngram"], req.output_tokens, K)


def test_the_adaptspec_engine_sends_the_rule_only_with_the_hybrid():
    eng = AdaptspecEngine()
    set_, drop = eng.rewrite({}, True, "hybrid", 4, "code", None, "m1x4")
    assert set_["speculation"]["hybrid_rule"] == "m1x4" and drop == ()
    assert "hybrid_rule" not in eng.rewrite({}, True, "eagle", 4, "code", None, "m1x4")[0]["speculation"]
    assert "hybrid_rule" not in eng.rewrite({}, True, "hybrid", 4, "code")[0]["speculation"]
    assert "adaptspec_hybrid_rule" not in VllmEngine().rewrite({}, True, "ngram", 4, "code", None, "m1x4")[0][
        "vllm_xargs"]


@pytest.mark.parametrize("kind", ["abrupt", "spurious"])
def test_feedback_teaches_the_policys_rule_book_and_the_policy_prices_a_class_with_it(kind):
    """Real objects, no servers: `Feedback.on_response` with a worker's walks -> the goodput policy's book ->
    `hybrid_rule` for the class: the rule the walks themselves rank first at the policy's prices, once the class
    has the evidence (test_hybrid_rules.py checks that ranking in closed form)."""
    policy = build_policy(parse_config({"policy": {"kind": "goodput", "default_profile": "cpu-tiny"}}).policy)
    worker = Worker("w0", "http://127.0.0.1:9", "p", engine="adaptspec", per_request=True,
                    proposers=("ngram", "eagle", "hybrid"), gamma=4)
    metrics, state = ProxyMetrics(), MemoryState(AlphaTable())
    feedback = Feedback(metrics, state, Pools([worker]), policy=lambda: policy)
    ws = WorkerState(name="w0", proposers=("ngram", "eagle", "hybrid"), max_gamma=8)
    assert policy.hybrid_rule(ws, "code", 4, state.alphas) == DEFAULT_RULE  # no walks yet
    for req in _requests(kind, n=30):
        walks = rule_stats(_payload(_walks(req)))
        feedback.on_response(worker, "code", "eagle", 4, float(req.output_tokens), (0.0, 0.0, 10.0), rules=walks)
    assert policy.rules.evidence("w0", "code") == pytest.approx(sum(policy.rules.keep ** i for i in range(30)))
    assert policy.rules.evidence("w0", "chat") == 0.0
    prof = policy.worker_profile(ws)
    head = policy.head_alpha(ws, prof, "hybrid", "code", state.alphas)
    priced = {}
    for name in RULES:
        t = policy.rules._tallies[("w0", "code")][name]
        priced[name] = costmodel.evaluate(prof, "hybrid", t.rates(), 4, 1.0, propose_rate=t.density,
                                          fallback_alpha=head).goodput
    top = max(priced, key=priced.get)
    want = top if priced[top] >= 1.01 * priced[DEFAULT_RULE] else DEFAULT_RULE
    assert policy.hybrid_rule(ws, "code", 4, state.alphas) == want
    assert want != DEFAULT_RULE or kind == "spurious"  # copied stretches: the eager rule prices better here
