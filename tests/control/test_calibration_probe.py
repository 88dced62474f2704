"""The drafted token's price (issue 11): the calibrator's drafted_contrast says whether its windows show drafted tokens
varying on their own at a given batch, asks for probes when they do not, and the goodput policy then toggles
speculation for one batch-sized block of admissions in every `every` (control/calibration_probe.py)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from adaptspec.control.calibration import StepCalibrator
from adaptspec.control.calibration_probe import ContrastProbe, GammaProbe
from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.profiles import load_profile
from adaptspec.control.telemetry import StepCounters
from adaptspec.control.types import Decision, WorkerState

PROFILE = load_profile("cpu-tiny")


def window(steps: float, requests: float, ctx: float, drafted: float) -> StepCounters:
    """`steps` steps of `requests` rows of context `ctx`, `drafted` n-gram tokens per step, priced by cpu-tiny."""
    batched, kv = requests + drafted, requests * ctx
    t = PROFILE.target.time(batched, kv)
    return StepCounters(steps, steps * t, steps * batched, steps * kv, {"ngram": steps * drafted}, {},
                        steps * requests)


PROBING = 300.0  # probe_steps of a calibrator that asks for probes (opt in: the default, 0, never asks)


def calibrator(ws: list[StepCounters], **kw) -> StepCalibrator:
    cal = StepCalibrator(PROFILE, half_life_steps=1e9, **{"probe_steps": PROBING, **kw})
    for w in ws:
        cal.observe(w)
    return cal


@pytest.mark.parametrize("a", [0.0, 0.25, 0.5, 1.0])
def test_contrast_is_the_drafted_spread_at_a_given_batch(a):
    """Drafted tokens per step m - a*m and m + a*m in equal-weight windows at one batch: the regression on
    [1, requests, KV] leaves a residual variance (a m)^2 against an explained m^2, so the contrast is a."""
    m = 3.0
    ws = [window(10, 8, 150, m * (1 - a)), window(10, 8, 150, m * (1 + a))] * 20
    cal = calibrator(ws)
    assert cal.drafted_contrast() == pytest.approx(a, abs=1e-6)
    c = cal.costs()
    assert c.drafted_contrast == pytest.approx(a, abs=1e-6)
    assert c.contrast_steps == pytest.approx(400 * a * a, abs=1e-4)  # 400 steps x a^2
    assert c.probe == (a < 1.0)  # 400 a^2 against 300 by default: only a = 1 has the evidence


def test_drafting_that_follows_the_batch_has_no_contrast_whatever_the_batch():
    """Drafted tokens proportional to the running requests (the policy's own traffic: every request drafts the
    same) at batches 1..32 and varying contexts: drafting is explained by the batch, contrast 0, probes asked;
    the same batches with drafting on in some windows and off in others: contrast, no probes."""
    rng = np.random.default_rng(0)
    follow, mixed = [], []
    for _ in range(200):
        r, ctx = float(rng.integers(1, 33)), float(rng.uniform(100, 250))
        follow.append(window(float(rng.integers(3, 12)), r, ctx, 3.0 * r))
        mixed.append(window(float(rng.integers(3, 12)), r, ctx, 3.0 * r * float(rng.integers(0, 2))))
    assert calibrator(follow).drafted_contrast() == pytest.approx(0.0, abs=1e-6)
    assert calibrator(follow).costs().probe
    assert calibrator(mixed).drafted_contrast() > 0.9  # a fair coin per window: contrast 1 in expectation
    assert not calibrator(mixed).costs().probe  # ~1400 steps x ~1
    assert calibrator(mixed[:30]).costs().probe  # ~200 steps: not yet


def test_no_request_counts_no_verdict_and_probe_steps_zero_never_asks():
    w = window(10, 8, 150, 3.0)
    uncounted = StepCounters(w.steps, w.step_seconds, w.batched_tokens, w.kv_tokens, w.drafted_tokens, {}, 0.0)
    cal = calibrator([uncounted] * 20)
    assert math.isnan(cal.drafted_contrast()) and not cal.costs().probe
    assert not calibrator([window(10, 8, 150, 3.0)] * 20, probe_steps=0.0).costs().probe
    assert calibrator([window(10, 8, 150, 3.0)] * 20).costs().probe  # opted in: asks
    default = StepCalibrator(PROFILE, half_life_steps=1e9)
    for w in [window(10, 8, 150, 3.0)] * 20:
        default.observe(w)
    assert default.probe_steps == 0.0 and not default.costs().probe  # the default never asks


def _worker(probe: bool, load: float = 3.0, per_request: bool = True) -> WorkerState:
    ws = [window(10, 8, 150, 3.0)] * 20 if probe else [window(10, 8, 150, 3.0 * (i % 2)) for i in range(40)]
    costs = calibrator(ws).costs()
    assert costs.probe == probe
    return WorkerState("w0", proposers=("ngram", "draft"), running=load, per_request=per_request, step_costs=costs)


def test_a_share_of_probes_alone_reaches_the_evidence():
    """Drafting that follows the batch except in a share p of the steps (probes: off): contrast sqrt(p / (1 - p)),
    so 1/8 of probes reach `probe_steps` after 7 x probe_steps steps and the fit stops asking."""
    ws = [window(1, 8, 150, 0.0 if i % 8 == 0 else 3.0) for i in range(2400)]
    cal = calibrator(ws[:2000])
    assert cal.drafted_contrast() == pytest.approx(math.sqrt(1 / 7), rel=1e-6)
    assert cal.costs().probe  # 2000 / 7 = 286 < 300
    cal = calibrator(ws)
    assert cal.costs().contrast_steps == pytest.approx(2400 / 7, rel=1e-6) and not cal.costs().probe


def test_probe_blocks_are_one_batch_every_eighth():
    """At load 3 (block of 4 admissions), every=8: admissions 0-27 not probed, 28-31 probed, 32-59 not, ...
    (the gap comes first: a short run never probes more than 1/8 of its admissions)."""
    probe, w = ContrastProbe(every=8), _worker(True)
    due = [probe.due(w) for _ in range(96)]
    assert [i for i, x in enumerate(due) if x] == [i for i in range(96) if i % 32 >= 28]
    quiet = ContrastProbe(every=8)
    assert not any(quiet.due(_worker(False)) for _ in range(96))
    assert not any(quiet.due(_worker(True, per_request=False)) for _ in range(96))  # a fixed pool: nothing to toggle


def test_a_probe_toggles_speculation_and_keeps_the_rest():
    probe, w = ContrastProbe(every=2), _worker(True, load=0.0)  # 1 skipped, then a block of 1, ...
    probe.due(w)
    on = Decision("w0", "ngram", 4, "code", "goodput", "goodput: ngram g=4", 1.2, schedule=((8, 2),))
    d = probe.apply(on, w, None, 0)
    assert (d.proposer, d.gamma, d.schedule, d.worker, d.content_class) == ("none", 0, None, "w0", "code")
    assert "calibration probe" in d.reason
    assert probe.apply(on, w, None, 0) == on  # the next admission is not a probe
    off = Decision("w0", "none", 0, "chat", "goodput", "goodput: off", 1.0)
    d = probe.apply(off, w, "draft", 2, 0.95)
    assert (d.proposer, d.gamma) == ("draft", 2)
    probe.apply(off, w, "draft", 2, 0.95)
    assert probe.apply(off, w, None, 0) == off  # a probe slot with nothing to try leaves the decision alone
    assert probe.probes == 2


def test_only_close_choices_are_probed():
    """A choice the drafted token's price cannot flip (speculation 2x, or a missed plan at 0.5x) is never
    toggled and does not count towards the blocks: with every=2 the close admissions alternate probe / not."""
    probe, w = ContrastProbe(every=2), _worker(True, load=0.0)
    fast = Decision("w0", "ngram", 4, "code", "goodput", "goodput: ngram g=4", 2.0)
    close = Decision("w0", "ngram", 2, "code", "goodput", "goodput: ngram g=2", 1.2)
    off = Decision("w0", "none", 0, "chat", "goodput", "goodput: off", 1.0)
    assert all(probe.apply(fast, w, None, 0) == fast for _ in range(10))
    assert all(probe.apply(off, w, "draft", 2, 0.5) == off for _ in range(10))
    toggled = [probe.apply(close, w, None, 0).gamma == 0 for _ in range(6)]
    assert toggled == [False, True] * 3 and probe.probes == 3


def test_goodput_policy_probes_one_admission_in_eight_while_the_fit_asks():
    """The goodput policy's decisions for a worker whose fit asks for contrast: 1/8 of the (close) admissions
    toggled (blocks of load + 1), the rest as without probes; none when the fit has the contrast."""
    cfg = parse_config({"policy": {"kind": "goodput", "default_profile": "cpu-tiny"}}).policy
    alphas = AlphaTable()
    asked, calm = build_policy(cfg), build_policy(cfg)
    w_asked, w_calm = _worker(True, load=7.0), _worker(False, load=7.0)  # blocks of 8 admissions
    made = Counter()
    for _ in range(160):
        d = asked.decide("math", [w_asked], alphas)  # cpu-tiny at batch 8: draft g=1, x1.1 (close)
        ref = calm.decide("math", [w_calm], alphas)
        assert 1.0 < ref.expected_speedup < 1.3 and ref.gamma > 0
        made["probe" if "calibration probe" in d.reason else "same"] += 1
        if "calibration probe" not in d.reason:
            assert (d.proposer, d.gamma) == (ref.proposer, ref.gamma)
        else:
            assert (d.proposer, d.gamma) != (ref.proposer, ref.gamma)
    expected = sum(1 for i in range(160) if i % 64 >= 56)  # a block of 8 (batch 8) in every 64 admissions
    assert made["probe"] == expected == 16
    assert asked.contrast_probe.probes == expected and calm.contrast_probe.probes == 0


def test_a_fit_whose_target_is_priced_at_nothing_is_not_trusted():
    """Draft-model passes at a constant gamma (collinear with the intercept) held at a prior that prices them 4x
    the truth over-explain every window: NNLS zeroes the target, and such a fit must not price decisions (a
    zero step time divides by zero in the cost model); the profile keeps pricing until the data separate them."""
    prior = load_profile("h200-llama3-70b")
    ws = []
    for i in range(200):
        w = window(10, 1, 150 + i % 50, 4.0)  # one request drafting 4 tokens per step, context growing
        passes = 4.0 * w.steps
        # the truth's draft passes: a quarter of what the prior says per pass
        extra = passes * 0.25 * (prior.draft("draft").model.overhead_s + prior.draft("draft").model.memory_floor_s)
        ws.append(StepCounters(w.steps, w.step_seconds + extra, w.batched_tokens, w.kv_tokens,
                               {"draft": 4.0 * w.steps}, {"draft": passes}, w.requests))
    cal = StepCalibrator(prior, half_life_steps=1e9, min_steps=100, probe_steps=PROBING)
    for w in ws:
        cal.observe(w)
    c = cal.costs()
    assert c.steps >= cal.min_steps and not c.fitted["draft_pass_s"]  # enough steps; passes held at the prior
    assert c.coefficients["overhead_s"] == c.coefficients["compute_s_per_token"] == 0.0
    assert not c.trusted


def test_gamma_probe_halves_a_block_of_drafts_while_the_fit_cannot_split_calls_from_passes():
    """`split_probe` names a proposer: one batch-sized block of its admissions in every 8 drafts gamma // 2; other
    proposers, gamma 1, and fits that ask nothing are left alone."""
    from dataclasses import replace

    costs = calibrator([window(10, 8, 150, 3.0 * (i % 2)) for i in range(40)]).costs()
    asking = WorkerState("w0", proposers=("ngram", "draft"), running=0.0, step_costs=replace(costs, split_probe=("draft",)))
    quiet = WorkerState("w0", proposers=("ngram", "draft"), running=0.0, step_costs=costs)
    probe = GammaProbe(every=8, backoff=1.0)
    d = Decision("w0", "draft", 8, "code", "goodput", "goodput: draft g=8", 2.0)
    got = [probe.apply(d, asking).gamma for _ in range(32)]
    assert [i for i, g in enumerate(got) if g == 4] == [7, 15, 23, 31] and set(got) == {4, 8}
    assert probe.probes == 4
    other = GammaProbe(every=2)
    lookup = replace(d, proposer="ngram")
    assert all(other.apply(lookup, asking) == lookup for _ in range(8))  # not the named proposer
    assert all(other.apply(replace(d, gamma=1), asking).gamma == 1 for _ in range(8))
    assert all(GammaProbe(every=2).apply(d, quiet) == d for _ in range(8))


def test_token_probe_drafts_a_block_of_other_plans_with_the_proposer_at_load():
    """`token_probe` names a proposer: at load (3 running: blocks of 4), one block in every 8 of the admissions
    planned otherwise drafts with it at gamma 2; at batch 1 there is nothing to learn about tokens per pass."""
    from dataclasses import replace

    costs = replace(calibrator([window(10, 8, 150, 3.0 * (i % 2)) for i in range(40)]).costs(), token_probe=("draft",))
    loaded = WorkerState("w0", proposers=("ngram", "draft"), running=3.0, step_costs=costs)
    probe = GammaProbe(every=8, backoff=1.0)
    off = Decision("w0", "none", 0, "chat", "goodput", "goodput: off", 1.0)
    got = [probe.apply(off, loaded) for _ in range(64)]
    probed = [i for i, d in enumerate(got) if d.proposer == "draft"]
    assert probed == [i for i in range(64) if i % 32 >= 28] and all(got[i].gamma == 2 for i in probed)
    assert "calibration probe: draft g=2" in got[probed[0]].reason
    idle = WorkerState("w0", proposers=("ngram", "draft"), running=0.0, step_costs=costs)
    assert all(GammaProbe(every=2).apply(off, idle) == off for _ in range(8))


def test_gamma_probe_backs_off_so_an_unresolved_probe_costs_ever_less():
    """By default every block doubles the gap to the next: blocks start after gaps of 7, 15, 31, 63 admissions at
    batch 1 (a constant 1/8 would probe 8 times in 128), up to one block in `max_every`."""
    from dataclasses import replace

    costs = calibrator([window(10, 8, 150, 3.0 * (i % 2)) for i in range(40)]).costs()
    asking = WorkerState("w0", proposers=("ngram", "draft"), running=0.0, step_costs=replace(costs, split_probe=("draft",)))
    d = Decision("w0", "draft", 8, "code", "goodput", "goodput: draft g=8", 2.0)
    probe = GammaProbe(every=8)
    got = [probe.apply(d, asking).gamma for _ in range(300)]
    assert [i for i, g in enumerate(got) if g == 4] == [7, 23, 55, 119, 247]
    capped = GammaProbe(every=8, max_every=32)
    got = [capped.apply(d, asking).gamma for _ in range(200)]
    assert [i for i, g in enumerate(got) if g == 4] == [7, 23, 55, 87, 119, 151, 183]


def test_token_probe_skips_a_proposer_that_could_not_win_at_this_load():
    """The load form asks the policy whether the proposer is worth probing (`worth`): not worth it, no admission
    is moved to it, and the block counters do not advance (the next worthy admission starts the same gap)."""
    from dataclasses import replace

    costs = replace(calibrator([window(10, 8, 150, 3.0 * (i % 2)) for i in range(40)]).costs(), token_probe=("draft",))
    loaded = WorkerState("w0", proposers=("ngram", "draft"), running=3.0, step_costs=costs)
    off = Decision("w0", "none", 0, "chat", "goodput", "goodput: off", 1.0)
    asked: list[str] = []

    def never(p: str) -> bool:
        asked.append(p)
        return False

    probe = GammaProbe(every=8, backoff=1.0)
    assert all(probe.apply(off, loaded, never) == off for _ in range(64))
    assert set(asked) == {"draft"} and probe.probes == 0
    got = [probe.apply(off, loaded, lambda p: True) for _ in range(64)]
    assert [i for i, d in enumerate(got) if d.proposer == "draft"] == [i for i in range(64) if i % 32 >= 28]


def test_goodput_policy_does_not_probe_a_draft_model_priced_far_below_its_plan_at_load():
    """The policy's `worth`: at 64 running on cpu-tiny with EAGLE accepted 0.8 and the draft model 0.05 for the class,
    the draft model's best plan (gamma 1..8 at 0.05) is nowhere near EAGLE's, whatever the fit says: a fit that asks
    for a token probe of the draft model gets none; with the draft model accepted like EAGLE it gets its blocks."""
    from dataclasses import replace

    costs = replace(calibrator([window(10, 8, 150, 3.0 * (i % 2)) for i in range(40)]).costs(), token_probe=("draft",))
    cfg = parse_config({"policy": {"kind": "goodput", "default_profile": "cpu-tiny"}})
    w = WorkerState("w0", proposers=("none", "eagle", "draft"), running=63.0, step_costs=costs, profile="cpu-tiny")

    def picks(draft_alpha: float) -> Counter:
        policy = build_policy(cfg.policy)
        table = AlphaTable(prior_strength=20.0)
        for _ in range(50):
            table.observe_counts("w0", "eagle", "chat", 80, 20)
            table.observe_counts("w0", "draft", "chat", round(100 * draft_alpha), 100 - round(100 * draft_alpha))
        return Counter(policy.decide("chat", [w], table).proposer for _ in range(2000))

    poor = picks(0.05)
    assert poor["draft"] == 0 and poor["eagle"] == 2000
    assert picks(0.8)["draft"] > 0


def test_at_load_only_the_batchs_own_model_is_probed():
    """A worker whose batch keeps one model's passes (EAGLE, accepted 0.8; the draft model 0.5-0.75, near enough
    to be worth a token probe on its own: the policy probed it on 128 of 2,000 admissions): a probe with the draft
    model would run its passes in every step beside EAGLE's, so none is made."""
    from dataclasses import replace

    costs = replace(calibrator([window(10, 8, 150, 3.0 * (i % 2)) for i in range(40)]).costs(), token_probe=("draft",))
    cfg = parse_config({"policy": {"kind": "goodput", "default_profile": "cpu-tiny"}})
    w = WorkerState("w0", proposers=("none", "eagle", "draft"), running=63.0, step_costs=costs, profile="cpu-tiny")
    for draft_alpha in (0.5, 0.6, 0.7, 0.75):
        policy = build_policy(cfg.policy)
        table = AlphaTable(prior_strength=20.0)
        for _ in range(50):
            table.observe_counts("w0", "eagle", "chat", 80, 20)
            table.observe_counts("w0", "draft", "chat", round(100 * draft_alpha), 100 - round(100 * draft_alpha))
        prof = policy.worker_profile(w)
        assert not policy._probe_worth(w, "chat", table, "draft", Decision("w0", "eagle", 2, "chat", "goodput", "", 1.0))
        got = Counter(policy.decide("chat", [w], table).proposer for _ in range(2000))
        assert got == Counter({"eagle": 2000})
        assert policy.kept_group(w, prof, table, 64.0, 8, content_class="chat") == ("eagle",)


def test_token_probe_needs_a_price_that_puts_the_proposer_ahead_of_the_decision():
    """At 4 running on cpu-tiny, n-gram accepted 0.5 and the draft model 0.75 for the class: the policy runs lookup
    (x1.18) and prices the draft model's best plan at ~x1.13 under the more hopeful of the profile and the fit. Its split cannot
    change that choice, so a fit that asks for a token probe of the draft model gets none; the old gate (within
    1.3x of the decision) moved whole blocks of admissions to it, whose passes the batch pays."""
    from dataclasses import replace

    costs = replace(calibrator([window(10, 8, 150, 3.0 * (i % 2)) for i in range(40)]).costs(), token_probe=("draft",))
    cfg = parse_config({"policy": {"kind": "goodput", "default_profile": "cpu-tiny"}})
    w = WorkerState("w0", proposers=("none", "ngram", "draft"), running=3.0, step_costs=costs, profile="cpu-tiny")

    def picks(near: float) -> Counter:
        policy = build_policy(cfg.policy)
        policy.gamma_probe = GammaProbe(near=near)
        table = AlphaTable(prior_strength=20.0)
        for _ in range(50):
            table.observe_counts("w0", "ngram", "code", 50, 50)
            table.observe_counts("w0", "draft", "code", 75, 25)
        return Counter(policy.decide("code", [w], table).proposer for _ in range(400))

    assert picks(1.0) == Counter({"ngram": 400})
    assert picks(1.0 / 1.3)["draft"] >= 4  # the old gate: at least one block of the batch's worth of admissions
