"""A goodput schedule's cap at every batch level is the cost model's best gamma at that very batch.

The caps are recomputed here from `costmodel.evaluate` alone (goodput = E / (draft + verify) for every gamma,
argmax, off unless it beats plain decoding by the margin) and compared level by level. A draft model / EAGLE
head shares its passes with the whole batch, so its caps come from the policy's batch-wide gamma: that one is
memoised per half-octave of batch for admissions, and a schedule priced through that memo took, at each of its
12%-apart levels, the gamma of whatever batch first priced the half-octave (one gamma too high at the top).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from adaptspec.bench.simulator import ProfileCost
from adaptspec.control import costmodel
from adaptspec.control.config import GoodputPolicy
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy, estimate
from adaptspec.control.profiles import load_profile
from adaptspec.control.schedule import cap_at, levels

PROFILE = "h200-llama3-70b"


def _expected_cap(prof, proposer: str, alpha, batch: float, margin: float, max_gamma: int) -> int:
    """argmax over gamma of the request's goodput at `batch` (lowest gamma on ties), 0 unless >= margin x off."""
    plans = [costmodel.evaluate(prof, proposer, alpha, g, batch) for g in range(1, max_gamma + 1)]
    best = max(plans, key=lambda p: (p.goodput, -p.gamma))
    return best.gamma if best.speedup >= margin else 0


@pytest.mark.parametrize("proposer", ["eagle", "draft", "ngram"])
def test_every_level_caps_at_the_best_gamma_of_its_own_batch(proposer):
    prof = load_profile(PROFILE)
    worker = dataclasses.replace(ProfileCost(prof).worker(max_gamma=8, profile=PROFILE), proposers=(proposer,))
    cfg = GoodputPolicy(kind="goodput", default_profile=PROFILE, schedule=True, explore=0.0)
    pol, alphas = build_policy(cfg), AlphaTable()
    d = pol.decide("code", [worker], alphas)  # admitted alone: only level 1 is pinned to the admission plan
    assert d.schedule is not None and d.proposer == proposer
    est = estimate(alphas, worker.name, proposer, "code")
    alpha = tuple(round(a, 2) for a in est.per_position) if est.per_position else round(est.mean, 3)
    expected = {b: _expected_cap(prof, proposer, alpha, float(b), cfg.margin, 8) for b in levels(256) if b >= 2}
    got = {b: cap_at(d.schedule, b) for b in expected}
    assert got == expected
    # the grid is fine enough to matter: the best gamma moves within some half-octave of batch sizes
    octaves: dict[int, set[int]] = {}
    for b, g in expected.items():
        octaves.setdefault(round(2.0 * math.log2(b)), set()).add(g)
    assert any(len(gs) > 1 for gs in octaves.values())
    # and it falls from batch 2 to batch 256 on a 70B GPU profile
    assert expected[2] > expected[64] >= expected[256]
