"""Per-step plans in trace replay (adaptspec/bench/stepwise.py): the causal hybrid and `oracle-step`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptspec.bench.simulator import ProfileCost, parse_policy, sweep
from adaptspec.bench.stepwise import HybridRule, hybrid_plan, mean_emitted, step_bound_plan
from adaptspec.bench.traces import TraceRequest, TraceWorkload, dump, synthesize
from adaptspec.bench.workloads import get_workload
from adaptspec.cli import main
from adaptspec.control.profiles import load_profile

PROFILE = "benchmarks/profiles/standin-8b-eagle-heavy.yaml"
PROPOSERS = ["ngram", "eagle", "hybrid"]


def _random_runs(rng, n, max_k=8):
    """Lookup runs with copied stretches (consistent: a draft runs to the stretch's end) and lucky hits."""
    run = np.where(rng.random(n) < 0.3, rng.integers(2, 4, n), 1)
    i = int(rng.integers(0, 10))
    while i < n:
        end = min(i + int(rng.integers(5, 40)), n)
        run[i:end] = 1 + np.minimum(end - np.arange(i, end), max_k)
        i = end + int(rng.integers(5, 40))
    return np.minimum(run, n - np.arange(n))


def _alternating(rid: str, n: int = 400, stretch: int = 40, max_k: int = 8) -> TraceRequest:
    """Copied stretches (lookup drafts to the stretch's end, the head accepts ~2) alternating with novel text
    (lookup finds nothing, the head accepts 4 a step)."""
    ngram, eagle = [], []
    for i in range(n):
        k = i // stretch
        if k % 2 == 0:
            end = (k + 1) * stretch
            ngram.append(1 + min(end - i, max_k))
            eagle.append(3)
        else:
            ngram.append(1)
            eagle.append(5)
    cap = [min(max_k + 1, n - i) for i in range(n)]
    return TraceRequest(rid, "code", 200, n, max_k, {"ngram": tuple(min(a, c) for a, c in zip(ngram, cap, strict=True)),
                                                     "eagle": tuple(min(a, c) for a, c in zip(eagle, cap, strict=True))})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rule_never_reads_run_p_or_later(seed):
    rng = np.random.default_rng(seed)
    n = 300
    runs = _random_runs(rng, n)
    rule = HybridRule()
    lk = rule.lookup_lengths(runs, 8)
    assert (lk > 0).any() and (lk == 0).any()  # both sources are used
    for p in rng.integers(1, n, 25):
        p = int(p)
        future = runs.copy()
        future[p:] = rng.integers(1, 10, n - p)  # anything at positions >= p
        assert np.array_equal(rule.lookup_lengths(future, 8)[: p + 1], lk[: p + 1])
        # earlier runs only as far as they are observable at p: min(run[q], p - q + 1)
        hidden = runs.copy()
        q = np.arange(p)
        seen = np.minimum(runs[:p], p - q + 1)
        more = rng.integers(0, 6, p)
        hidden[:p] = np.where(seen == p - q + 1, seen + more, seen)  # a run that held to p may be any longer
        assert rule.lookup_lengths(hidden, 8)[p] == lk[p]
    # the head's runs are never read: the plan's sources and lengths do not move with them
    head = rng.integers(1, 10, n)
    req = TraceRequest("r", "code", 50, n, 8, {"ngram": tuple(int(x) for x in runs), "eagle": tuple(int(x) for x in head)})
    other = TraceRequest("r", "code", 50, n, 8, {"ngram": req.accept_runs["ngram"],
                                                 "eagle": tuple(int(x) for x in rng.integers(1, 10, n))})
    a, b = hybrid_plan(req, "eagle", 8, 8, rule), hybrid_plan(other, "eagle", 8, 8, rule)
    assert a.source == b.source and a.length == b.length


def test_rule_parameters_follow_the_match():
    runs = [1, 1, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 1]  # a copied stretch from position 2 to 10
    m = HybridRule().matches(runs)
    assert list(m[:6]) == [0, 0, 0, 1, 2, 3]
    lk = HybridRule(min_match=2, multiplier=2.0).lookup_lengths(runs, 8)
    assert list(lk[:7]) == [0, 0, 0, 0, 5, 7, 8]  # floor(2 m) + 1, capped at 8
    assert HybridRule(lookup_cap=4).lookup_lengths(runs, 8).max() == 4
    with pytest.raises(ValueError):
        HybridRule(min_match=0)


def _rows(reqs, policies, concurrency=(1,), **kw):
    wl = TraceWorkload(reqs, order="file")
    return sweep([parse_policy(p, PROFILE) for p in policies], PROFILE, wl, [("concurrency", c) for c in concurrency],
                 requests=kw.pop("requests", 8), warmup=kw.pop("warmup", 2), proposers=PROPOSERS, progress=False,
                 calibrate=False, **kw)


def test_hybrid_beats_both_parts_on_alternating_text():
    reqs = [_alternating(f"a{i}", stretch=30 + 10 * i) for i in range(4)]
    rows = {r["policy"]: r for r in _rows(reqs, ["static:ngram:8", "static:eagle:8", "static:hybrid:8"])}
    hyb = rows["static:hybrid:8"]
    for other in ("static:ngram:8", "static:eagle:8"):
        assert hyb["tokens_per_step"] > rows[other]["tokens_per_step"]
        assert hyb["output_tokens_per_s"] > 1.05 * rows[other]["output_tokens_per_s"]
    assert 0.2 < hyb["hybrid_lookup_steps_share"] < 0.8
    assert hyb["hybrid_lookup_steps_share"] + hyb["hybrid_head_steps_share"] == pytest.approx(1.0)
    assert rows["static:eagle:8"]["hybrid_lookup_steps_share"] is None


@pytest.mark.parametrize("name", ["alternating", "code", "mixed"])
def test_oracle_step_bounds_oracle_bounds_statics(name):
    if name == "alternating":
        reqs = [_alternating(f"a{i}", n=200, stretch=20 + 7 * i) for i in range(6)]
    else:
        reqs = synthesize(get_workload(name), 10, seed=3, max_k=8, proposers=("ngram", "eagle"))
    statics = ["off", "static:ngram:3", "static:ngram:8", "static:eagle:3", "static:eagle:8", "static:hybrid:8"]
    rows = {r["policy"]: r["output_tokens_per_s"] for r in
            _rows(reqs, [*statics, "oracle", "oracle-step"], requests=len(reqs), warmup=0)}
    assert rows["oracle-step"] >= rows["oracle"] * (1 - 1e-9)
    for s in statics[:-1]:  # per-request plans: the per-request oracle bounds them at batch 1
        assert rows["oracle"] >= rows[s] * (1 - 1e-6), s
    assert rows["oracle-step"] >= rows["static:hybrid:8"] * (1 - 1e-9)  # a per-step plan


def test_step_bound_plan_is_exact_on_a_small_case():
    cost = ProfileCost(load_profile(PROFILE))
    req = _alternating("x", n=60, stretch=15)
    plan, seconds = step_bound_plan(req, ("ngram", "eagle"), 8, cost)
    assert seconds > 0 and mean_emitted(plan) > mean_emitted(hybrid_plan(req, "eagle", 8, 8, HybridRule()))


def test_hybrid_price_matches_the_replay_at_batch_1():
    cost = ProfileCost(load_profile(PROFILE))
    assert cost.hybrid_head == "eagle"
    opt = cost.hybrid_option()
    assert opt.kind == "hybrid" and opt.parts == ("ngram", "eagle")
    target = cost.profile.target
    kv, g, verify = 1500.0, 8, target.time(9, 1500.0)
    lookup = cost.draft_time("ngram", np.array([g]), kv, verify_s=verify)
    head = cost.draft_time("eagle", np.array([g]), kv, verify_s=verify)
    for pi in (0.0, 0.3, 1.0):  # the replay pays the lookup every step and the head on (1 - pi) of them
        assert opt.time(g, 1, kv, target, verify_s=verify, lookup_rate=pi) == pytest.approx(lookup + (1 - pi) * head)


def test_static_hybrid_through_the_cli(tmp_path, capsys):
    reqs = [_alternating(f"a{i}", n=120, stretch=20) for i in range(3)]
    reqs += synthesize(get_workload("chat"), 6, seed=1, max_k=8, proposers=("ngram",))  # no head runs: not offered
    path = dump(reqs, tmp_path / "t.jsonl")
    out = tmp_path / "rows.json"
    args = ["simulate", "--trace", str(path), "--profile", PROFILE, "--concurrency", "1,4", "--requests", "9",
            "--warmup", "2", "--no-progress", "--json", str(out)]
    assert main([*args, "--proposers", "ngram,eagle,hybrid", "--policies", "static:eagle:8,static:hybrid:8,oracle-step",
                 "--hybrid-rule", "min_match=2,multiplier=2,lookup_cap=8"]) == 0
    rows = {(r["policy"], r["concurrency"]): r for r in json.loads(out.read_text())}
    for c in (1, 4):
        hyb = rows[("static:hybrid:8", c)]
        assert 0 < hyb["proposer_mix"]["hybrid"] < 1 and hyb["hybrid_requests"] > 0
        assert 0 < hyb["hybrid_lookup_steps_share"] < 1
        assert rows[("oracle-step", c)]["output_tokens_per_s"] > 0
    capsys.readouterr()
    assert main([*args, "--proposers", "ngram,eagle", "--policies", "static:hybrid:8"]) == 2
    assert "add hybrid to --proposers" in capsys.readouterr().err
    assert main(["simulate", "--profile", PROFILE, "--proposers", "ngram,eagle,hybrid", "--policies", "off",
                 "--requests", "4", "--no-progress"]) == 2
    assert "acceptance traces" in capsys.readouterr().err
