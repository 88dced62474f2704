"""Per-request acceptance prediction: features, the untrained prior, and online learning (fixed seeds)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from adaptspec.control.config import GoodputPolicy
from adaptspec.control.estimators import AlphaTable, prior_alpha
from adaptspec.control.policy import Goodput
from adaptspec.control.predict import (
    FEATURE_NAMES,
    GATE_PRIOR,
    GATE_Z,
    AcceptancePredictor,
    Gate,
    Prediction,
    RequestFeatures,
)
from adaptspec.control.types import WorkerState

CODE = "def add(a, b):\n    total = a + b\n    return total\n\nclass Box:\n    size = 3\n"
EDIT = f"Rewrite this function with clearer names:\n\n```python\n{CODE}```"
QUESTION = "What is the difference between a list and a tuple in Python, and when should I use each?"


def feat(text: str, **kw) -> RequestFeatures:
    kw.setdefault("class_scores", {"code": 1.0})
    return RequestFeatures.from_prompt(text, max_tokens=kw.pop("max_tokens", 256), **kw)


def col(f: RequestFeatures, name: str) -> float:
    return float(f.x[FEATURE_NAMES.index(name)])


# ------------------------------------------------------------------------ features

def test_features_shape_and_meaning():
    e, q = feat(EDIT), feat(QUESTION)
    assert e.x.shape == (len(FEATURE_NAMES),) and np.all(np.isfinite(e.x))
    assert col(e, "bias") == 1.0 and col(e, "class_code") == 1.0
    assert col(e, "edit_verb") == 1.0 and col(q, "edit_verb") == 0.0
    assert col(e, "quoted_or_fenced") == 1.0 and col(q, "quoted_or_fenced") == 0.0
    assert col(e, "code_lines") > 0.5 and col(q, "code_lines") == 0.0
    assert col(feat("ab"), "repeat_8bytes") == 0.0 and col(feat("x = 1\ny = 2\nHello there"), "code_lines") == 2 / 3
    rep = feat("the cat sat on the mat " * 20)
    assert col(rep, "repeat_8bytes") > 0.9 and col(q, "repeat_8bytes") == 0.0
    assert col(feat(QUESTION, max_tokens=4096), "log_max_tokens") > col(q, "log_max_tokens")
    assert col(feat(QUESTION, temperature=0.7), "temperature") == pytest.approx(0.7)
    assert col(feat("Übersetze: 日本語"), "non_ascii_share") > 0.25


def test_features_of_empty_and_unscored_prompts():
    f = RequestFeatures.from_prompt("", max_tokens=None, class_scores=None)
    assert np.all(np.isfinite(f.x))
    assert f.class_scores == pytest.approx((1 / 6,) * 6)
    g = RequestFeatures.from_prompt("x", class_scores={"code": 2.0, "chat": 2.0})  # normalised
    assert sum(g.class_scores) == pytest.approx(1.0) and g.class_scores[0] == pytest.approx(0.5)


# ------------------------------------------------------------------------ the untrained predictor

def test_untrained_prediction_is_the_class_prior():
    p = AcceptancePredictor()
    for proposer in ("draft", "ngram", "eagle"):
        for cls in ("code", "translate"):
            a = p.predict(feat(QUESTION, class_scores={cls: 1.0}), proposer)
            assert isinstance(a, Prediction)
            assert a.alpha == pytest.approx(prior_alpha(proposer, cls), abs=1e-9)
    mixed = p.predict(feat(QUESTION, class_scores={"code": 0.5, "chat": 0.5}), "draft").alpha
    assert mixed == pytest.approx(0.5 * (prior_alpha("draft", "code") + prior_alpha("draft", "chat")))
    assert p.predict(feat(QUESTION), "draft").propose_rate == 1.0
    assert 0.0 < p.predict(feat(QUESTION), "ngram").propose_rate < 1.0
    assert p.predict(feat(QUESTION), "ngram").n_eff < 10  # a prior, not evidence


def test_prior_table_overrides():
    p = AcceptancePredictor(prior_table={"draft": {"code": 0.4}})
    assert p.predict(feat(CODE), "draft").alpha == pytest.approx(0.4)


# ------------------------------------------------------------------------ online learning

def served(rng: np.random.Generator, alpha: float, gamma: int, steps: int) -> tuple[int, int, list[int], list[int]]:
    """One request served at `gamma` for `steps` drafting steps, each draft token accepted with prob alpha
    given the previous ones: (draft_tokens, accepted, tried per position, accepted per position)."""
    acc = np.cumprod(rng.random((steps, gamma)) < alpha, axis=1)  # [steps, gamma] accepted prefix
    a = acc.sum(axis=1)  # [steps]
    tried = [int(np.sum(a >= j)) for j in range(gamma)]  # position j is tried when positions < j accepted
    return steps * gamma, int(a.sum()), tried, acc.sum(axis=0).astype(int).tolist()


@pytest.mark.parametrize("per_position", [True, False])
def test_learns_a_within_class_difference(per_position):
    """Two kinds of code request in the same class: edits accept 0.85 per token, questions 0.35. The class
    prior (0.78) is right for neither; after 300 requests of each the predictions are within 0.04 of truth
    (the posterior sd of a per-kind mean from >= 300 x 16 capped pseudo-trials is ~0.01)."""
    rng = np.random.default_rng(0)
    truth = {"edit": 0.85, "question": 0.35}
    texts = {"edit": [EDIT.replace("add", f"f{i}") for i in range(20)],
             "question": [f"{QUESTION} Case {i}." for i in range(20)]}
    p = AcceptancePredictor()
    for i in range(600):
        kind = "edit" if i % 2 else "question"
        f = feat(texts[kind][i % 20])
        d, a, tried, accp = served(rng, truth[kind], gamma=4, steps=12)
        if per_position:
            p.observe(f, "draft", d, a, steps=12, drafts=12, tried_per_position=tried, accepted_per_position=accp)
        else:
            p.observe(f, "draft", d, a, steps=12, drafts=12)
    for kind, alpha in truth.items():
        pred = p.predict(feat(texts[kind][3]), "draft")
        assert pred.alpha == pytest.approx(alpha, abs=0.04), kind
        assert pred.n_eff > 100
    # another proposer's model is untouched
    assert p.predict(feat(EDIT), "ngram").alpha == pytest.approx(prior_alpha("ngram", "code"))


def test_adjust_moves_a_class_level_alpha_by_the_request_s_features():
    """adjust() keeps a class-level alpha for the class-average request and moves it for requests whose
    features the model has learned to matter (edits accept more, questions less)."""
    rng = np.random.default_rng(4)
    p = AcceptancePredictor()
    assert p.adjust(feat(EDIT), "draft", 0.6) == (0.6, 1.0)  # untrained: unchanged
    for i in range(400):
        kind_edit = bool(i % 2)
        d, a, tried, accp = served(rng, 0.85 if kind_edit else 0.35, gamma=4, steps=12)
        p.observe(feat(EDIT if kind_edit else QUESTION), "draft", d, a, 12, 12, tried, accp)
    up, _ = p.adjust(feat(EDIT), "draft", 0.6)
    down, _ = p.adjust(feat(QUESTION), "draft", 0.6)
    assert down < 0.6 < up
    # the two kinds are half of the class each: their logit shifts are opposite and equal
    assert math.log(up / (1 - up)) - math.log(0.6 / 0.4) == pytest.approx(
        math.log(0.6 / 0.4) - math.log(down / (1 - down)), rel=0.05)
    # alpha 0 / 1 and a class never observed pass through
    assert p.adjust(feat(EDIT), "draft", 1.0)[0] == 1.0
    assert p.adjust(feat(EDIT, class_scores={"chat": 1.0}), "draft", 0.6) == (0.6, 1.0)


def test_learns_the_ngram_propose_rate():
    rng = np.random.default_rng(1)
    truth = {"edit": 0.9, "question": 0.2}
    p = AcceptancePredictor()
    for i in range(400):
        kind = "edit" if i % 2 else "question"
        steps = 40
        drafts = int(rng.binomial(steps, truth[kind]))
        d, a, tried, accp = served(rng, 0.5, gamma=3, steps=max(drafts, 1))
        p.observe(feat(EDIT if kind == "edit" else QUESTION), "ngram", d if drafts else 0, a if drafts else 0,
                  steps=steps, drafts=drafts, tried_per_position=tried if drafts else None,
                  accepted_per_position=accp if drafts else None)
    assert p.predict(feat(EDIT), "ngram").propose_rate == pytest.approx(0.9, abs=0.05)
    assert p.predict(feat(QUESTION), "ngram").propose_rate == pytest.approx(0.2, abs=0.05)
    assert p.predict(feat(EDIT), "ngram").alpha == pytest.approx(0.5, abs=0.05)


def test_evidence_per_request_is_capped():
    """One huge request moves the model exactly as far as a request of max_trials_per_request trials: to the
    MAP of a logistic model with a Gaussian prior given that one capped observation (solved here by bisection
    on z = z0 + v (s - n sigmoid(z)), v the prior variance of the logit)."""
    rng = np.random.default_rng(2)
    opts = {"max_trials_per_request": 16, "prior_var": 0.5, "forget": 0.0}
    big, small = AcceptancePredictor(**opts), AcceptancePredictor(**opts)
    d, a, tried, accp = served(rng, 0.2, gamma=4, steps=1000)
    big.observe(feat(CODE), "draft", d, a, 1000, 1000, tried, accp)
    scale = 16 / sum(tried)
    small.observe(feat(CODE), "draft", d, a, 1000, 1000, [t * scale for t in tried], [x * scale for x in accp])
    got = big.predict(feat(CODE), "draft").alpha
    assert got == pytest.approx(small.predict(feat(CODE), "draft").alpha, abs=1e-12)
    f = feat(CODE)
    z0, v = math.log(0.78 / 0.22), 0.5 * float(f.x @ f.x)
    s, n = sum(accp) * scale, 16.0
    lo, hi = -20.0, 20.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid - z0 - v * (s - n / (1 + math.exp(-mid))) < 0:
            lo = mid
        else:
            hi = mid
    assert got == pytest.approx(1 / (1 + math.exp(-lo)), abs=1e-6)
    assert 0.2 < got < 0.78  # between the prior and the one request's own rate


def test_bad_usage_is_refused():
    p = AcceptancePredictor()
    with pytest.raises(ValueError, match="accepted_tokens=5"):
        p.observe(feat(CODE), "draft", draft_tokens=4, accepted_tokens=5, steps=2)
    with pytest.raises(ValueError, match="steps=-1"):
        p.observe(feat(CODE), "draft", draft_tokens=4, accepted_tokens=1, steps=-1)


def test_no_drafts_teaches_nothing_about_alpha():
    p = AcceptancePredictor()
    p.observe(feat(CODE), "draft", draft_tokens=0, accepted_tokens=0, steps=10, drafts=0)
    assert p.predict(feat(CODE), "draft").alpha == pytest.approx(prior_alpha("draft", "code"))


def test_state_round_trips():
    rng = np.random.default_rng(3)
    p = AcceptancePredictor()
    for i in range(50):
        d, a, tried, accp = served(rng, 0.6, gamma=4, steps=8)
        p.observe(feat(EDIT if i % 2 else QUESTION), "ngram", d, a, 10, 8, tried, accp)
    q = AcceptancePredictor()
    q.load_dict(json.loads(json.dumps(p.to_dict())))  # plain JSON: shareable like the AlphaTable's stats
    for text in (EDIT, QUESTION, CODE):
        assert q.predict(feat(text), "ngram") == p.predict(feat(text), "ngram")
        assert q.adjust(feat(text), "ngram", 0.5, 0.5) == p.adjust(feat(text), "ngram", 0.5, 0.5)


def test_n_eff_is_consistent_with_the_posterior():
    """n_eff = 1 / (alpha (1 - alpha) var(logit)): the Beta pseudo-count with the same variance of alpha."""
    p = AcceptancePredictor(prior_var=0.5)
    f = feat(QUESTION)
    a = p.predict(f, "draft")
    var = 0.5 * float(f.x @ f.x)
    assert a.n_eff == pytest.approx(1.0 / (a.alpha * (1 - a.alpha) * var))
    assert math.isfinite(a.n_eff)


# ------------------------------------------------------------------------ cost (figures: --benchmark-enable)

def test_predict_latency(benchmark):
    """Features of a ~2 KB prompt plus one prediction (target < 100 us)."""
    text = (EDIT + "\n" + QUESTION + "\n") * 8
    p = AcceptancePredictor()
    p.observe(feat(text), "ngram", 40, 20, 12, 10, [10, 8, 6, 4], [8, 6, 4, 2])
    scores = {"code": 0.7, "chat": 0.2, "structured": 0.1}

    def one():
        return p.predict(RequestFeatures.from_prompt(text, 512, 0.0, scores), "ngram")

    out = benchmark(one)
    assert 0.0 < out.alpha < 1.0


# ------------------------------------------------------------------------ the gate, the view, the policy

def test_gate_weight_is_the_least_squares_share_of_the_correction():
    """y = c + 0.4 (a - c) + noise: the weight converges to 0.4 (sd of the estimate ~0.1 / sqrt(sum d^2) ~0.01);
    an outcome unrelated to the correction gives ~0; one against it is clipped to 0; beyond it to 1."""
    rng = np.random.default_rng(5)
    gates = {k: Gate(decay=0.0) for k in ("share", "unrelated", "against", "beyond")}
    for _ in range(4000):
        c, d = 0.5, float(rng.uniform(-0.3, 0.3))
        noise = float(rng.normal(0.0, 0.1))
        gates["share"].update(c, c + d, c + 0.4 * d + noise)
        gates["unrelated"].update(c, c + d, c + noise)
        gates["against"].update(c, c + d, c - d + noise)
        gates["beyond"].update(c, c + d, c + 2.0 * d + noise)
    assert gates["share"].weight == pytest.approx(0.4, abs=0.03)
    assert gates["unrelated"].weight == pytest.approx(0.0, abs=0.03)
    assert gates["against"].weight == 0.0 and gates["beyond"].weight == 1.0
    assert Gate().weight == 0.0  # no evidence: no correction


@pytest.mark.parametrize("n", [1, 2, 4, 16, 100])
def test_gate_trusts_a_correction_only_as_far_as_its_evidence_goes(n):
    """n outcomes exactly as corrected (y - c = a - c = d): the least-squares weight is 1 from the first, the
    gate's is its lower bound, closed form (n d^2 - z |d| sqrt(n d^2)) / (n d^2 + prior) = d^2 (n - z sqrt(n))
    / (n d^2 + prior), 0 below n = z^2: one or two agreeing requests never outvote the class level."""
    g, d = Gate(decay=0.0), 0.2
    for _ in range(n):
        g.update(0.5, 0.5 + d, 0.5 + d)
    expect = max(d * d * (n - GATE_Z * math.sqrt(n)) / (n * d * d + GATE_PRIOR), 0.0)
    assert g.weight == pytest.approx(expect, rel=1e-9, abs=1e-12)
    assert (g.weight == 0.0) == (n <= GATE_Z**2)
    assert Gate.from_dict(g.to_dict()).weight == pytest.approx(g.weight, rel=1e-12)


def _feature_prompt(k: int) -> str:
    """A code-edit prompt of 10 lines of which k repeat the first: its repeat features grow with k."""
    body = ["    total = a + b"] * k + [f"    v{j} = f{j}(a, b)" for j in range(10 - k)]
    return "Fix this function:\n```python\ndef g(a, b):\n" + "\n".join(body) + "\n    return total\n```"


def _truth(f: RequestFeatures) -> float:
    """The synthetic acceptance: a logistic function of one feature (the share of repeated lines)."""
    return 1.0 / (1.0 + math.exp(-(-1.5 + 4.0 * col(f, "repeat_lines"))))


def _serve(p: AcceptancePredictor, rng: np.random.Generator, f: RequestFeatures, alpha: float, class_alpha: float,
           proposer: str = "ngram") -> None:
    d, a, tried, accp = served(rng, alpha, gamma=4, steps=12)
    p.observe(f, proposer, d, a, 12, 12, tried, accp, content_class="code", class_alpha=class_alpha)


def test_prediction_converges_to_a_function_of_a_feature():
    """alpha = f(x) for a feature x (closed form above): after 1,500 requests over 11 values of x the
    prediction is within 0.05 of f at every value (the posterior sd of the logit of a value is ~0.06
    here, times alpha (1 - alpha) <= 0.25, plus the bias of the capped, forgetting update), and the view
    of a class-level estimate at the mean of f moves every request towards its own f: within 0.06."""
    rng = np.random.default_rng(6)
    feats = [feat(_feature_prompt(k)) for k in range(11)]
    truths = [_truth(f) for f in feats]
    level = float(np.mean(truths))
    p = AcceptancePredictor()
    for _ in range(1500):
        k = int(rng.integers(0, 11))
        _serve(p, rng, feats[k], truths[k], level)
    table = AlphaTable(prior={"ngram": {"code": level}})
    for f, t in zip(feats, truths, strict=True):
        assert p.predict(f, "ngram").alpha == pytest.approx(t, abs=0.05)
        assert p.view(table, f, "code").get("w", "ngram", "code").mean == pytest.approx(t, abs=0.06)
    assert max(truths) - min(truths) > 0.5  # the feature matters a lot


def test_uninformative_features_leave_the_class_mean():
    """Every request accepts 0.6 whatever its features: the shifts earn nothing, the gate stays shut and every
    request is planned with the class-level estimate (within one shift step, 0.05 logit)."""
    rng = np.random.default_rng(7)
    texts = [_feature_prompt(k) for k in range(11)] + [QUESTION, EDIT, CODE]
    p = AcceptancePredictor()
    for i in range(1500):
        _serve(p, rng, feat(texts[i % len(texts)]), 0.6, 0.6)
    table = AlphaTable(prior={"ngram": {"code": 0.6}})
    for text in texts:
        got = p.view(table, feat(text), "code").get("w", "ngram", "code").mean
        assert got == pytest.approx(0.6, abs=0.6 * 0.4 * 0.05)


def test_a_copy_heavy_request_gets_ngram_where_the_class_mean_says_off():
    """Code requests: edits accept 0.9 of n-gram drafts, questions 0.1; the class-level estimate is 0.3, at
    which the goodput policy keeps n-gram off at batch 16. Planned on their own predicted alphas, the edit
    gets n-gram and the question stays off; other classes and the batch's class mix are untouched."""
    rng = np.random.default_rng(8)
    p = AcceptancePredictor()
    for i in range(400):
        edit = bool(i % 2)
        _serve(p, rng, feat(EDIT.replace("add", f"f{i}") if edit else f"{QUESTION} Case {i}."), 0.9 if edit else 0.1,
               0.3)
    table = AlphaTable(prior={"ngram": {"code": 0.3, "chat": 0.3}})
    policy = Goodput(GoodputPolicy(kind="goodput", default_profile="cpu-tiny"))
    w = WorkerState(name="w", proposers=("ngram",), profile="cpu-tiny", running=15)
    assert policy.decide("code", [w], table).proposer == "none"
    edit = p.view(table, feat(EDIT.replace("add", "h")), "code")
    d = policy.decide("code", [w], edit)
    assert d.proposer == "ngram" and d.gamma >= 2
    assert policy.decide("code", [w], p.view(table, feat(f"{QUESTION} Case x."), "code")).proposer == "none"
    assert edit.get("w", "ngram", "chat") == table.get("w", "ngram", "chat")
    assert edit.class_level is table


def test_per_position_rates_and_propose_rate_move_with_the_shift():
    rng = np.random.default_rng(9)
    p = AcceptancePredictor()
    for i in range(300):
        edit = bool(i % 2)
        f = feat(EDIT if edit else QUESTION)
        d, a, tried, accp = served(rng, 0.9 if edit else 0.2, gamma=4, steps=12)
        p.observe(f, "ngram", d, a, steps=40, drafts=36 if edit else 8, tried_per_position=tried,
                  accepted_per_position=accp, content_class="code", class_alpha=0.5, class_rate=0.55)
    table = AlphaTable()
    table.observe_counts("w", "ngram", "code", 50.0, 50.0, [60.0, 40.0], [30.0, 20.0], steps=100.0, drafts=55.0)
    base = table.get("w", "ngram", "code")
    up = p.view(table, feat(EDIT), "code").get("w", "ngram", "code")
    down = p.view(table, feat(QUESTION), "code").get("w", "ngram", "code")
    assert down.mean < base.mean < up.mean
    assert all(lo < b < hi for lo, b, hi in zip(down.per_position, base.per_position, up.per_position, strict=True))
    assert down.propose_rate < base.propose_rate < up.propose_rate
    assert (up.std, up.n) == (base.std, base.n)
