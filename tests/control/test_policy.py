import math
import re
from pathlib import Path

import pytest
import yaml

from adaptspec.control import costmodel
from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.profiles import load_profile
from adaptspec.control.types import AlphaEstimate, WorkerState
from adaptspec.errors import UpstreamError

PROFILES = Path(__file__).resolve().parents[2] / "adaptspec" / "control" / "profiles"


def policy(**kw):
    return build_policy(parse_config({"policy": kw}).policy)


def per_request(name, load=0.0, proposers=("ngram", "draft"), profile="h200-llama3-70b", **kw):
    return WorkerState(name, proposers=proposers, running=load, profile=profile, **kw)


def fixed(name, proposer, gamma, load=0.0, profile="h100-llama3-8b"):
    return WorkerState(name, engine="vllm", per_request=False, proposers=(proposer,) if proposer else (),
                       gamma=gamma, running=load, profile=profile)


class Fixed:
    """An AlphaSource with given estimates (keyed by proposer), the same for every worker and class."""

    def __init__(self, **by_proposer):
        self.by = by_proposer

    def get(self, worker, proposer, content_class):
        v = self.by.get(proposer, 0.0)
        return v if isinstance(v, AlphaEstimate) else AlphaEstimate(v, 0.0, 1e6)


def test_every_kind_has_a_name_and_reason():
    ws = [per_request("a"), per_request("b", load=3)]
    for kind, extra in [("static", {"proposer": "ngram", "gamma": 3}), ("threshold", {"table": [{"max_load": 8, "gamma": 2}]}),
                        ("goodput", {}), ("bandit", {})]:
        p = policy(kind=kind, **extra)
        d = p.decide("code", ws, AlphaTable())
        assert p.name == kind == d.policy and d.reason.startswith(kind) and d.content_class == "code"
        assert d.worker in ("a", "b") and (d.gamma == 0) == (d.proposer == "none")


def test_no_healthy_worker_is_a_503():
    with pytest.raises(UpstreamError) as exc:
        policy(kind="goodput").decide("chat", [per_request("a", healthy=False)], AlphaTable())
    assert exc.value.status == 503
    with pytest.raises(UpstreamError):
        policy(kind="static").decide("chat", [], AlphaTable())


# -- static ------------------------------------------------------------------------------------------
def test_static_picks_least_loaded_able_worker():
    p = policy(kind="static", proposer="draft", gamma=6)
    ws = [per_request("a", load=5), per_request("b", load=1, max_gamma=4), per_request("c", load=0, proposers=("ngram",))]
    d = p.decide("chat", ws, AlphaTable())
    assert (d.worker, d.proposer, d.gamma) == ("b", "draft", 4)  # capped at the worker's max_gamma
    d = policy(kind="static").decide("chat", ws, AlphaTable())
    assert (d.worker, d.proposer, d.gamma, d.reason) == ("c", "none", 0, "static: off")


def test_static_with_fixed_pools():
    ws = [fixed("n", "ngram", 4, load=0), fixed("o", None, 0, load=2)]
    assert policy(kind="static").decide("chat", ws, AlphaTable()).worker == "o"
    d = policy(kind="static", proposer="ngram", gamma=4).decide("chat", ws, AlphaTable())
    assert (d.worker, d.proposer, d.gamma) == ("n", "ngram", 4)
    d = policy(kind="static", proposer="eagle", gamma=2).decide("chat", ws, AlphaTable())
    assert d.worker == "n" and d.proposer == "ngram" and "no worker offers eagle" in d.reason


# -- threshold ---------------------------------------------------------------------------------------
def test_threshold_gamma_by_load_and_class():
    p = policy(kind="threshold", proposer="draft", proposer_by_class={"summarize": "ngram"},
               table=[{"max_load": 4, "gamma": 5}, {"max_load": 16, "gamma": 3}, {"max_load": 32, "gamma": 1}])
    for load, gamma in [(0, 5), (3, 5), (4, 3), (15, 3), (20, 1), (31, 1), (32, 0), (500, 0)]:
        d = p.decide("chat", [per_request("a", load=load)], AlphaTable())
        assert d.gamma == gamma and d.proposer == ("draft" if gamma else "none")
        assert f"batch={load + 1}" in d.reason
    assert p.decide("summarize", [per_request("a")], AlphaTable()).proposer == "ngram"


# -- goodput -----------------------------------------------------------------------------------------
REASON = re.compile(r"^goodput: (ngram|draft|eagle) g=\d+ alpha=\d\.\d\d batch=\d+ x\d+\.\d\d$")


def test_goodput_follows_the_cost_model_and_turns_off_at_high_load():
    p = policy(kind="goodput", margin=1.05)
    alphas = Fixed(draft=0.8, ngram=0.3)
    prof = load_profile("h200-llama3-70b")
    for load in (0, 15, 63):
        d = p.decide("code", [per_request("a", load=load)], alphas)
        want = costmodel.best_plan({"draft": 0.8, "ngram": 0.3}, prof, load + 1, 8, margin=1.05)
        assert (d.proposer, d.gamma) == (want.proposer, want.gamma) and d.gamma > 0
        assert d.expected_speedup == pytest.approx(want.speedup, rel=1e-9)
        assert REASON.match(d.reason), d.reason
    d = p.decide("code", [per_request("a", load=400)], alphas)
    assert (d.proposer, d.gamma) == ("none", 0) and d.reason.startswith("goodput: off batch=401")
    assert "< margin 1.05" in d.reason


def test_goodput_uses_per_position_rates():
    rates = (0.9, 0.5, 0.2, 0.1)
    alphas = Fixed(draft=AlphaEstimate(0.6, 0.01, 1e4, per_position=rates))
    d = policy(kind="goodput").decide("chat", [per_request("a", proposers=("draft",))], alphas)
    want = costmodel.best_gamma(load_profile("h200-llama3-70b"), "draft", rates, 1, 8)
    assert d.gamma == want.gamma and d.expected_speedup == pytest.approx(want.speedup, rel=1e-9)


def test_goodput_routes_copy_heavy_to_ngram_pool_at_low_load_and_off_pool_at_high_load():
    p = policy(kind="goodput", margin=1.05)
    alphas = AlphaTable()  # built-in priors: ngram on summarize 0.60
    low = [fixed("ngram-pool", "ngram", 4, load=1), fixed("off-pool", None, 0, load=1)]
    d = p.decide("summarize", low, alphas)
    assert (d.worker, d.proposer, d.gamma) == ("ngram-pool", "ngram", 4) and d.expected_speedup > 1.5
    high = [fixed("ngram-pool", "ngram", 4, load=250), fixed("off-pool", None, 0, load=250)]
    for cls in ("summarize", "code", "chat", "translate"):
        d = p.decide(cls, high, alphas)
        assert (d.worker, d.proposer, d.gamma) == ("off-pool", "none", 0)


def test_goodput_among_equals_takes_the_least_loaded():
    p = policy(kind="goodput")
    ws = [fixed("o1", None, 0, load=3), fixed("o2", None, 0, load=2), fixed("o3", None, 0, load=3)]
    assert p.decide("chat", ws, AlphaTable()).worker == "o2"
    ws = [per_request("a", load=7), per_request("b", load=2), per_request("c", load=2, healthy=False)]
    assert p.decide("chat", ws, Fixed(draft=0.8)).worker == "b"


def test_goodput_risk_makes_thin_estimates_cautious():
    est = AlphaEstimate(0.5, 0.2, 5.0)
    ws = [per_request("a", proposers=("draft",), profile="h100-llama3-70b")]
    bold = policy(kind="goodput", explore=0.0).decide("chat", ws, Fixed(draft=est))  # plans, not probes
    careful = policy(kind="goodput", risk=2.0, explore=0.0).decide("chat", ws, Fixed(draft=est))
    assert bold.gamma > 0 and careful.gamma == 0


def test_goodput_skips_proposers_the_profile_cannot_cost():
    ws = [per_request("a", proposers=("hybrid", "ngram"), profile="h100-llama3-8b")]  # no hybrid cost there
    d = policy(kind="goodput", margin=1.0).decide("summarize", ws, Fixed(hybrid=0.99, ngram=0.5))
    assert d.proposer in ("ngram", "none")


# -- bandit ------------------------------------------------------------------------------------------
def test_bandit_is_reproducible_with_a_seed():
    ws = [per_request("a", proposers=("ngram", "draft"), profile="cpu-tiny")]
    runs = []
    for _ in range(2):
        p = policy(kind="bandit", seed=42, margin=1.2)
        runs.append([(d.proposer, d.gamma) for d in (p.decide("chat", ws, AlphaTable()) for _ in range(200))])
    assert runs[0] == runs[1]
    assert len(set(runs[0])) > 1  # it explores


def test_thompson_choice_probability_matches_beta_tail():
    beta = pytest.importorskip("scipy.stats").beta
    margin, n = 1.25, 65_536
    prof = load_profile("cpu-tiny")
    # Beta(6, 14), no data: its tail past the alpha where n-gram pays `margin` on cpu-tiny is well inside (0, 1)
    table = AlphaTable(prior={"ngram": {"chat": 0.3}}, prior_strength=20)
    ws = [per_request("a", proposers=("ngram",), profile="cpu-tiny", max_gamma=8)]

    def beats(a):
        return costmodel.best_gamma(prof, "ngram", round(a, 3), 1, 8).speedup >= margin

    grid = [i / 1000 for i in range(1001)]
    first = next(i for i, a in enumerate(grid) if beats(a))
    assert all(beats(a) for a in grid[first:])  # monotone in alpha
    p_on = 1.0 - beta.cdf(grid[first] - 0.0005, 6, 14)
    assert 0.05 < p_on < 0.95
    pol = policy(kind="bandit", seed=1, margin=margin)
    hits = sum(pol.decide("chat", ws, table).proposer == "ngram" for _ in range(n))
    sd = (n * p_on * (1 - p_on)) ** 0.5
    assert abs(hits - n * p_on) <= 6 * sd + 5


def test_ucb_tries_the_uncertain_arm():
    data = AlphaTable(prior_strength=4)
    for _ in range(200):  # a well-known mediocre draft
        data.observe("a", "draft", "chat", 40, 16, steps=10, gamma=4)
    ws = [per_request("a", proposers=("draft", "eagle"), profile="h100-llama3-8b")]
    d = policy(kind="bandit", algorithm="ucb", ucb_c=2.0).decide("chat", ws, data)
    assert d.proposer == "eagle" and "ucb" in d.reason


def test_threshold_with_fixed_pools_only():
    p = policy(kind="threshold", proposer="ngram", table=[{"max_load": 8, "gamma": 4}])
    ws = [fixed("n", "ngram", 4, load=2), fixed("o", None, 0, load=2)]
    assert p.decide("chat", ws, AlphaTable()).worker == "n"
    ws = [fixed("n", "ngram", 4, load=40), fixed("o", None, 0, load=40)]
    d = p.decide("chat", ws, AlphaTable())
    assert (d.worker, d.proposer, d.gamma) == ("o", "none", 0)


def test_goodput_default_profile_for_workers_without_one():
    ws = [WorkerState("a", proposers=("ngram", "draft"), profile=None)]
    d = policy(kind="goodput", default_profile="h100-llama3-8b").decide("structured", ws, AlphaTable())
    prof = load_profile("h100-llama3-8b")
    want = costmodel.best_plan({"ngram": 0.45, "draft": 0.86}, prof, 1, 8, margin=1.05)
    assert (d.proposer, d.gamma) == (want.proposer, want.gamma)


def test_goodput_prices_the_propose_rate_and_the_prefill_load():
    """The plan follows the cost model with the estimate's propose rate and the worker's prefill traffic."""
    prof = load_profile("h200-llama3-70b")
    p = policy(kind="goodput", margin=1.05)
    rare = Fixed(ngram=AlphaEstimate(0.8, 0.01, 1e4, per_position=(0.8,), propose_rate=0.3))
    for load, rho, prompt in ((0, 0.0, 0.0), (31, 0.0, 0.0), (31, 5.0, 1000.0), (15, 20.0, 4000.0)):
        w = per_request("a", load=load, proposers=("ngram",), prefill_ratio=rho, prompt_tokens=prompt)
        d = p.decide("summarize", [w], rare)
        want = costmodel.best_gamma(prof, "ngram", (0.8,), load + 1, 8, propose_rate=0.3, prefill_ratio=rho,
                                    prefill_chunk=prompt)
        if want.speedup >= 1.05:
            assert (d.proposer, d.gamma) == ("ngram", want.gamma), (load, rho)
            assert d.expected_speedup == pytest.approx(want.speedup, rel=1e-2)
            assert "pi=0.30" in d.reason
        else:
            assert d.gamma == 0, (load, rho)
    # long prompts at batch 32 (RAG): the same estimate is worth less than with no prefill
    busy = per_request("a", load=31, proposers=("ngram",), prefill_ratio=20.0, prompt_tokens=4000.0)
    idle = per_request("a", load=31, proposers=("ngram",))
    assert p.decide("summarize", [busy], rare).expected_speedup < p.decide("summarize", [idle], rare).expected_speedup


def thompson_share(w, content_class, proposer, table, strength=20):
    """P(a draw from `proposer`'s prior Beta(m0 k, (1 - m0) k) makes its plan win over the policy's choice
    without it, the other proposers at their `table` estimates), in closed form: the plan wins above a
    break-even alpha a* (bisection on the policy's own decisions at known alphas), and for integer Beta
    parameters P(alpha > a*) = P(Binomial(k - 1, a*) < m0 k)."""
    base = policy(kind="goodput", explore=0.0)
    others = {q: table.get(w.name, q, content_class) for q in w.proposers if q != proposer}

    def wins(a):
        return base.decide(content_class, [w], Fixed(**{proposer: a, **others})).proposer == proposer

    lo, hi = 0.0, 1.0
    if not wins(hi):
        return 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if wins(mid) else (mid, hi)
    a, k = round(table.get(w.name, proposer, content_class).mean * strength), strength
    return sum(math.comb(k - 1, i) * hi**i * (1 - hi) ** (k - 1 - i) for i in range(a))


def ragged_tiny(tmp_path) -> str:
    """cpu-tiny as a ragged engine would run it (padded_verify off: n-gram lookup plans its own gamma)."""
    spec = yaml.safe_load((PROFILES / "cpu-tiny.yaml").read_text())
    spec.update(name="cpu-tiny-ragged", padded_verify=False)
    path = tmp_path / "cpu-tiny-ragged.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.mark.parametrize("load", [16, 0])
def test_goodput_probes_thin_keys_that_the_prior_keeps_off(load, tmp_path):
    """A pessimistic prior (n-gram on chat: 0.15) keeps the plan off at batch 17 on cpu-tiny (ragged); with no
    evidence the policy drafts anyway: with the probability that a draw from the key's posterior beats the plan
    (Thompson sampling for thin keys), else on a share `explore` of the rest (binomial, 6 sigma); and stops
    once the key has evidence. Without probes the estimate could never improve. (On a padded verify a busy
    worker's lookup gamma is a batch decision, like a model's, and is not probed request by request.)"""
    table = AlphaTable()
    w = per_request("a", load=load, proposers=("ngram",), profile=ragged_tiny(tmp_path))
    off = policy(kind="goodput", explore=0.0).decide("chat", [w], table)
    assert off.gamma == 0
    p = policy(kind="goodput", explore=0.1, explore_below_tokens=256, seed=3)
    n = 20_000
    decisions = [p.decide("chat", [w], table) for _ in range(n)]
    probes = [d for d in decisions if d.gamma > 0]
    ts = thompson_share(w, "chat", "ngram", table)
    assert (ts < 0.001) if load else (0.1 < ts < 0.5)  # the prior's draws rarely win at batch 17, often at 1
    share = ts + (1 - ts) * 0.1
    sd = (n * share * (1 - share)) ** 0.5
    assert abs(len(probes) - n * share) <= 6 * sd
    assert all(d.proposer == "ngram" and re.match(rf"goodput: probe ngram g=\d+ batch={load + 1} \(evidence 0 tokens",
                                                  d.reason) for d in probes)
    # evidence arrives (n-gram accepts well on this traffic): probing stops, the plan follows the estimate
    table.observe_counts("a", "ngram", "chat", 800.0, 200.0, [500.0, 300.0], [300.0, 200.0], steps=1250.0,
                         drafts=500.0)
    later = [p.decide("chat", [w], table) for _ in range(2_000)]
    assert not any("probe" in d.reason for d in later)
    # keys with evidence that really loses are never probed either
    table.observe_counts("a", "ngram", "math", 10.0, 990.0, steps=1000.0, drafts=1000.0)
    assert all(p.decide("math", [w], table).gamma == 0 for _ in range(2_000))


def test_thin_keys_are_probed_beside_a_chosen_plan_by_posterior_draws():
    """At batch 1 on cpu-tiny the draft model, with evidence of 0.75 on math, wins; n-gram lookup (prior 0.30,
    no evidence) is tried with the probability that its posterior draw beats that plan (closed form, 6 sigma),
    the draft plan otherwise; with `explore: 0` never."""
    w = per_request("a", load=0, proposers=("ngram", "draft"), profile="cpu-tiny")
    table = AlphaTable()
    table.observe_counts("a", "draft", "math", 750.0, 250.0)
    assert policy(kind="goodput", explore=0.0).decide("math", [w], table).proposer == "draft"
    assert all(policy(kind="goodput", explore=0.0).decide("math", [w], table).proposer == "draft" for _ in range(200))
    p = policy(kind="goodput", explore=0.05, seed=1)
    n = 10_000
    ds = [p.decide("math", [w], table) for _ in range(n)]
    probes = [d for d in ds if d.proposer == "ngram"]
    share = thompson_share(w, "math", "ngram", table)
    assert 0.05 < share < 0.95
    assert abs(len(probes) - n * share) <= 6 * (n * share * (1 - share)) ** 0.5
    assert all("probe ngram" in d.reason and "posterior draw" in d.reason for d in probes)
    assert {d.proposer for d in ds} == {"ngram", "draft"}


def test_the_prior_floor_lasts_two_requests_not_hundreds_of_tokens():
    """A key with thin evidence is planned at no less than its prior mean (one unlucky request must not keep
    a proposer off), but only until a second request: two short requests drafted at gamma 1 that both
    accept little (60 tokens, far below `explore_below_tokens`) put the draft model's translate plan off."""
    w = per_request("a", load=0, proposers=("draft",), profile="cpu-tiny")
    p = policy(kind="goodput", explore=0.0)
    table = AlphaTable()
    assert p.decide("translate", [w], table).proposer == "draft"  # prior 0.60
    table.observe("a", "draft", "translate", 30, 6, [6], num_drafts=30)
    assert table.get("a", "draft", "translate").reports == 1
    assert p.decide("translate", [w], table).proposer == "draft"  # one request: the prior's floor holds
    table.observe("a", "draft", "translate", 30, 6, [6], num_drafts=30)
    est = table.get("a", "draft", "translate")
    assert est.reports == pytest.approx(2, abs=0.01) and est.n == pytest.approx(60, abs=0.1) and est.mean < 0.6
    assert p.decide("translate", [w], table).gamma == 0


# -- online step-time calibration ------------------------------------------------------------------------
TRUTH_PROFILE = {
    "name": "truth-cpu", "context_tokens": 256,
    "target": {"combine": "sum", "overhead_s": 0.008, "memory_floor_s": 0.0, "kv_s_per_token": 1.3e-6,
               "compute_s_per_token": 2e-4},
    "proposers": {"draft-8b": {"kind": "draft", "combine": "sum", "overhead_s": 0.0044, "memory_floor_s": 0.0,
                               "kv_s_per_token": 0.0, "compute_s_per_token": 2.6e-5},
                  "eagle": {"kind": "eagle", "fraction": 0.04},
                  "ngram": {"kind": "ngram", "step_s": 2.0e-5, "request_s": 2.0e-6}},
    "aliases": {"draft": "draft-8b"},
}


def _fitted_costs(trusted_after: float = 1000.0):
    """A calibrator with h200-llama3-70b as its (wrong) prior, fed windows of the truth (small noise)."""
    import numpy as np

    from adaptspec.control.calibration import StepCalibrator
    from adaptspec.control.telemetry import StepCounters

    rng = np.random.default_rng(0)
    cal = StepCalibrator(load_profile("h200-llama3-70b"), min_steps=trusted_after)
    for _ in range(800):
        n = int(rng.integers(5, 20))
        b = float(rng.integers(1, 64))
        ctx = float(rng.uniform(100, 400))
        g = float(rng.integers(0, 5))
        drafting = float(rng.integers(0, b + 1)) if g else 0.0
        batched = b + drafting * g
        t = n * (0.008 + 2e-4 * batched + 1.3e-6 * b * ctx + (0.0044 * g + 2.6e-5 * drafting * g))
        cal.observe(StepCounters(n, t * (1 + rng.normal(0, 0.01)), n * batched, n * b * ctx,
                                 {"draft": n * drafting * g}, {"draft": n * g}, requests=n * b))
    return cal.costs()


def test_trusted_fit_makes_decisions_those_of_the_true_profile():
    from adaptspec.control.profiles import parse_profile

    costs = _fitted_costs()
    assert costs.trusted
    truth = parse_profile(TRUTH_PROFILE, "truth")
    wrong = policy(kind="goodput", default_profile="h200-llama3-70b", explore=0.0)  # plans, not probes
    right = policy(kind="goodput", explore=0.0)
    right._profiles[None] = right.default_profile = truth  # the policy as if it had been given the truth
    alphas = AlphaTable()

    def true_goodput(d, cls, load):  # what the decision is worth on the real engine
        a = alphas.get("w", d.proposer, cls).mean if d.gamma else 0.0
        return costmodel.evaluate(truth, d.proposer, a, d.gamma, load + 1).goodput

    same = differ = 0
    for cls in ("code", "chat", "summarize", "structured"):
        for load in (0, 2, 8, 24, 64, 128):
            w = WorkerState("w", proposers=("ngram", "draft"), running=load, step_costs=costs)
            calibrated = wrong.decide(cls, [w], alphas)
            uncalibrated = wrong.decide(cls, [WorkerState("w", proposers=("ngram", "draft"), running=load)], alphas)
            true = right.decide(cls, [WorkerState("w", proposers=("ngram", "draft"), running=load)], alphas)
            same += (calibrated.proposer, calibrated.gamma) == (true.proposer, true.gamma)
            differ += (uncalibrated.proposer, uncalibrated.gamma) != (true.proposer, true.gamma)
            # where they differ, it is a near tie: within 3% of the true profile's choice on the real engine
            assert true_goodput(calibrated, cls, load) >= 0.97 * true_goodput(true, cls, load), (cls, load)
    assert same >= 20  # (fitted within a few %: 3 of 24 near ties go the other way)
    assert differ >= 12  # the wrong profile alone decides otherwise in most cases


def test_untrusted_fit_keeps_the_profile():
    costs = _fitted_costs(trusted_after=1e12)
    assert not costs.trusted
    p = policy(kind="goodput", default_profile="h200-llama3-70b")
    w = WorkerState("w", proposers=("ngram", "draft"), running=8)
    assert p.worker_profile(WorkerState("w", step_costs=costs)) is p.default_profile
    assert p.decide("code", [w], AlphaTable()) == p.decide("code", [WorkerState(
        "w", proposers=("ngram", "draft"), running=8, step_costs=costs)], AlphaTable())


def test_decisions_read_the_requests_sampling_regime():
    t = AlphaTable(clock=lambda: 0.0)
    for _ in range(100):  # greedy requests accept almost every n-gram draft, sampled ones almost none
        t.observe("w", "ngram", "code", 8, 8, steps=1)
        t.observe("w", "ngram", "code", 8, 0, steps=8, regime="sampled")
    p = policy(kind="goodput", default_profile="cpu-tiny")
    w = [WorkerState("w", proposers=("ngram",), profile="cpu-tiny")]
    greedy, sampled = p.decide("code", w, t), p.decide("code", w, t.view("sampled"))
    assert (greedy.proposer, sampled.proposer) == ("ngram", "none") and greedy.gamma >= 4


class ByClass:
    """Per (proposer, class) alphas with plenty of evidence."""

    def __init__(self, table):
        self.table = table

    def get(self, worker, proposer, content_class):
        return AlphaEstimate(self.table.get((proposer, content_class), 0.0), 0.0, 1e6)


def test_a_padded_verify_gives_lookup_one_gamma_per_busy_worker(tmp_path):
    """cpu-tiny pads every row's query to the longest draft (padded_verify): a busy worker's n-gram requests get
    one gamma whatever their class's acceptance (the one with the best goodput over the recent class mix); the
    same profile on a ragged engine plans each class at its own best gamma; alone (batch 1) both do."""
    alphas = ByClass({("ngram", "code"): 0.9, ("ngram", "chat"): 0.7})
    gammas = {}
    for prof in ("cpu-tiny", ragged_tiny(tmp_path)):
        for load in (0, 24):
            pol = policy(kind="goodput", explore=0.0)
            w = per_request("w", load=load, proposers=("ngram",), profile=prof)
            for i in range(64):  # the recent class mix: half and half
                pol.decide("code" if i % 2 else "chat", [w], alphas)
            gammas[prof == "cpu-tiny", load] = (pol.decide("code", [w], alphas).gamma,
                                                pol.decide("chat", [w], alphas).gamma)
    assert all(min(g) > 0 for g in gammas.values()), gammas
    code, chat = gammas[False, 24]
    assert code > chat  # ragged: each class its own
    assert gammas[True, 24][0] == gammas[True, 24][1]  # padded: one for the batch
    assert chat <= gammas[True, 24][0] <= code
    assert gammas[True, 0] == gammas[False, 0] and gammas[True, 0][0] > gammas[True, 0][1]  # alone: its own
