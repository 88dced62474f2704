"""One learning loop (control/learn.py): what a simulated run learns is what the proxy's feedback learns from the
same finished requests.

The simulator hands every finished request's `Outcome` to `on_outcome` before it learns it; each is written back
as the reference worker's response (`usage.speculative`, its shadow and `steps_by_gamma`), parsed by the proxy's
own parsers and fed to a real `Feedback` over a real `MemoryState`; the alpha tables and predictors must end up
equal, bit for bit. No mocks: the objects are the proxy's and the simulator's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from adaptspec.bench.simulator import ProfileCost, SimConfig, parse_policy, simulate
from adaptspec.bench.trace_predict import TracePredictor
from adaptspec.bench.traces import TraceWorkload, load_traces
from adaptspec.control.alpha import AlphaTable
from adaptspec.control.config import parse_config
from adaptspec.control.learn import Outcome, Part, Speculation, learn, source_parts
from adaptspec.control.policy import build_policy
from adaptspec.control.predict import AcceptancePredictor
from adaptspec.control.profiles import load_profile
from adaptspec.control.shadow import ShadowStats
from adaptspec.control.traffic import TrafficShape
from adaptspec.proxy.feedback import (
    Feedback,
    idle_steps,
    lookup_drafts,
    position_stats,
    prompt_tokens,
    shadow_stats,
    source_stats,
    spec_stats,
)
from adaptspec.proxy.metrics import ProxyMetrics
from adaptspec.proxy.state import MemoryState
from adaptspec.proxy.upstream import Pools, Worker

TRACE = Path(__file__).parents[2] / "benchmarks" / "traces" / "reference-within-class.jsonl"


class _Proxy:
    """The real parts Feedback is built from; the table's clock reads the simulated time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.metrics = ProxyMetrics()
        self.state = MemoryState(AlphaTable(clock=lambda: self.now))
        self.predictor = AcceptancePredictor()


def _response(o: Outcome) -> dict:
    """The reference worker's response body for a finished request (worker/server.py `usage.speculative`)."""
    spec = o.speculation
    usage: dict = {"completion_tokens": int(o.output_tokens), "prompt_tokens": int(o.prompt_tokens)}
    if spec is not None:
        usage["speculative"] = {
            "draft_tokens": int(spec.draft_tokens), "accepted_tokens": int(spec.accepted_tokens),
            "steps": int(spec.steps), "tried_per_position": [int(x) for x in spec.tried],
            "accepted_per_position": [int(x) for x in spec.accepted],
            "steps_by_gamma": {"0": int(spec.idle_steps)},
            **({"shadow": {p: sh.to_dict() for p, sh in o.shadows}} if o.shadows else {})}
        if spec.parts:  # a per-step hybrid's steps by source (worker/requests.py SourceTally): the lookup's in
            # the walk's form, the model's with its drafting steps (position 0 is tried by each)
            usage["speculative"]["by_source"] = {
                "ngram" if part.proposer == o.proposer else part.proposer: {
                    "steps": int(part.steps if part.proposer == o.proposer else part.tried[0]),
                    "drafts": int(part.drafts if part.proposer == o.proposer else part.tried[0]),
                    "draft_tokens": int(part.draft_tokens), "accepted_tokens": int(sum(part.accepted)),
                    "tried_per_position": [int(x) for x in part.tried],
                    "accepted_per_position": [int(x) for x in part.accepted]} for part in spec.parts}
    return {"usage": usage}


def _replay(outcomes: list[Outcome], proposers: tuple[str, ...]) -> _Proxy:
    proxy = _Proxy()
    feedback = Feedback(proxy.metrics, proxy.state, Pools(), proxy.predictor)
    worker = Worker("sim0", "http://h:1", "p", engine="adaptspec", proposers=proposers)
    for o in outcomes:
        proxy.now = o.now
        body = _response(o)
        feedback.on_response(worker, o.content_class, o.proposer, o.gamma, float(body["usage"]["completion_tokens"]),
                             spec_stats(body), position_stats(body), prompt_tokens(body["usage"]), o.regime,
                             o.features, lookup_drafts(body), shadow_stats(body), idle=idle_steps(body),
                             sources=source_stats(body))
    return proxy


# TensorRT-LLM's draft-length schedule (control/peers) with the tiny pair's draft model: a batch above 32
# caps gamma to 0, which a ramp of 28 <-> 40 clients crosses while requests run (their idle steps)
SCHEDULE = {"kind": "draft_len_schedule", "proposer": "draft", "max_draft_len": 4,
            "draft_len_schedule": {4: 4, 8: 2, 32: 1}}


def _simulate(policy, config: SimConfig, predict: bool,
              proposers: tuple[str, ...] = ("ngram", "draft")) -> tuple[AlphaTable, TracePredictor | None, list]:
    cost = ProfileCost(load_profile("cpu-tiny"))
    cost.hybrid_head = "draft"  # the traces have lookup and draft-model runs (the worker's head when it has no EAGLE)
    worker = replace(cost.worker(), proposers=proposers)
    workload = TraceWorkload(load_traces(TRACE), seed=0)
    table, predictor, outcomes = AlphaTable(), TracePredictor() if predict else None, []
    simulate(build_policy(policy), cost, workload, config, alphas=table, worker=worker, predictor=predictor,
             on_outcome=outcomes.append)
    return table, predictor, outcomes


@pytest.mark.parametrize(("policy", "config", "predict"), [
    (parse_policy("adaptive", "cpu-tiny").policy, SimConfig(concurrency=1, requests=48, warmup=16), True),
    (parse_policy("static:draft:4", "cpu-tiny").policy, SimConfig(concurrency=4, requests=48, warmup=16), False),
    (parse_config({"policy": SCHEDULE}).policy, SimConfig(concurrency=None, ramp=((1.0, 28), (1.0, 40)),
                                                          requests=48, warmup=16), False),
], ids=["adaptive-predict", "static-draft", "schedule-ramp"])
def test_the_proxy_learns_what_the_simulator_learned(policy, config, predict):
    table, predictor, outcomes = _simulate(policy, config, predict)
    assert len(outcomes) >= 64
    assert any(o.shadows for o in outcomes)  # n-gram shadows of requests served without lookup
    if config.ramp:  # steps a schedule capped to gamma 0 (left out of the propose rate)
        assert any(o.speculation.idle_steps > 0 and o.speculation.draft_tokens > 0 for o in outcomes)
    proxy = _replay(outcomes, ("ngram", "draft"))
    assert table.to_dict() and proxy.state.alphas.to_dict() == table.to_dict()
    if predict:
        assert any(o.features is not None for o in outcomes)
        assert proxy.predictor.to_dict() == predictor.predictor.to_dict()


@pytest.mark.parametrize("policy", ["static:hybrid:4", "adaptive"])
def test_the_proxy_learns_a_per_step_hybrid_by_source_as_the_simulator_does(policy):
    """A per-step hybrid (its head the draft model here) reports its steps by source (`usage.speculative.by_source`
    on the reference worker, `Speculation.parts` in replay), and every other request its rule's lookup steps along
    the output (`usage.speculative.shadow.hybrid`): the proxy's parse teaches the same keys."""
    proposers = ("ngram", "draft", "hybrid")
    table, _, outcomes = _simulate(parse_policy(policy, "cpu-tiny").policy,
                                   SimConfig(concurrency=2, requests=48, warmup=8), False, proposers)
    split = sum(1 for o in outcomes if o.speculation is not None and o.speculation.parts)
    shadowed = sum(1 for o in outcomes if any(p == "hybrid" for p, _ in o.shadows))
    assert split + shadowed >= 50 and (split >= 40 if policy.startswith("static") else shadowed >= 10)
    proxy = _replay(outcomes, proposers)
    learned = table.keys()
    assert {key[1] for key in learned} >= {"hybrid", "draft"}
    assert proxy.state.alphas.to_dict() == table.to_dict()


def _outcome(**kw) -> Outcome:
    spec = Speculation(24.0, 6.0, 10.0, (8.0, 5.0, 1.0), (5.0, 1.0, 0.0), idle_steps=2.0)
    return Outcome(**{"worker": "w", "proposer": "draft", "content_class": "code", "gamma": 3, "output_tokens": 20.0,
                      "prompt_tokens": 100.0, "speculation": spec, "worker_proposers": ("ngram", "draft"), **kw})


def test_learn_reads_and_changes_nothing():
    table = AlphaTable()
    updates = learn(_outcome(), table)
    assert table.keys() == []
    (obs,) = updates.observations
    # exact counts; steps that could draft (10 - 2 capped to 0) and those that did (position 0: 8)
    assert (obs.successes, obs.failures, obs.steps, obs.drafts) == (6.0, 8.0, 8.0, 8.0)
    assert updates.traffic == (100.0, 20.0) and updates.lessons == ()
    updates.apply(table.add, None, TrafficShape())
    assert table.get("w", "draft", "code").n > 0


def test_shadow_counts_only_for_a_proposer_the_worker_offers_and_the_request_did_not_run():
    sh = ShadowStats(6, 5, 20, 9, (5, 3, 1), (3, 1, 0))
    counted = learn(_outcome(shadows=(("ngram", sh),)), AlphaTable())
    assert [o.proposer for o in counted.observations] == ["draft", "ngram"] and counted.shadows
    assert counted.observations[1].steps == 6.0 and counted.observations[1].drafts == 5.0
    for kw in ({"worker_proposers": ("draft",)}, {"proposer": "ngram"}):
        assert [o.proposer for o in learn(_outcome(shadows=(("ngram", sh),), **kw), AlphaTable()).observations] \
            == [kw.get("proposer", "draft")]


def test_a_split_report_teaches_each_source_and_a_hindsight_plan_none():
    lookup = Part("hybrid", 6.0, (3.0, 2.0), (2.0, 1.0), steps=7.0, drafts=3.0)
    head = Part("eagle", 12.0, (4.0, 3.0, 1.0), (3.0, 1.0, 0.0))
    spec = Speculation(18.0, 7.0, 9.0, (7.0, 5.0, 1.0), (5.0, 2.0, 0.0), parts=(lookup, head))
    obs = learn(_outcome(proposer="hybrid", speculation=spec), AlphaTable()).observations
    assert [(o.proposer, o.successes, o.failures, o.steps, o.drafts) for o in obs] == [
        ("hybrid", 3.0, 2.0, 7.0, 3.0), ("eagle", 4.0, 4.0, 0.0, 0.0)]
    assert learn(_outcome(proposer="hybrid", speculation=replace(spec, parts=())), AlphaTable()).observations == ()


def test_without_positions_the_totals_are_fitted():
    spec = Speculation(24.0, 14.0, 8.0)
    (obs,) = learn(_outcome(speculation=spec), AlphaTable()).observations
    assert obs.pos_trials == () and obs.successes == 14.0 and 0.0 < obs.failures < 8.0
    assert learn(_outcome(proposer="none", speculation=spec), AlphaTable()).observations == ()


def test_a_malformed_split_report_teaches_nothing_of_it():
    good = {"steps": 5, "drafts": 2, "draft_tokens": 6, "accepted_tokens": 3, "tried_per_position": [2, 2, 1],
            "accepted_per_position": [2, 1, 0]}
    body = lambda by_source: {"usage": {"speculative": {"by_source": by_source}}}  # noqa: E731
    assert source_stats(body({"ngram": good}))["ngram"].drafts == 2
    for bad in ({"ngram": {**good, "drafts": 9}},  # more drafts than steps
                {"ngram": {**good, "tried_per_position": [2, 3, 1]}},  # position 1 tried more than 0 accepted
                {"ngram": good, "eagle": "x"}, {}, [good], {f"p{i}": good for i in range(5)}):
        assert source_stats(body(bad)) is None
    # without the lookup's part there is no split: the whole report teaches the hybrid's key
    assert source_parts("hybrid", {"eagle": source_stats(body({"eagle": good}))["eagle"]}) is None
