"""The peer policies (control/peers/): each anchor's rule on hand-computed cases, and every shipped
policies/peers/*.yaml through `adaptspec simulate` (synthetic and --trace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptspec.bench.traces import dump, synthesize
from adaptspec.bench.workloads import get_workload
from adaptspec.cli import main
from adaptspec.control import costmodel
from adaptspec.control.alpha import AlphaTable
from adaptspec.control.config import load_config, parse_config
from adaptspec.control.peers import PEER_KINDS
from adaptspec.control.peers._common import accepted_per_step, pooled, tier_schedule
from adaptspec.control.peers.sglang_adaptive import Tier
from adaptspec.control.policy import build_policy
from adaptspec.control.profiles import load_profile
from adaptspec.control.schedule import ANY_BATCH, cap_at
from adaptspec.control.types import AlphaEstimate, WorkerState
from adaptspec.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PEER_FILES = sorted((ROOT / "policies" / "peers").glob("*.yaml"))
PROFILE = str(ROOT / "benchmarks" / "profiles" / "standin-8b-eagle-heavy.yaml")


def worker(load: float = 0.0, proposers=("ngram", "eagle"), profile: str | None = PROFILE) -> WorkerState:
    return WorkerState("w", proposers=proposers, running=load, profile=profile)


def policy(kind: str, **kw):
    return build_policy(parse_config({"policy": {"kind": kind, **kw}}).policy)


def table(alpha: float, proposer: str = "eagle", tokens: int = 40_000, classes=("chat",)) -> AlphaTable:
    """A table whose (w, proposer, class) keys saw `tokens` drafted tokens accepted at rate `alpha`."""
    t = AlphaTable(half_life_tokens=None, half_life_s=None)
    for c in classes:
        t.observe("w", proposer, c, tokens, alpha * tokens, now=0.0)
    return t


# -- shared pieces -------------------------------------------------------------------------------------------
def test_every_peer_kind_has_a_policy_file_that_builds():
    kinds = {load_config(f).policy.kind for f in PEER_FILES}
    assert kinds == set(PEER_KINDS) and len(PEER_KINDS) >= 5
    for f in PEER_FILES:
        assert build_policy(load_config(f).policy).decide("chat", [worker()], AlphaTable()).worker == "w"


def test_pooled_estimate_weights_classes_by_evidence():
    t = AlphaTable(half_life_tokens=None, half_life_s=None, prior_strength=1e-9)
    t.observe("w", "eagle", "code", 3000, 2400, now=0.0)  # 0.8
    t.observe("w", "eagle", "chat", 1000, 400, now=0.0)   # 0.4
    est = pooled(t, "w", "eagle")
    assert est.n == pytest.approx(4000, rel=1e-6)
    assert est.mean == pytest.approx((3000 * 0.8 + 1000 * 0.4) / 4000, abs=1e-6)


def test_accepted_per_step_is_the_truncated_geometric_sum():
    est = AlphaEstimate(0.6, 0.0, 100.0)
    assert accepted_per_step(est, 3) == pytest.approx(0.6 + 0.36 + 0.216)
    assert accepted_per_step(AlphaEstimate(0.6, 0.0, 100.0, propose_rate=0.5), 1) == pytest.approx(0.3)
    assert accepted_per_step(est, 0) == 0.0


def test_tier_schedule_covers_each_tier_up_to_the_next():
    sched = tier_schedule([(1, 3), (8, 1), (32, 1), (64, 0)])
    assert sched == ((7, 3), (63, 1), (ANY_BATCH, 0))
    assert [cap_at(sched, b) for b in (1, 7, 8, 31, 32, 63, 64, 500)] == [3, 3, 1, 1, 1, 1, 0, 0]


# -- SGLang adaptive ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("steps, accepted, want", [
    (3, 2.51, 5),   # > 3 - 0.5: one step up ...
    (3, 4.6, 7),    # ... and on while above each rise threshold (5 - 0.5 = 4.5)
    (3, 2.5, 3),    # not above 2.5: stays
    (3, 0.26, 3),   # above the drop threshold 1 - 0.5 - 0.25 = 0.25: stays
    (3, 0.25, 1),   # at it: down
    (7, 0.1, 1),    # down through 5 and 3 to the floor
])
def test_sglang_tier_moves_like_adaptive_step_slot(steps, accepted, want):
    tier = Tier((1, 3, 5, 7), 0.0, -0.25, steps)
    assert tier.recompute(accepted) == want


def test_sglang_tier_at_zero_probes_the_smallest_positive_depth_and_drops_back():
    tier = Tier((0, 1, 3), 0.0, 0.0, 0)
    assert tier.recompute(0.0) == 1
    tier.steps = 1
    assert tier.recompute(0.5) == 0   # at the zero candidate's threshold 0.5: off again
    assert tier.recompute(0.51) == 3  # above 1 - 0.5: up


def test_sglang_policy_warms_up_then_updates_every_fifth_request_of_a_tier():
    pol = policy("sglang_adaptive")
    high = table(0.97)  # accepted at depth 3: 0.97 + 0.94 + 0.91 = 2.82 > 2.5: tier 1 climbs
    depths = []
    for _ in range(25):
        d = pol.decide("chat", [worker(0)], high)
        depths.append(d.gamma)
    # the release's defaults: 10 warm-up batches, then a re-pick on the 15th, 20th, 25th
    assert depths[:14] == [3] * 14 and depths[14] == 5 and depths[19] == 7
    assert d.proposer == "eagle" and d.schedule == ((7, 7), (31, 3), (63, 1), (ANY_BATCH, 0))
    # a batch of 64 or more is tier 64 (candidates [0]): its requests run without speculation from admission on
    assert pol.decide("chat", [worker(100)], high).gamma == 0


def test_sglang_tiers_learn_from_the_observed_acceptance_only():
    low, pol = table(0.1), policy("sglang_adaptive")
    for _ in range(15):
        d = pol.decide("chat", [worker(0)], low)
    assert d.gamma == 1  # 0.1 + 0.01 + 0.001 <= 0.25: down to the floor


# -- TensorRT-LLM draft_len_schedule -----------------------------------------------------------------------
def test_trtllm_schedule_is_the_draft_len_schedule():
    pol = policy("draft_len_schedule")
    d = pol.decide("chat", [worker(0)], AlphaTable())
    assert d.schedule == ((4, 4), (8, 2), (32, 1)) and d.gamma == 4
    assert [cap_at(d.schedule, b) for b in (1, 4, 5, 8, 9, 32, 33)] == [4, 4, 2, 2, 1, 1, 0]
    assert pol.decide("chat", [worker(40)], AlphaTable()).gamma == 0  # joins a batch of 41: off


def test_trtllm_max_concurrency_cuts_the_schedule():
    pol = policy("draft_len_schedule", max_concurrency=8)
    assert pol.decide("chat", [worker(0)], AlphaTable()).schedule == ((4, 4), (8, 2))


def test_trtllm_acceptance_gate_turns_speculation_off_for_good():
    pol = policy("draft_len_schedule", acceptance_rate_window_size=100, acceptance_rate_threshold=0.3)
    assert pol.decide("chat", [worker(0)], table(0.9)).gamma == 4  # rate (0.9+0.81+0.73+0.66)/4 = 0.77
    low = table(0.3)  # rate (0.3 + 0.09 + 0.027 + 0.0081) / 4 = 0.106 < 0.3
    assert pol.decide("chat", [worker(0)], low).proposer == "none"
    assert pol.decide("chat", [worker(0)], table(0.9)).proposer == "none"  # permanently
    thin = policy("draft_len_schedule", acceptance_rate_window_size=100, acceptance_rate_threshold=0.3)
    assert thin.decide("chat", [worker(0)], table(0.3, tokens=399)).gamma == 4  # < 100 x 4 drafted: not yet


# -- vLLM batch cut-off ------------------------------------------------------------------------------------
def test_vllm_cutoff_is_off_from_the_threshold_on():
    pol = policy("batch_cutoff", num_speculative_tokens=5, disable_by_batch_size=4)
    d = pol.decide("chat", [worker(0)], AlphaTable())
    assert (d.proposer, d.gamma, d.schedule) == ("eagle", 5, ((3, 5),))
    assert pol.decide("chat", [worker(3)], AlphaTable()).gamma == 0  # the 4th request of the batch


# -- SmartSpec ---------------------------------------------------------------------------------------------
def test_smartspec_picks_the_goodput_argmax_at_every_batch():
    prof = load_profile(PROFILE)
    pol = policy("smartspec", max_gamma=8)
    for alpha in (0.3, 0.6, 0.9):
        d = pol.decide("chat", [worker(0)], table(alpha, tokens=10**6))
        mean = pooled(table(alpha, tokens=10**6), "w", "eagle").mean
        for b in (1, 16, 64, 200):
            plans = [costmodel.evaluate(prof, "eagle", mean, g, float(b)) for g in range(0, 9)]
            best = max(range(9), key=lambda g: (plans[g].goodput, -g))
            got = cap_at(d.schedule, b) if d.schedule else 0
            assert plans[got].goodput == pytest.approx(plans[best].goodput, rel=0.02), (alpha, b, got, best)


def test_smartspec_is_off_when_nothing_is_accepted():
    d = policy("smartspec").decide("chat", [worker(0)], table(0.0, tokens=10**6))
    assert (d.proposer, d.gamma, d.schedule) == ("none", 0, None)


# -- BanditSpec UCB ----------------------------------------------------------------------------------------
def test_banditspec_warms_up_round_robin_then_exploits():
    pol = policy("banditspec_ucb", proposers=["eagle"], gammas=[1, 2, 3, 4], per_arm_bonus=False)
    alphas = table(0.9)
    picks = [pol.decide("chat", [worker(0)], alphas).gamma for _ in range(12)]
    assert picks[:8] == [1, 2, 3, 4, 1, 2, 3, 4]
    # the release's bonus is the same for every arm: the best mean wins; at alpha 0.9 and batch 1 the longest
    prof = load_profile(PROFILE)
    best = max((1, 2, 3, 4), key=lambda g: costmodel.evaluate(prof, "eagle", 0.9, g, 1.0).goodput)
    assert picks[8:] == [best] * 4


def test_banditspec_per_arm_bonus_revisits_a_rarely_pulled_arm():
    a, b = ("eagle", 4), ("eagle", 3)
    for per_arm, want in ((True, b), (False, a)):
        pol = policy("banditspec_ucb", proposers=["eagle"], gammas=[3, 4], per_arm_bonus=per_arm)
        pol.mean, pol.pulls, pol.t = {a: 100.0, b: 99.0}, {a: 1000, b: 2}, 1002
        # per arm: b's bonus sqrt(6 ln 1002 / 2) = 4.56 beats a's 0.20 plus the 1.0 gap; as released (all pulls
        # in the denominator) the bonus is the same for both and the better mean wins
        assert pol.choose([a, b])[0] == want


def test_banditspec_skips_arms_the_worker_lacks():
    pol = policy("banditspec_ucb", proposers=["eagle", "ngram"])
    d = [pol.decide("chat", [worker(0, proposers=("ngram",))], AlphaTable()) for _ in range(8)]
    assert {x.proposer for x in d} == {"ngram"}


# -- config errors and the CLI ------------------------------------------------------------------------------
def test_peer_config_errors_name_file_key_and_value():
    with pytest.raises(ConfigError) as e:
        parse_config({"policy": {"kind": "batch_cutoff", "disable_by_batch_size": 0}}, "p.yaml")
    assert e.value.file == "p.yaml" and e.value.key == "policy.disable_by_batch_size" and e.value.value == 0
    with pytest.raises(ConfigError) as e:
        parse_config({"policy": {"kind": "banditspec_ucb", "gammas": [2, 2]}}, "p.yaml")
    assert e.value.key == "policy.gammas" and "distinct" in str(e.value)


@pytest.mark.parametrize("replay", [False, True], ids=["synthetic", "trace"])
def test_every_peer_file_runs_in_simulate(tmp_path, replay):
    args = ["simulate", "--profile", PROFILE, "--concurrency", "1,16", "--requests", "24", "--warmup", "8",
            "--policies", "off", "--no-progress", "--json", str(tmp_path / "rows.json")]
    if replay:
        trace = dump(synthesize(get_workload("code"), 40, seed=1, max_k=8, proposers=("ngram", "eagle")),
                     tmp_path / "t.jsonl")
        args += ["--trace", str(trace), "--proposers", "ngram,eagle"]
    for f in PEER_FILES:
        args += ["--policy-file", str(f)]
    assert main(args) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    by = {(r["policy"], r["concurrency"]): r for r in rows}
    assert {p for p, _ in by} == {"off", *(f.stem for f in PEER_FILES)}
    for f in PEER_FILES:  # every peer speculates at batch 1 (each anchor's rule does there)
        assert by[(f.stem, 1)]["speculation_share"] > 0.5, f.stem
    # the vLLM cut-off (4) is off at 16 clients; TensorRT-LLM's schedule drafts 1 token there
    assert by[("vllm-batch-cutoff", 16)]["output_tokens_per_s"] < by[("vllm-batch-cutoff", 1)]["output_tokens_per_s"] * 16
