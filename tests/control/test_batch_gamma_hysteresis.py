"""The batch-wide gamma of a worker's draft model / head is sticky: a step runs max(gamma) passes for every row, so
requests admitted under two plans a second apart cost the whole running batch. A new plan replaces the worker's
last one only when it is better by batchplan._STICKY of the mix's goodput at the batch being planned.

The reference is the closed form of costmodel.evaluate: one class in the mix, so the mix's total is the class's
goodput at the gamma."""

from __future__ import annotations

import pytest

from adaptspec.control import costmodel
from adaptspec.control.config import parse_config
from adaptspec.control.policies.batchplan import _STICKY
from adaptspec.control.policy import build_policy
from adaptspec.control.profiles import load_profile
from adaptspec.control.types import AlphaEstimate, WorkerState

TINY = load_profile("cpu-tiny")


class Fixed:
    """One alpha for the head on every class, plenty of evidence; nothing for the others."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def get(self, worker, proposer, content_class):
        return AlphaEstimate(self.alpha if proposer == "eagle" else 0.0, 0.0, 1e6)


def fresh():
    return build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)


def gamma_at(pol, alpha: float, batch: float) -> int:
    w = WorkerState("w", proposers=("eagle",), max_gamma=8, profile="cpu-tiny", running=batch - 1.0)
    return pol.batch_gamma(w, pol.worker_profile(w), "eagle", Fixed(alpha), batch, 8, content_class="code")


def goodput(alpha: float, gamma: int, batch: float) -> float:
    return costmodel.evaluate(TINY, "eagle", alpha, gamma, batch).goodput


def close_pairs():
    """(alpha, batch a, batch b) where a fresh plan differs between two batches of one half-octave step."""
    found = []
    for i in range(40, 96):
        alpha = i / 100.0
        for a, b in ((11.0, 16.0), (6.0, 8.0), (23.0, 32.0)):
            ga, gb = gamma_at(fresh(), alpha, a), gamma_at(fresh(), alpha, b)
            if ga and gb and ga != gb:
                found.append((alpha, a, b, ga, gb))
    return found


def test_a_batch_that_moves_by_a_half_octave_keeps_its_gamma_when_the_new_one_gains_little():
    pairs = close_pairs()
    assert len(pairs) >= 3  # the sweep finds boundaries to test (the head's best gamma falls with the batch)
    kept = 0
    for alpha, a, b, ga, gb in pairs:
        pol = fresh()
        assert gamma_at(pol, alpha, a) == ga
        got = gamma_at(pol, alpha, b)
        gain = goodput(alpha, gb, b) / goodput(alpha, ga, b)
        assert gain >= 1.0 - 1e-9  # the fresh plan is the best at b
        if gain <= 1.0 + _STICKY:
            assert got == ga, (alpha, a, b)  # within the hysteresis: the running batch's gamma stays
            kept += 1
        else:
            assert got == gb, (alpha, a, b)  # better by more than the hysteresis: the new plan
    assert kept >= 1


@pytest.mark.parametrize("alpha", [0.5, 0.8])
def test_a_large_change_of_load_replans(alpha):
    """From batch 2 to batch 256 the head's best gamma falls far (or it is dropped): the incumbent loses by more
    than the hysteresis and gives way; what is kept is never worse than the fresh plan by more than _STICKY."""
    pol = fresh()
    low = gamma_at(pol, alpha, 2.0)
    high = gamma_at(pol, alpha, 256.0)
    want = gamma_at(fresh(), alpha, 256.0)
    assert low > want
    if want == 0:
        assert high == 0
    else:
        assert goodput(alpha, high, 256.0) * (1.0 + _STICKY) >= goodput(alpha, want, 256.0)
        assert high < low
