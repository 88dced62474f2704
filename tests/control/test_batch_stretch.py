"""Batch-level exploration of the draft length at load (policies/batchplan.py `_group_gammas`, `stretch`): one class
mix version in `_STRETCH_EVERY` plans the kept model one token longer when the model prices that within
`_STRETCH_TOL` of its plan, so that the step-time fit sees a longer draft's price at that load; never at batch 1,
never in the ranking of models (`hope=False`), and never when the longer draft is priced clearly worse."""

from __future__ import annotations

import pytest

from adaptspec.control.config import parse_config
from adaptspec.control.policies import batchplan
from adaptspec.control.policy import build_policy
from adaptspec.control.types import AlphaEstimate, WorkerState


class Head:
    """The head's per-token alpha for every class, plenty of evidence; lookup hopeless."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def get(self, worker, proposer, content_class):
        return AlphaEstimate(self.alpha if proposer == "eagle" else 0.05, 0.0, 1e6)


def plans(alpha: float, batch: float, running: int):
    """The head's batch gamma (hopeful plan, ranking plan) at each mix version 0..8 of a chat-only worker, and the
    model's goodput curve over gamma at that batch (closed form: a one-class mix is worth n x the plan's goodput)."""
    pol = build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)
    w = WorkerState("w", proposers=("ngram", "eagle"), max_gamma=8, profile="cpu-tiny", running=running)
    prof, alphas = pol.worker_profile(w), Head(alpha)
    seen = {}
    for _ in range(32 * 9):
        pol._note(w, "chat")
        v = pol._mix_version.get("w", 0)
        if v not in seen:
            seen[v] = (pol._group_plan(w, prof, ("eagle",), alphas, batch, 8)[0]["eagle"],
                       pol._group_plan(w, prof, ("eagle",), alphas, batch, 8, hope=False)[0]["eagle"])
    curve = pol.cache.goodputs(prof, "eagle", alpha, batch, 8, 1.0, (w.prefill_ratio, w.prompt_tokens), None)
    return seen, curve


@pytest.mark.parametrize("alpha", [0.7, 0.8, 0.85, 0.9, 0.95])
def test_one_mix_version_in_eight_drafts_one_longer_where_the_model_prices_it_close(alpha):
    seen, curve = plans(alpha, 32.0, 31)
    assert set(range(9)) <= set(seen)
    g = max(range(1, 9), key=lambda k: curve[k - 1])  # the plan (the head beats plain here: gamma > 0)
    close = g < 8 and curve[g] >= (1.0 - batchplan._STRETCH_TOL) * curve[g - 1]
    for version, (hopeful, ranking) in seen.items():
        assert ranking == g  # the ranking of models never explores
        explores = version % batchplan._STRETCH_EVERY == batchplan._STRETCH_EVERY - 1
        assert hopeful == (g + 1 if explores and close else g), (version, curve)
    if alpha == 0.7:
        assert not close  # one case each way
    if alpha == 0.85:
        assert close


def test_no_exploration_at_batch_one():
    seen, curve = plans(0.85, 1.0, 0)
    g = max(range(1, 9), key=lambda k: curve[k - 1])
    assert {hopeful for hopeful, _ in seen.values()} == {g}
