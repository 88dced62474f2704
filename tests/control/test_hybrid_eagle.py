"""EAGLE and hybrid in the controller: the hybrid's price from its two parts (closed forms), profile validation,
re-pricing by a calibration, its estimator priors and propose rate, config, the worker's reported proposers,
and the goodput policy choosing EAGLE or hybrid exactly where the cost model says they win."""

from __future__ import annotations

import math

import pytest
import yaml

from adaptspec.control import costmodel
from adaptspec.control.alpha import _PROPOSE_PRIOR_STEPS, AlphaTable, prior_alpha
from adaptspec.control.calibration import CalibratedCosts
from adaptspec.control.config import parse_config, pool_proposers
from adaptspec.control.policy import build_policy, estimate
from adaptspec.control.profiles import PROFILE_DIR, parse_profile
from adaptspec.control.types import PROPOSERS, AlphaEstimate, WorkerState
from adaptspec.errors import ConfigError


def _lookup_first_tiny(model_cost: float) -> dict:
    """cpu-tiny with its hybrid priced lookup first (not `stepwise`: the worker's `--hybrid-min-match 0`), the
    model part priced at `model_cost` (0: it drafts gamma at every miss, `--hybrid-model-cost 0`)."""
    data = yaml.safe_load((PROFILE_DIR / "cpu-tiny.yaml").read_text())
    data["proposers"]["hybrid"].pop("stepwise")
    data["proposers"]["hybrid"].pop("model_cost")
    if model_cost:
        data["proposers"]["hybrid"]["model_cost"] = model_cost
    return data


TINY = parse_profile(_lookup_first_tiny(0.35), "cpu-tiny.yaml (lookup first)")
TINY_K = parse_profile(_lookup_first_tiny(0.0), "cpu-tiny.yaml (lookup first, model_cost 0)")
ALL = ("ngram", "draft", "eagle", "hybrid")


# -- the price -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [1, 4])
@pytest.mark.parametrize("pi", [0.0, 0.3, 0.9, 1.0])
def test_hybrid_at_batch_1_is_lookup_plus_the_model_for_the_misses(gamma, pi):
    lookup, head, kv = TINY.draft("ngram"), TINY.draft("eagle"), 256.0
    got = TINY.draft("hybrid").time(gamma, 1, kv, TINY.target, lookup_rate=pi)
    want = lookup.time(gamma, 1, kv, TINY.target) + (1.0 - pi) * head.time(gamma, 1, kv, TINY.target)
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("batch,pi", [(8, 0.5), (32, 0.9), (3, 0.0)])
def test_hybrid_at_batch_b_pays_the_model_overhead_when_any_request_misses_and_its_slope_per_miss(batch, pi):
    """The head is priced as gamma passes of o + c * rows (kv 0): in expectation
    gamma * ((1 - pi^B) * o + c * (1 - pi) * B)."""
    m = TINY.draft("eagle").model
    kv = batch * 256.0
    got = TINY.draft("hybrid").time(4, batch, kv, TINY.target, lookup_rate=pi)
    want = TINY.draft("ngram").time(4, batch, kv, TINY.target) + 4 * (
        (1.0 - pi**batch) * m.overhead_s + m.compute_s_per_token * (1.0 - pi) * batch)
    assert m.kv_s_per_token == 0.0 and got == pytest.approx(want, rel=1e-12)


def test_a_hybrid_always_drafts_its_propose_rate_only_prices_it():
    alpha, gamma, pi = 0.6, 3, 0.4
    plan = costmodel.evaluate(TINY_K, "hybrid", alpha, gamma, 1, propose_rate=pi)
    assert plan.expected_tokens == pytest.approx(costmodel.expected_tokens(alpha, gamma))
    assert plan.verify_time_s == pytest.approx(TINY_K.target.time(1 + gamma, TINY_K.context_tokens))
    assert plan.draft_time_s == pytest.approx(TINY_K.draft("hybrid").time(gamma, 1, TINY_K.context_tokens,
                                                                         TINY_K.target, lookup_rate=pi))
    assert TINY.draft("hybrid").model_cost == 0.35 and TINY_K.draft("hybrid").model_cost == 0.0
    # n-gram with the same rate drafts on 40% of the steps only
    ng = costmodel.evaluate(TINY_K, "ngram", alpha, gamma, 1, propose_rate=pi)
    assert ng.expected_tokens == pytest.approx(1 + pi * (costmodel.expected_tokens(alpha, gamma) - 1))


def test_eagle_head_pass_is_the_measured_share_of_a_batch_1_step():
    # benchmarks/fit_proposer_costs.py: a head pass is 0.227 of the worker's batch-1 `none` step, 7.96 ms measured
    # (benchmarks/results/cpu-tiny-profile/calibration-cpu-tiny-{proposers,worker}.json; cpu-tiny's header)
    assert TINY.draft("eagle").time(1, 1, TINY.context_tokens, TINY.target) == pytest.approx(0.227 * 0.00796, rel=0.03)


# -- profiles -----------------------------------------------------------------------------------------------
BASE = {"name": "p", "target": {"overhead_s": 0.01, "memory_floor_s": 0.0, "compute_s_per_token": 1e-4},
        "proposers": {"ngram": {"kind": "ngram", "step_s": 1e-4},
                      "head": {"kind": "eagle", "fraction": 0.1}}}


@pytest.mark.parametrize("hybrid,msg", [
    ({"kind": "hybrid", "lookup": "head", "fallback": "head"}, "lookup 'head' is not a ngram option"),
    ({"kind": "hybrid", "lookup": "ngram", "fallback": "ngram"}, "fallback 'ngram' is not a draft or eagle"),
    ({"kind": "hybrid", "lookup": "ngram"}, "needs lookup"),
    ({"kind": "hybrid", "lookup": "ngram", "fallback": "head", "step_s": 1.0}, "takes only lookup and fallback"),
    ({"kind": "ngram", "lookup": "ngram"}, "lookup / fallback are for kind 'hybrid'"),
])
def test_bad_hybrid_options_are_config_errors(hybrid, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_profile({**BASE, "proposers": {**BASE["proposers"], "hybrid": hybrid}}, "p.yaml")


def test_hybrid_parts_may_be_aliases_and_a_calibration_reprices_them():
    prof = parse_profile({**BASE, "proposers": {**BASE["proposers"],
                                                "hybrid": {"kind": "hybrid", "lookup": "ngram", "fallback": "eagle"}},
                          "aliases": {"eagle": "head"}}, "p.yaml")
    assert prof.draft("hybrid").fallback == prof.draft("eagle")
    fit = {"overhead_s": 0.02, "compute_s_per_token": 1e-4, "kv_s_per_token": 0.0, "draft_call_s": 0.0, "draft_pass_s": 0.0,
           "draft_token_s": 0.0, "eagle_call_s": 0.0, "eagle_pass_s": 0.003, "eagle_token_s": 1e-5}
    costs = CalibratedCosts(fit, dict.fromkeys(fit, math.nan), {k: k.startswith("eagle") for k in fit}, 1000.0,
                            True, key="k", snapped=fit)
    priced = costs.apply(prof)
    assert priced.draft("eagle") != prof.draft("eagle")
    assert priced.draft("hybrid").fallback == priced.draft("eagle")  # the hybrid follows its re-priced part
    assert priced.draft("hybrid").time(2, 1, 0.0, priced.target, lookup_rate=0.5) == pytest.approx(
        priced.draft("ngram").time(2, 1, 0.0, priced.target) + 0.5 * 2 * (0.003 + 1e-5))


# -- estimator ----------------------------------------------------------------------------------------------
def test_hybrid_priors_and_its_lookup_share_as_propose_rate():
    assert "hybrid" in PROPOSERS
    for cls in ("code", "chat", "summarize"):
        assert prior_alpha("hybrid", cls) >= prior_alpha("eagle", cls)
    table = AlphaTable()
    assert table.get("w", "hybrid", "code").propose_rate == 0.0  # no data: the model drafts every step
    assert table.get("w", "ngram", "code").propose_rate == 1.0  # no data: lookup drafts every step
    table.observe_counts("w", "hybrid", "code", 30.0, 10.0, steps=20.0, drafts=12.0)
    table.observe_counts("w", "ngram", "code", 30.0, 10.0, steps=20.0, drafts=12.0)
    k = _PROPOSE_PRIOR_STEPS
    assert table.get("w", "hybrid", "code").propose_rate == pytest.approx(12.0 / (20.0 + k))
    assert table.get("w", "ngram", "code").propose_rate == pytest.approx((12.0 + k) / (20.0 + k))


# -- config and pools ---------------------------------------------------------------------------------------
def test_config_accepts_hybrid_everywhere_a_proposer_goes():
    cfg = parse_config({"policy": {"kind": "static", "proposer": "hybrid", "gamma": 3},
                        "estimator": {"prior": {"alpha": {"hybrid": {"code": 0.9}}}},
                        "pools": [{"name": "p", "profile": "cpu-tiny", "proposers": list(ALL),
                                   "workers": [{"name": "w", "url": "http://127.0.0.1:9"}]}]})
    assert cfg.policy.proposer == "hybrid" and cfg.pools[0].proposers == list(ALL)
    t = parse_config({"policy": {"kind": "threshold", "proposer": "eagle", "proposer_by_class": {"code": "hybrid"},
                                 "table": [{"max_load": 4, "gamma": 3}]}}).policy
    assert t.proposer_by_class == {"code": "hybrid"}


def test_pools_offer_what_the_worker_reports_and_the_profile_prices():
    assert pool_proposers({"status": "ok", "proposers": ["ngram", "draft", "eagle", "hybrid"]}, "cpu-tiny") == list(ALL)
    assert pool_proposers({"status": "ok", "proposers": ["hybrid", "ngram"]}, "cpu-tiny") == ["ngram", "hybrid"]
    assert pool_proposers({"status": "ok"}, "cpu-tiny") == ["ngram", "draft"]  # an older worker
    assert pool_proposers(None, "cpu-tiny") == ["ngram", "draft"]
    # a profile without a hybrid cost: not offered (the config would refuse it)
    assert pool_proposers({"proposers": list(ALL)}, "h100-llama3-8b") == ["ngram", "draft", "eagle"]


# -- policy -------------------------------------------------------------------------------------------------
class Fixed:
    def __init__(self, **by):
        self.by = by

    def get(self, worker, proposer, content_class):
        return self.by[proposer]


def est(alpha: float, rate: float = 1.0) -> AlphaEstimate:
    return AlphaEstimate(alpha, 0.0, 1e6, propose_rate=rate)


def goodput(profile: str = "cpu-tiny"):
    return build_policy(parse_config({"policy": {"kind": "goodput", "margin": 1.05, "default_profile": profile,
                                                 "explore": 0.0}}).policy)


@pytest.fixture
def lookup_first(tmp_path) -> str:
    """The path of `TINY` as a profile file (policies load profiles by name or path)."""
    path = tmp_path / "cpu-tiny-lookup-first.yaml"
    path.write_text(yaml.safe_dump(_lookup_first_tiny(0.35)))
    return str(path)


def want_plan(alphas: Fixed, batch: float) -> costmodel.Plan:
    return costmodel.best_plan({p: alphas.by[p].mean for p in ALL}, TINY, batch, 8, margin=1.05,
                               propose_rates={p: alphas.by[p].propose_rate for p in ALL})


@pytest.mark.parametrize("alphas,chosen", [
    # open text: lookup rarely matches, and where it does its drafts are poor (the hybrid accepts less than
    # the head alone): EAGLE
    (Fixed(ngram=est(0.3, 0.2), draft=est(0.5), eagle=est(0.7), hybrid=est(0.6, 0.2)), "eagle"),
    # copy-heavy text: lookup serves most steps for free, the head covers the rest: hybrid
    (Fixed(ngram=est(0.7, 0.6), draft=est(0.5), eagle=est(0.6), hybrid=est(0.75, 0.7)), "hybrid"),
])
def test_goodput_chooses_eagle_or_hybrid_where_the_cost_model_does(alphas, chosen, lookup_first):
    want = want_plan(alphas, 1.0)
    assert want.proposer == chosen  # the closed-form optimum over the four proposers at batch 1
    d = goodput(lookup_first).decide("code", [WorkerState("w", proposers=ALL, profile=lookup_first)], alphas)
    assert (d.proposer, d.gamma) == (want.proposer, want.gamma)
    assert d.expected_speedup == pytest.approx(want.speedup, rel=1e-2)


@pytest.mark.parametrize("rate", [0.0, 0.5, 0.95])
def test_a_busy_worker_gives_a_hybrid_one_gamma_priced_at_its_lookup_rate(rate, lookup_first):
    """At load, a hybrid's model passes are shared by the batch (batch_gamma): with one class in the mix the
    gamma is the best one for that class at the worker's batch and the hybrid's lookup rate."""
    alphas = Fixed(hybrid=est(0.8, rate))
    w = WorkerState("w", proposers=("hybrid",), profile=lookup_first, running=3.0)
    d = goodput(lookup_first).decide("code", [w], alphas)
    best = costmodel.best_gamma(TINY, "hybrid", 0.8, 4.0, 8, propose_rate=rate)
    assert best.speedup >= 1.05 and (d.proposer, d.gamma) == ("hybrid", best.gamma)
    assert d.expected_speedup == pytest.approx(best.speedup, rel=1e-2)


def test_a_hybrid_without_evidence_borrows_the_lookup_rate_of_the_ngram_key():
    table = AlphaTable()
    assert estimate(table, "w", "hybrid", "code").propose_rate == 0.0  # nothing known: the cautious prior
    table.observe_counts("w", "ngram", "code", 30.0, 10.0, steps=20.0, drafts=16.0)
    lookup = (16.0 + _PROPOSE_PRIOR_STEPS) / (20.0 + _PROPOSE_PRIOR_STEPS)
    e = estimate(table, "w", "hybrid", "code")
    assert e.propose_rate == pytest.approx(lookup) and e.mean == table.get("w", "hybrid", "code").mean
    assert estimate(table, "w", "hybrid", "chat").propose_rate == 0.0  # another class: no lookup evidence
    table.observe_counts("w", "hybrid", "code", 10.0, 5.0, steps=10.0, drafts=2.0)  # its own evidence wins
    assert estimate(table, "w", "hybrid", "code").propose_rate == pytest.approx(2.0 / (10.0 + _PROPOSE_PRIOR_STEPS))


def test_a_calibrated_profile_file_keeps_the_hybrid_priced_from_its_refitted_parts():
    import yaml

    from adaptspec.cli._calibrate import profile_yaml

    fit = {"overhead_s": 0.02, "compute_s_per_token": 1e-4, "kv_s_per_token": 0.0, "draft_call_s": 0.0, "draft_pass_s": 0.004,
           "draft_token_s": 2e-5, "eagle_call_s": 0.0, "eagle_pass_s": 0.002, "eagle_token_s": 1e-5}
    costs = CalibratedCosts(fit, dict.fromkeys(fit, math.nan), dict.fromkeys(fit, True), 1000.0, True, key="k",
                            snapped=fit)
    prof = parse_profile(yaml.safe_load(profile_yaml(costs, TINY, "fitted", "http://w", 10.0)), "fitted.yaml")
    assert prof.draft("hybrid").parts == ("ngram", "eagle-tiny")
    assert prof.draft("hybrid").fallback.time(1, 1, 0.0, prof.target) == pytest.approx(0.002 + 1e-5)


def test_the_simulator_offers_no_hybrid_it_has_no_acceptance_model_for():
    from adaptspec.bench.simulator import ProfileCost

    assert ProfileCost(TINY).worker().proposers == ("ngram", "draft", "eagle")


class ByClass:
    def __init__(self, by):
        self.by = by

    def get(self, worker, proposer, content_class):
        return self.by[(proposer, content_class)]


def test_eagle_and_a_hybrid_on_the_same_head_share_one_gamma_at_load():
    """The head's passes are the batch's whatever the proposer name: with code on the hybrid (lookup hits 90%)
    and chat on EAGLE in the mix, both run the one gamma that maximises the mix's goodput with each class at
    the better of the two (not EAGLE at 1 and the hybrid at 3, whose passes every EAGLE request would wait for)."""
    alphas = ByClass({("eagle", "code"): est(0.7), ("hybrid", "code"): est(0.9, 0.9),
                      ("eagle", "chat"): est(0.75), ("hybrid", "chat"): est(0.6, 0.2)})
    w = WorkerState("w", proposers=("eagle", "hybrid"), profile="cpu-tiny", running=15.0)
    policy = goodput()
    decisions = [policy.decide(c, [w], alphas) for c in ("code", "chat") * 40][-2:]
    assert [(d.content_class, d.proposer) for d in decisions] == [("code", "hybrid"), ("chat", "eagle")]

    def mix_goodput(g):
        return sum(max(costmodel.evaluate(TINY, p, alphas.by[(p, c)].mean, g, 16.0,
                                          propose_rate=alphas.by[(p, c)].propose_rate).goodput
                       for p in ("eagle", "hybrid")) for c in ("code", "chat"))

    best = max(range(1, 9), key=mix_goodput)
    each = {c: costmodel.best_gamma(TINY, p, alphas.by[(p, c)].mean, 16.0, 8,
                                    propose_rate=alphas.by[(p, c)].propose_rate).gamma
            for p, c in (("hybrid", "code"), ("eagle", "chat"))}
    assert each["code"] != each["chat"]  # planned apart they would differ
    assert decisions[0].gamma == decisions[1].gamma == best


def test_a_draft_model_is_planned_apart_from_a_head():
    """Different models run different passes: the pass groups follow the model, not the kind of proposer."""
    from adaptspec.control.policies.batchplan import _pass_group

    w = WorkerState("w", proposers=("ngram", "draft", "eagle", "hybrid"), profile="cpu-tiny", running=15.0)
    assert _pass_group(w, TINY, "eagle") == ("eagle", "hybrid") == _pass_group(w, TINY, "hybrid")
    assert _pass_group(w, TINY, "draft") == ("draft",) and _pass_group(w, TINY, "ngram") == ("ngram",)


@pytest.mark.parametrize("alpha,drafts", [(0.4, False), (0.5, True), (0.6, True)])
def test_at_load_off_is_priced_waiting_for_the_passes_the_batch_keeps(alpha, drafts):
    """Chat keeps the head busy at batch 16; a translate request whose own EAGLE plan is slower than a plain
    step (x0.89-1.01) still drafts where it beats off by the margin in the same steps, which run the head's
    passes for the chat requests anyway (closed form: off = 1 / (plain step + the passes of the chat share))."""
    alphas = ByClass({("eagle", "chat"): est(0.8), ("eagle", "translate"): est(alpha)})
    policy = goodput()
    busy = WorkerState("w", proposers=("eagle",), profile="cpu-tiny", running=15.0)
    for _ in range(60):
        chat = policy.decide("chat", [busy], alphas)
    g = chat.gamma
    d = policy.decide("translate", [busy], alphas)
    rows = 60 / 61 * 16  # the chat share of the mix drafts with the head
    passes = TINY.draft("eagle").time(g, rows, rows * TINY.context_tokens, TINY.target)
    off = costmodel.evaluate(TINY, "none", 0.0, 0, 16.0)
    mine = costmodel.evaluate(TINY, "eagle", alpha, g, 16.0)
    assert mine.speedup < 1.05 and chat.proposer == "eagle"
    assert (mine.goodput >= 1.05 / (off.verify_time_s + passes)) == drafts
    assert (d.proposer, d.gamma) == (("eagle", g) if drafts else ("none", 0))
    if not drafts:
        assert "its step runs the batch's model passes" in d.reason
    alone = goodput()  # a batch of translate requests only: no passes run unless they pay for themselves
    assert [alone.decide("translate", [busy], alphas).proposer for _ in range(60)][-1] == "none"
