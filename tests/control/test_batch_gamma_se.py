"""The batch's shared gamma under the one-standard-error rule (`policy.gamma_se`, control/policies/batchplan.py
`_group_gammas`): the shorter of the best gamma over the worker's mix at the posterior means and at gamma_se
standard errors lower; a prior alone shortens nothing, and `gamma_se: 0` is the best at the means."""

from __future__ import annotations

import pytest

from adaptspec.control.config import parse_config
from adaptspec.control.policies.batchplan import _argmax, _lowered
from adaptspec.control.policy import build_policy
from adaptspec.control.types import AlphaEstimate, WorkerState


class Flat:
    """One alpha for every key, with the given std and evidence (drafted tokens)."""

    def __init__(self, alpha: float, std: float, n: float) -> None:
        self.est = AlphaEstimate(alpha, std, n)

    def get(self, worker, proposer, content_class):
        return self.est


def test_lowered_shifts_measured_rates_only():
    assert _lowered(AlphaEstimate(0.7, 0.05, 100.0), 1.0) == pytest.approx(0.65)
    assert _lowered(AlphaEstimate(0.7, 0.05, 100.0, per_position=(0.8, 0.6, 0.02)), 2.0) == \
        pytest.approx((0.7, 0.5, 0.0))
    assert _lowered(AlphaEstimate(0.7, 0.05, 0.0), 1.0) == 0.7  # a prior is left as it is
    assert _lowered(AlphaEstimate(0.7, 0.05, 100.0), 0.0) == 0.7
    assert _argmax([1.0, 3.0, 3.0, 2.0]) == 2  # 1-based, the first of equals


def _plan(gamma_se: float, alphas) -> int:
    pol = build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0, "gamma_se": gamma_se}}).policy)
    w = WorkerState("w", proposers=("eagle",), max_gamma=8, profile="cpu-tiny", running=15)
    for _ in range(16):
        pol._note(w, "chat", alphas)
    prof = pol.worker_profile(w)
    return pol._group_gammas(w, prof, ("eagle",), alphas, 16.0, 8, hope=False)[0]["eagle"]


@pytest.mark.parametrize("alpha", [0.9, 0.95])  # gamma >= 3 on cpu-tiny at batch 16
def test_uncertain_estimates_shorten_the_batch_gamma_and_certain_ones_do_not(alpha):
    best = _plan(0.0, Flat(alpha, 0.05, 1e3))
    assert best >= 3
    # certain estimates: the argmax, whatever gamma_se
    assert _plan(1.0, Flat(alpha, 1e-6, 1e6)) == best
    # uncertain ones (a 5% standard error): shorter, and never longer with more doubt
    loose = _plan(1.0, Flat(alpha, 0.05 * alpha, 1e3))
    assert 1 <= loose < best
    assert _plan(2.0, Flat(alpha, 0.05 * alpha, 1e3)) <= loose
    # a prior alone (no evidence) shortens nothing, however wide it is
    assert _plan(1.0, Flat(alpha, 0.1, 0.0)) == _plan(0.0, Flat(alpha, 0.1, 0.0))


def test_the_config_bounds_gamma_se():
    with pytest.raises(Exception, match="gamma_se"):
        parse_config({"policy": {"kind": "goodput", "gamma_se": -1}})
