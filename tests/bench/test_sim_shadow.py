"""Shadow n-gram evidence in the simulator: a traced request served without lookup teaches the lookup's key
from its recorded runs (what the reference worker reports and the proxy counts), exactly as much as the same
request served with lookup would have; `SimConfig(shadow=False)` turns it off."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adaptspec.bench.simulator import ProfileCost, SimConfig, simulate
from adaptspec.bench.traces import TraceRequest, TraceWorkload
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.profiles import load_profile
from adaptspec.control.shadow import walk_runs
from adaptspec.control.types import Decision

NGRAM = (9, 3, 1, 2, 4, 1, 1, 2, 1, 1, 6, 1, 1, 1, 3, 1)
REQ = TraceRequest("r", "chat", 4, len(NGRAM), 8, {"ngram": NGRAM, "draft": (2,) * len(NGRAM)})


class Fixed:
    def __init__(self, proposer: str, gamma: int) -> None:
        self.name, self.proposer, self.gamma = "fixed", proposer, gamma

    def decide(self, content_class, workers, alphas) -> Decision:
        return Decision(workers[0].name, self.proposer, self.gamma, content_class, self.name, "fixed")


def run(proposer: str, gamma: int, shadow: bool = True) -> AlphaTable:
    cost = ProfileCost(load_profile("cpu-tiny"))
    table = AlphaTable()
    cfg = SimConfig(concurrency=1, requests=3, warmup=0, shadow=shadow)
    worker = replace(cost.worker(), proposers=("ngram", "draft"))
    simulate(Fixed(proposer, gamma), cost, TraceWorkload([REQ]), cfg, alphas=table, worker=worker)
    return table


@pytest.mark.parametrize("proposer", ["none", "draft"])
def test_requests_without_lookup_teach_its_key_as_lookup_requests_would(proposer):
    shadowed = run(proposer, 4)
    ran = run("ngram", 8, shadow=False)  # the same request served with lookup at the walk's gamma
    est, want = shadowed.get("sim0", "ngram", "chat"), ran.get("sim0", "ngram", "chat")
    assert est.n > 0
    assert est.mean == pytest.approx(want.mean, rel=1e-9)
    assert est.per_position == pytest.approx(want.per_position, rel=1e-9)
    # three requests of the walk's counts
    s = walk_runs(NGRAM, len(NGRAM), 8)
    assert est.n == pytest.approx(3 * sum(s.tried_per_position), rel=0.05)  # (discounting by tokens)


def test_shadow_off_leaves_the_lookup_key_alone():
    assert run("none", 0, shadow=False).get("sim0", "ngram", "chat").n == 0
    assert run("draft", 4, shadow=False).get("sim0", "ngram", "chat").n == 0
