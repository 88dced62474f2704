"""control/holdout.py and control/holdout_policy.py: assignment, intervals, switchback windows, the guard."""

from __future__ import annotations

import math
import random

import pytest

from adaptspec.control.config import StaticPolicy, parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.holdout import (
    CONTROL,
    TREATED,
    BlockAssigner,
    RegimeOccupancy,
    RegimeRequests,
    SwitchbackBook,
    format_table,
    load_bucket,
    log_ratio_interval,
    t_quantile,
    window_uniform,
)
from adaptspec.control.holdout_policy import Experimented
from adaptspec.control.policy import Static, build_policy
from adaptspec.control.types import WorkerState
from adaptspec.errors import ConfigError


def test_load_buckets_are_powers_of_two():
    got = [load_bucket(b) for b in (0, 1, 2, 3, 4, 7, 8, 63.6, 64, 255, 256, 5000)]
    assert got == ["1", "1", "2-3", "2-3", "4-7", "4-7", "8-15", "64-127", "64-127", "128-255", "256+", "256+"]


@pytest.mark.parametrize("df, want", [(1, 12.7062), (2, 4.3027), (5, 2.5706), (10, 2.2281), (30, 2.0423),
                                      (1e6, 1.9600)])
def test_t_quantile_matches_tables(df, want):
    assert t_quantile(0.975, df) == pytest.approx(want, rel=2e-3)


def test_block_assigner_holds_exactly_one_per_block_at_a_uniform_position():
    # closed form: one hit per block of 4, its position uniform: each position gets n/4 of n blocks
    a = BlockAssigner(0.25, seed=3)
    n = 65_536
    pos = [0, 0, 0, 0]
    for _ in range(n):
        hits = [a.pick(("code", "1", "ngram")) for _ in range(4)]
        assert sum(hits) == 1
        pos[hits.index(True)] += 1
    p = 0.25
    for c in pos:
        assert abs(c - n * p) <= 6 * math.sqrt(n * p * (1 - p)) + 5


def test_block_assigner_strata_are_independent():
    a = BlockAssigner(0.02, seed=0)
    held = {s: sum(a.pick((s, "1", "ngram")) for _ in range(500)) for s in ("code", "chat")}
    assert held == {"code": 10, "chat": 10}  # exactly the share in each stratum, whatever the mix
    assert not any(BlockAssigner(0.0).pick(("x",)) for _ in range(100))


def test_log_ratio_interval_covers_the_true_ratio_at_its_confidence():
    # lognormal decode times: off ~ exp(N(log 0.030, 0.3)), spec ~ exp(N(log 0.020, 0.5)); true geometric
    # speedup 1.5. Welch on logs: coverage ~0.95 (binomial bounds, n = 2000 replications).
    rng = random.Random(7)
    n, hits = 2000, 0
    for _ in range(n):
        spec = [math.exp(rng.gauss(math.log(0.020), 0.5)) for _ in range(120)]
        off = [math.exp(rng.gauss(math.log(0.030), 0.3)) for _ in range(12)]
        iv = log_ratio_interval(spec, off)
        hits += iv.low <= 1.5 <= iv.high
    p = 0.95
    assert abs(hits - n * p) <= 6 * math.sqrt(n * p * (1 - p)) + 5


def test_log_ratio_interval_needs_samples_and_handles_constant_data():
    assert log_ratio_interval([1.0], [2.0, 2.0]) is None
    assert log_ratio_interval([1.0] * 5, [2.0] * 5, min_n=6) is None
    iv = log_ratio_interval([1.0, 1.0], [2.0, 2.0])
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((2.0, 2.0, 2.0))


def _worker(load: float = 0.0) -> WorkerState:
    return WorkerState(name="w0", proposers=("ngram", "draft"), running=load)


def _experiment(holdout=None, switchback=None, clock=None) -> Experimented:
    cfg = parse_config({"policy": {"kind": "static", "proposer": "ngram", "gamma": 4,
                                   **({"holdout": holdout} if holdout else {}),
                                   **({"switchback": switchback} if switchback else {})}})
    pol = build_policy(cfg.policy)
    if clock is not None:
        pol.clock = clock
    return pol


def test_the_experiment_forwards_the_declared_capabilities_and_nothing_else():
    """PolicyBase's capabilities are read through to the inner policy; any other attribute is the experiment's
    own or an AttributeError (no silent forwarding: a caller must not depend on the inner kind's internals)."""
    pol = _experiment({"share": 0.1})
    assert pol.uses_alphas == pol.inner.uses_alphas and pol.default_profile is pol.inner.default_profile
    assert pol.contrast_probe is pol.inner.contrast_probe and pol.gamma_probe is pol.inner.gamma_probe
    assert pol.experiment is pol and pol.name == pol.inner.name
    assert pol.inner.gamma == 4
    with pytest.raises(AttributeError):
        _ = pol.gamma


def test_build_policy_wraps_only_when_an_experiment_is_configured():
    assert isinstance(build_policy(StaticPolicy(kind="static")), Static)
    pol = _experiment({"share": 0.1})
    assert isinstance(pol, Experimented) and pol.name == "static"


def test_holdout_serves_its_share_off_with_reason_holdout():
    pol = _experiment({"share": 0.1})
    alphas = AlphaTable()
    ds = [pol.decide("code", [_worker()], alphas) for _ in range(200)]
    held = [d for d in ds if d.assignment.group == CONTROL]
    assert len(held) == 20
    assert all(d.proposer == "none" and d.gamma == 0 and d.reason.startswith("holdout") for d in held)
    served = [d for d in ds if d.assignment.group == TREATED]
    assert all(d.proposer == "ngram" and d.gamma == 4 for d in served)
    assert {(d.assignment.content_class, d.assignment.bucket, d.assignment.arm) for d in ds} == {("code", "1", "ngram")}
    assert pol.report()["changed"] == [{"content_class": "code", "load_bucket": "1", "arm": "ngram",
                                        "reason": "holdout", "count": 20}]


def test_report_estimates_the_speedup_and_the_guard_engages_and_releases():
    pol = _experiment({"share": 0.2, "min_samples": 5})
    alphas, rng = AlphaTable(), random.Random(1)

    def run(n: int, spec_s: float, off_s: float) -> list:
        out = []
        for _ in range(n):
            d = pol.decide("chat", [_worker(5)], alphas)
            base = off_s if d.gamma == 0 else spec_s
            pol.record(d, 64, base * math.exp(rng.gauss(0.0, 0.1)), now=0.0)
            out.append(d)
        return out

    run(200, 0.010, 0.020)  # speculation 2x faster
    row = pol.report()["requests"][0]
    assert (row["content_class"], row["load_bucket"], row["arm"]) == ("chat", "4-7", "ngram")
    assert (row["n_treated"], row["n_control"]) == (160, 40)
    assert row["low"] < 2.0 < row["high"] and row["high"] / row["low"] < 1.2 and not row["guarded"]
    text = format_table(pol.report()["requests"])
    assert "chat" in text and "4-7" in text and "ngram" in text

    ds = run(600, 0.030, 0.020)  # now speculation is slower: the guard takes over
    rep = pol.report()
    assert rep["requests"][0]["guarded"] and rep["guard"]["engaged"] == 1
    late = ds[-100:]
    assert sum(d.gamma == 0 and d.reason.startswith("guard") for d in late) == 80  # probes: the share
    assert sum(d.gamma == 4 and d.assignment.reason == "guard probe" for d in late) == 20

    run(3000, 0.010, 0.020)  # faster again: the probes' evidence releases it
    rep = pol.report()
    assert not rep["requests"][0]["guarded"] and rep["guard"]["released"] == 1


def test_requests_the_policy_serves_off_are_not_part_of_the_experiment():
    cfg = parse_config({"policy": {"kind": "static", "holdout": {"share": 0.5}}})
    pol = build_policy(cfg.policy)
    ds = [pol.decide("chat", [_worker()], AlphaTable()) for _ in range(10)]
    assert all(d.assignment.arm == "none" and d.assignment.group == TREATED for d in ds)
    for d in ds:
        pol.record(d, 10, 0.01, now=0.0)
    assert pol.report()["requests"] == [] and pol.report()["changed"] == []


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_window_regimes_are_balanced_blocks_at_uniform_positions():
    # share 0.25: one off window in every block of 4, its position uniform over the blocks (closed form n/4)
    book = SwitchbackBook(0.25, 10.0, 2.0, seed=5)
    n = 65_536
    pos = [0, 0, 0, 0]
    for blk in range(n):
        regimes = [book.regime("w0", 4 * blk + i) for i in range(4)]
        assert regimes.count("off") == 1
        pos[regimes.index("off")] += 1
    for c in pos:
        assert abs(c - n / 4) <= 6 * math.sqrt(n * 0.25 * 0.75) + 5
    assert [book.regime("w0", i, guarded=True) for i in range(8)].count("policy") == 2  # guarded: roles swap
    pair = SwitchbackBook(0.5, 10.0, 2.0, seed=1)
    assert all({pair.regime("w0", 2 * k), pair.regime("w0", 2 * k + 1)} == {"off", "policy"} for k in range(100))
    assert [pair.regime("w0", i) for i in range(40)] != [pair.regime("w1", i) for i in range(40)]
    assert window_uniform(5, "w0", 12) == window_uniform(5, "w0", 12) != window_uniform(5, "w1", 12)
    many = SwitchbackBook(0.75, 10.0, 2.0)  # off is the majority: one policy window per block of 4
    assert [many.regime("w0", i) for i in range(4)].count("policy") == 1


def test_switchback_compares_window_throughput_and_guards_a_slower_bucket():
    clock = _Clock()
    pol = _experiment(switchback={"share": 0.3, "window_s": 10.0, "washout_s": 2.0, "min_windows": 3},
                      clock=clock)
    alphas = AlphaTable()
    # a closed loop of 1-second requests of 100 tokens; in off windows they take 0.8 s (speculation is slower)
    regimes = []
    while clock.t < 400.0:
        guarded = bool(pol.guard.buckets)
        d = pol.decide("chat", [_worker(40)], alphas)
        regimes.append((guarded, d.assignment.window, d.assignment.regime))
        assert (d.gamma == 0) == (d.assignment.regime == "off")
        clock.t += 1.0 if d.gamma else 0.8
        pol.record(d, 100, 0.01, now=clock.t)
    rep = pol.report()
    row = rep["windows"][0]
    assert row["load_bucket"] == "32-63" and row["windows_policy"] >= 3 and row["windows_off"] >= 3
    assert row["throughput_ratio"] == pytest.approx(0.8, rel=0.05) and row["high"] < 1.0
    assert rep["guard"]["buckets"] == ["32-63"] and row["guarded"]
    # guarded: only a share (0.3) of windows still runs the policy, instead of all but a share
    after = [(w, r) for g, w, r in regimes if g]
    assert len({w for w, _ in after}) >= 10
    assert all(r == pol.windows.regime("w0", w, guarded=True) for w, r in after)
    assert sum(r == "off" for _, r in after) > sum(r == "policy" for _, r in after)
    assert any(r.startswith("switchback") or r.startswith("guard") for r in
               (c["reason"] for c in rep["changed"]))


def test_switchback_counts_what_the_worker_emitted_in_the_measured_part():
    book = SwitchbackBook(0.5, 10.0, 4.0, seed=0, settle_s=10.0)
    book.note_decision("w0", 0, "policy", 1.0, 0.5)
    book.note_decision("w0", 1, "off", 1.0, 10.5)
    book.finish("w0", 0, 31, 0.1, 3.0)  # decoded 0.0-3.0: all inside the washout, counts nowhere
    book.finish("w0", 0, 81, 0.1, 12.0)  # 4.0-12.0: 6/8 of it in window 0's measured part, none in 1's
    book.close_all(19.9)
    assert book.windows("1") == []  # window 0 settles at its end + settle_s = 20
    book.finish("w0", 1, 50, None, 15.0)  # no decode time: all at its end, in window 1's measured part
    book.finish("w0", 0, 161, 0.1, 20.0)  # 4.0-20.0: 6/16 in window 0 (4-10), 6/16 in window 1 (14-20)
    book.close_all(30.0)
    w0, w1 = book.windows("1")
    assert (w0.regime, w0.tokens) == ("policy", pytest.approx(81 * 6 / 8 + 161 * 6 / 16))
    assert (w1.regime, w1.tokens) == ("off", pytest.approx(50 + 161 * 6 / 16))
    assert w0.decode == [0.1]  # only the request that started and ended in window 0


def test_abba_order_runs_x_y_y_x_blocks_with_x_drawn_per_block():
    # share 0.5, order abba: every block of 4 windows is x y y x; x = off in half the blocks (closed form n/2)
    book = SwitchbackBook(0.5, 10.0, 2.0, seed=9, order="abba")
    n, off_first = 4096, 0
    for blk in range(n):
        r = [book.regime("w0", 4 * blk + i) for i in range(4)]
        assert r[0] == r[3] != r[1] == r[2]
        off_first += r[0] == "off"
    assert abs(off_first - n / 2) <= 6 * math.sqrt(n * 0.25) + 5
    guarded = [book.regime("w0", i, guarded=True) for i in range(8)]
    assert guarded == [{"off": "policy", "policy": "off"}[book.regime("w0", i)] for i in range(8)]
    with pytest.raises(ConfigError) as e:
        parse_config({"policy": {"kind": "goodput", "switchback": {"share": 0.3, "order": "abba"}}}, "pol.yaml")
    assert e.value.key == "policy.switchback" and "abba" in str(e.value)


def test_occupancy_says_which_requests_ran_with_their_regime_alone():
    occ = RegimeOccupancy(stale_s=100.0)
    a, clean_a = occ.admit("w0", "policy", 0.0)
    b, clean_b = occ.admit("w0", "policy", 1.0)
    assert clean_a and clean_b and occ.pure_since("w0", "off", 1.0) is None
    assert occ.finish("w0", "policy", a, 0.0, clean_a, 5.0)  # alone with its own regime all its life
    c, clean_c = occ.admit("w0", "off", 6.0)  # b still runs: c is not pure, and b no longer either
    assert not clean_c
    assert not occ.finish("w0", "policy", b, 1.0, clean_b, 8.0)
    assert occ.pure_since("w0", "off", 9.0) == 8.0  # the last policy request ended at 8
    d, clean_d = occ.admit("w0", "off", 9.0)
    assert clean_d and occ.finish("w0", "off", d, 9.0, clean_d, 12.0)
    assert not occ.finish("w0", "off", c, 6.0, clean_c, 13.0)
    assert occ.admit("w1", "off", 13.0)[1]  # workers are separate
    # a request never reported stops counting as running stale_s after its decision
    occ.admit("w0", "policy", 20.0)
    assert occ.pure_since("w0", "off", 119.0) is None and occ.pure_since("w0", "off", 121.0) == 8.0


def test_windows_are_measured_from_when_the_worker_runs_their_regime_alone():
    # a policy request runs 0-25 s: the off window 1 (10-20) never runs alone and is not measured; window 2
    # (off, no switch: no washout) is measured from 25 s, when it ended
    clock = _Clock()
    pol = _experiment(switchback={"share": 0.5, "window_s": 10.0, "washout_s": 2.0, "settle_s": 1.0,
                                  "guard": False}, clock=clock)
    book = pol.windows
    book.regime = lambda worker, window, guarded=False: "policy" if window == 0 else "off"
    alphas = AlphaTable()
    clock.t = 0.5
    long = pol.decide("chat", [_worker(0)], alphas)
    off = []
    for t in (11.0, 15.0, 21.0):
        clock.t = t
        off.append(pol.decide("chat", [_worker(1)], alphas))
        assert not off[-1].assignment.clean
    pol.record(long, 246, 0.1, now=25.0)
    clock.t = 26.0
    late = pol.decide("chat", [_worker(1)], alphas)
    assert late.assignment.clean
    for d in off:
        pol.record(d, 50, 0.1, now=27.0)
    pol.record(late, 30, 0.1, now=29.0)
    book.close_all(40.0)
    got = {w.start: (w.measure_from, w.tokens) for b in book.buckets() for w in book.windows(b)}
    assert 10.0 not in got  # never pure
    assert got[20.0][0] == 25.0
    assert pol.regimes.count("2-3") == 1  # only `late` ran alone: the guard's request evidence


def test_request_looks_wait_for_the_regime_with_fewer_samples():
    rr = RegimeRequests(first_look=20)
    for _ in range(300):
        rr.observe("128-255", "policy", 0.1)
        assert rr.look("128-255") is None  # nothing to compare: no look is spent
    for i in range(10):
        rr.observe("128-255", "off", 0.07 + 0.001 * i)
        iv = rr.look("128-255")
        assert (iv is None) == (i < 9)
    assert iv.high < 1.0 and rr.look("128-255") is None  # the next look at 20 a regime


@pytest.mark.parametrize("section, key, value", [
    ({"holdout": {"share": 0.0}}, "policy.holdout.share", 0.0),
    ({"holdout": {"share": 0.02, "bogus": 1}}, "policy.holdout.bogus", 1),
    ({"switchback": {"window_s": 5, "washout_s": 5}}, "policy.switchback", None),
])
def test_config_errors_name_the_key(section, key, value):
    with pytest.raises(ConfigError) as e:
        parse_config({"policy": {"kind": "goodput", **section}}, "pol.yaml")
    assert e.value.key == key and e.value.file == "pol.yaml"
    if value is not None:
        assert e.value.value == value


def test_a_reload_keeps_the_evidence_when_the_rules_are_unchanged():
    old = _experiment({"share": 0.5, "min_samples": 2})
    for _ in range(8):
        d = old.decide("code", [_worker()], AlphaTable())
        old.record(d, 10, 0.01 if d.gamma else 0.02, now=0.0)
    new = _experiment({"share": 0.25, "min_samples": 2})  # a new share: same evidence rules
    new.adopt(old)
    assert new.report()["requests"] == old.report()["requests"] and new.report()["requests"][0]["n_control"] == 4
    other = _experiment({"share": 0.5, "min_samples": 5})  # different rules: starts afresh
    other.adopt(old)
    assert other.report()["requests"] == []
    plain = _experiment({"share": 0.5})
    plain.adopt(build_policy(StaticPolicy(kind="static")))  # not an experiment: nothing to take over
    assert plain.report()["requests"] == []


def test_max_cost_holds_out_less_where_the_speedup_is_large():
    pol = _experiment({"share": 0.1, "min_samples": 5, "max_cost": 0.02})
    alphas = AlphaTable()
    for _ in range(200):  # evidence: speculation 3x faster
        d = pol.decide("code", [_worker()], alphas)
        pol.record(d, 50, 0.01 if d.gamma else 0.03, now=0.0)
    # share = min(0.1, 0.02 / (2 * 0.98)) = 1/98: one held in each block of 98
    held = sum(pol.decide("code", [_worker()], alphas).assignment.group == CONTROL for _ in range(98 * 5))
    assert held in (5, 6)  # the block in progress when the cap applied may still be a share-sized one
    uncapped = _experiment({"share": 0.1})
    assert sum(uncapped.decide("code", [_worker()], alphas).assignment.group == CONTROL for _ in range(100)) == 10


def test_washout_only_after_a_switch_and_cooldown_only_before_one():
    # carry-over lives at switches: a window between two of its own regime is measured whole
    book = SwitchbackBook(0.5, 10.0, 4.0, seed=0, settle_s=1.0, cooldown_s=2.0)
    book.note_decision("w0", 0, "policy", 1.0, 0.5, next_regime="policy")  # no predecessor: washout
    book.note_decision("w0", 1, "policy", 1.0, 10.5, next_regime="off")  # same as before; a switch after
    book.note_decision("w0", 2, "off", 1.0, 20.5)  # switch before; next unknown: cooldown too
    book.note_decision("w0", 4, "off", 1.0, 40.5, next_regime="off")  # window 3 had no decision: washout
    book.close_all(60.0)
    got = [(w.measure_from, min(w.end, w.measure_to)) for w in book.windows("1")]
    assert got == [(4.0, 10.0), (10.0, 18.0), (24.0, 28.0), (44.0, 50.0)]


def test_share_of_time_holds_out_a_share_of_decode_time():
    # speculation 3x faster: one held in each block of (3 * 0.9 + 0.1) / 0.1 = 28, so the held requests take
    # 3 / (27 + 3) = 10% of the time (closed form) and a closed loop loses 0.1 * (1 - 1/3) of its throughput
    pol = _experiment({"share": 0.1, "min_samples": 5, "share_of": "time"})
    alphas = AlphaTable()
    for _ in range(200):
        d = pol.decide("code", [_worker()], alphas)
        pol.record(d, 50, 0.01 if d.gamma else 0.03, now=0.0)
    assert pol.report()["requests"][0]["speedup"] == pytest.approx(3.0)
    for _ in range(28):  # finish the block in progress (it may still be share-sized)
        pol.decide("code", [_worker()], alphas)
    groups = [pol.decide("code", [_worker()], alphas).assignment.group for _ in range(28 * 50)]
    held = sum(g == CONTROL for g in groups)
    assert 49 <= held <= 51  # block boundaries: the one in progress may be cut
    time_held = held * 3.0 / (held * 3.0 + (len(groups) - held) * 1.0)
    assert time_held == pytest.approx(0.1, abs=0.003)
    cost = 1.0 - len(groups) / (len(groups) - held + 3.0 * held)
    assert cost == pytest.approx(0.1 * (1 - 1 / 3), abs=0.003)
    with pytest.raises(ConfigError) as e:
        parse_config({"policy": {"kind": "goodput", "holdout": {"share_of": "tokens"}}}, "pol.yaml")
    assert e.value.key == "policy.holdout.share_of"


def test_request_looks_spend_the_error_rate_so_watching_longer_does_not_trip_the_guard():
    # no effect: both regimes' decode times lognormal(log 0.02, 0.4). The k-th look (at 20 x 2^k requests)
    # tests at error (1 - 0.95) / 2^(k+1), one-sided half of it: P(ever high < 1) <= sum 0.025 / 2^(k+1)
    # < 0.025, against ~0.05-0.1 for a plain 95% test at every look. Binomial bound over 400 replications.
    rng = random.Random(11)
    n, trips = 400, 0
    for _ in range(n):
        rr = RegimeRequests(max_samples=5000, first_look=20)
        tripped = False
        for i in range(1280):
            rr.observe("128-255", "policy" if i % 2 else "off", math.exp(rng.gauss(math.log(0.02), 0.4)))
            iv = rr.look("128-255")
            tripped |= iv is not None and iv.high < 1.0
        trips += tripped
    p = 0.025
    assert trips <= n * p + 4 * math.sqrt(n * p * (1 - p))


def test_request_looks_find_a_slower_regime_with_the_power_of_their_look():
    # policy windows' decode 25% slower (speedup 0.8), log-sd 0.3: at the look at 160 requests (80 a regime,
    # error 0.05 / 16, t ~ 2.96) the se of the log ratio is 0.3 sqrt(2/80) = 0.047, so the bound is below 1 when
    # the estimate is below log 0.8 + 0.084: power P(z > (0.223 - 0.14) / 0.047) ~ 0.96. 200 replications.
    rng = random.Random(5)
    n, found = 200, 0
    for _ in range(n):
        rr = RegimeRequests(first_look=20)
        hit = False
        for i in range(160):
            regime = "policy" if i % 2 else "off"
            mu = math.log(0.025) if regime == "policy" else math.log(0.02)
            rr.observe("1", regime, math.exp(rng.gauss(mu, 0.3)))
            iv = rr.look("1")
            hit |= iv is not None and iv.high < 1.0
        found += hit
    assert found >= n * 0.96 - 4 * math.sqrt(n * 0.96 * 0.04)


def test_the_guard_trips_on_requests_before_any_window_could_be_compared():
    # a closed loop of 1-second requests at load 1; speculation makes decode 25% slower. Windows of 10 s: the
    # window evidence needs 3 closed windows a regime (>= 60 s + settle); the requests' first looks (20, 40)
    # come within the first three windows.
    clock = _Clock()
    pol = _experiment(switchback={"share": 0.5, "window_s": 10.0, "washout_s": 2.0, "min_windows": 3},
                      clock=clock)
    alphas = AlphaTable()
    engaged_at = None
    while clock.t < 60.0 and engaged_at is None:
        d = pol.decide("chat", [_worker(0)], alphas)
        clock.t += 1.0
        pol.record(d, 100, 0.0125 if d.gamma else 0.01, now=clock.t)
        if pol.guard.buckets:
            engaged_at = clock.t
    assert engaged_at is not None and engaged_at <= 30.0
    assert pol.report()["guard"]["buckets"] == ["1"] and "windows" not in pol._evidence["1"]
    ev = pol._evidence["1"]["requests"]
    assert ev.estimate == pytest.approx(0.8) and ev.high < 1.0
    # requests may engage but not release: speculation now looks faster per request, yet until the windows
    # have a verdict (3 closed windows a regime: not before t = 60) the bucket stays guarded
    while clock.t < 40.0:
        d = pol.decide("chat", [_worker(0)], alphas)
        clock.t += 1.0
        pol.record(d, 100, 0.005 if d.gamma else 0.01, now=clock.t)
    assert pol.guard.buckets == {"1"} and pol.guard.released == 0 and "windows" not in pol._evidence["1"]
    # without the requests' evidence the same loop has no verdict by then
    clock.t = 0.0
    plain = _experiment(switchback={"share": 0.5, "window_s": 10.0, "washout_s": 2.0, "min_windows": 3,
                                    "guard_requests": False}, clock=clock)
    while clock.t < 30.0:
        d = plain.decide("chat", [_worker(0)], alphas)
        clock.t += 1.0
        plain.record(d, 100, 0.0125 if d.gamma else 0.01, now=clock.t)
    assert not plain.guard.buckets


def test_engine_switched_windows_count_the_workers_step_tokens():
    # an engine-switched worker: windows are measured from their start (+ washout after a switch) and filled from
    # the worker's cumulative token counter, spread over the time between two readings; its first window (the
    # batch may still be filling) is not measured; a window closes once the counter was read past its end
    book = SwitchbackBook(0.5, 10.0, 2.0, seed=0, settle_s=100.0)
    book.open("w0", 0, "policy", 0.0, next_regime="off", engine=True)
    book.note_tokens("w0", 0.0, 0.0)
    book.note_tokens("w0", 8.0, 800.0)
    book.open("w0", 1, "off", 10.5, next_regime="off", engine=True)
    book.open("w0", 1, "off", 10.5).loads.append(40.0)
    book.note_tokens("w0", 11.0, 1100.0)  # 800 -> 1100 over 8-11 s: 100 in 11-12 (washout, 10-12 not measured)
    book.note_tokens("w0", 16.0, 1600.0)  # 100 a second over 12-16: 400 in window 1
    book.finish("w0", 1, 500, 0.01, 16.0)  # finished requests add nothing to an engine window
    book.close_all(16.0)
    assert book.windows("32-63") == []
    book.open("w0", 2, "off", 20.5, next_regime="policy", engine=True).loads.append(40.0)
    book.note_tokens("w0", 21.0, 2100.0)  # 100 a second: 400 in 16-20 for window 1, 100 in 20-21 for window 2
    book.close_all(21.0)  # window 1 is read past its end (20): closed, although its settle_s has not passed
    (w1,) = book.windows("32-63")
    assert (w1.start, w1.regime, w1.measure_from, w1.engine) == (10.0, "off", 12.0, True)
    assert w1.tokens == pytest.approx(800.0) and w1.throughput == pytest.approx(100.0)
    assert book.measured("w0", 2, 20.0)  # off after off: no washout
    book.note_tokens("w0", 25.0, 100.0)  # the counter went down (a restart): a new baseline, 21-25 counts nothing
    book.note_tokens("w0", 30.0, 600.0)
    book.close_all(30.0)
    assert [w.tokens for w in book.windows("32-63")] == [pytest.approx(800.0), pytest.approx(100.0 + 500.0)]


def test_engine_switch_caps_the_running_requests_and_keeps_the_proposer():
    clock = _Clock()
    pol = _experiment(switchback={"share": 0.5, "window_s": 10.0, "washout_s": 1.0, "order": "abba",
                                  "guard": False}, clock=clock)
    pol.engine_switch("w0")
    alphas = AlphaTable()
    regime = {i: pol.windows.regime("w0", i) for i in range(8)}
    off = next(i for i in range(8) if regime[i] == "off")
    on = next(i for i in range(8) if regime[i] == "policy")
    clock.t = off * 10.0 + 0.5
    assert pol.engine_tick("w0", clock.t, 0.0) == 0  # an off window: cap 0 for every running request
    d = pol.decide("chat", [_worker(8)], alphas)
    assert d.proposer == "ngram" and d.gamma == 4  # the engine keeps it off now and lets it draft later
    assert d.assignment.regime == "off" and d.assignment.group == CONTROL and "engine" in d.reason
    clock.t = on * 10.0 + 0.5
    assert pol.engine_tick("w0", clock.t, 100.0) is None  # a policy window: no cap
    e = pol.decide("chat", [_worker(8)], alphas)
    assert e.proposer == "ngram" and e.assignment.regime == "policy" and e.assignment.group == TREATED
    # d ran across the switch: no evidence for either regime; e ran inside its regime: one sample
    pol.record(d, 100, 0.01, now=clock.t + 1.0)
    pol.record(e, 100, 0.01, now=clock.t + 1.0)
    assert pol.regimes.count("8-15") == 1
    # a worker without the switch keeps the admission path: off at the decision
    pol.engine_switch("w0", False)
    clock.t = off * 10.0 + 0.5
    f = pol.decide("chat", [_worker(8)], alphas)
    assert f.proposer == "none" and f.gamma == 0 and pol.engine_tick("w0", clock.t, 0.0) is None


def test_hedge_serves_the_fixed_control_plan_and_moves_to_it_while_the_policy_loses():
    """switchback.control "draft:3": the control windows run that plan for every request (also those the policy
    plans off); where the windows show the policy slower (0.8x), the guard serves the plan in all but `share` of
    the windows."""
    clock = _Clock()
    cfg = parse_config({"policy": {"kind": "static", "proposer": "ngram", "gamma": 4, "switchback": {
        "share": 0.25, "window_s": 10.0, "washout_s": 2.0, "min_windows": 3, "control": "draft:3"}}})
    pol = build_policy(cfg.policy)
    pol.clock = clock
    alphas = AlphaTable()
    seen = []
    while clock.t < 600.0:
        d = pol.decide("chat", [_worker(40)], alphas)
        regime = d.assignment.regime
        assert (d.proposer, d.gamma) == (("draft", 3) if regime == "off" else ("ngram", 4))
        seen.append((bool(pol.guard.buckets), regime))
        clock.t += 1.0 if regime == "policy" else 0.8  # the fixed plan is faster
        pol.record(d, 100, 0.01, now=clock.t)
    rep = pol.report()
    assert rep["control"] == "draft:3" and rep["guard"]["buckets"] == ["32-63"]
    guarded = [r for g, r in seen if g]
    # once guarded, the plan runs in ~3/4 of the decisions (the policy keeps its share of windows as evidence)
    assert len(guarded) > 300 and sum(r == "off" for r in guarded) / len(guarded) > 0.65
    assert any(c["reason"] == "guard" for c in rep["changed"])


def test_hedge_control_plan_is_validated_and_falls_back_to_off_where_not_offered():
    with pytest.raises(ConfigError) as e:
        parse_config({"policy": {"kind": "goodput", "switchback": {"control": "turbo:3"}}}, "pol.yaml")
    assert e.value.key == "policy.switchback" and "control" in str(e.value)
    cfg = parse_config({"policy": {"kind": "static", "proposer": "ngram", "gamma": 4, "switchback": {
        "share": 0.5, "window_s": 10.0, "washout_s": 2.0, "control": "eagle:3"}}})
    pol = build_policy(cfg.policy)
    clock = _Clock()
    pol.clock = clock
    regimes = set()
    for t in range(40):  # w0 offers ngram and draft only: its control windows run plain decoding
        clock.t = 5.0 * t
        d = pol.decide("chat", [_worker(1)], AlphaTable())
        regimes.add(d.assignment.regime)
        if d.assignment.regime == "off":
            assert d.proposer == "none" and d.gamma == 0
    assert regimes == {"off", "policy"}
