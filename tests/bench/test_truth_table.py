"""The truth-table reference of benchmarks/sim_schedules.py: its caps are the cost model's best gamma for the true
acceptance at every level, and at a steady load its schedule and its admission-only form run the same steps."""

from __future__ import annotations

import dataclasses

import pytest

from adaptspec.bench.simulator import ProfileCost, SimConfig, simulate
from adaptspec.bench.truth_table import TruthTable
from adaptspec.bench.workloads import AlphaModel, ClassSpec, Workload
from adaptspec.control import costmodel
from adaptspec.control.profiles import load_profile
from adaptspec.control.schedule import cap_at, levels

PROFILE = "h200-llama3-70b"
WL = Workload("w", {"code": 1.0, "chat": 1.0},
              specs={c: ClassSpec(64, 0.3, 400, 0.4, output_max=1200) for c in ("code", "chat")})


@pytest.fixture(scope="module")
def cost():
    return ProfileCost(load_profile(PROFILE))


def test_caps_are_the_best_gamma_for_the_true_acceptance(cost):
    truth = AlphaModel(aliases=cost.truth_aliases())
    table = TruthTable(cost.profile, truth, ("none", "ngram", "eagle"), schedule=True)
    proposer, sched = table.table("code")
    alone = {p: costmodel.best_gamma(cost.profile, p, tuple(truth.curve(p, "code", 8)), 1.0, 8).goodput
             for p in ("ngram", "eagle")}
    assert proposer == max(alone, key=alone.get) == "eagle"
    curve = tuple(truth.curve("eagle", "code", 8))
    for b in levels(512):
        plan = costmodel.best_gamma(cost.profile, "eagle", curve, float(b), 8)
        assert cap_at(sched, b) == (plan.gamma if plan.speedup >= 1.0 else 0), b
    assert cap_at(sched, 1) > cap_at(sched, 64) > cap_at(sched, 1 << 20) == 0


def test_admission_form_decides_the_cap_at_the_batch_it_joins(cost):
    truth = AlphaModel(aliases=cost.truth_aliases())
    adm = TruthTable(cost.profile, truth, ("eagle",), schedule=False)
    sched = TruthTable(cost.profile, truth, ("eagle",), schedule=True)
    w = cost.worker(max_gamma=8, profile=PROFILE)
    _, rows = adm.table("chat")
    for load in (0, 30, 63, 4000):
        ws = [dataclasses.replace(w, running=float(load))]
        a, s = adm.decide("chat", ws, None), sched.decide("chat", ws, None)
        assert a.schedule is None and a.gamma == s.gamma == cap_at(rows, load + 1)
        assert s.schedule == rows and s.max_k == max(c for _, c in rows)
        assert (a.proposer == "none") == (a.gamma == 0)


def test_at_a_steady_load_schedules_and_admission_only_run_the_same_steps(cost):
    """Every request joins a batch of exactly c and runs in one of c: the cap at admission is the cap of every
    step, so the two forms give the same tokens at the same times; a ramp makes them differ."""
    truth = AlphaModel(aliases=cost.truth_aliases())
    w = cost.worker(max_gamma=8, profile=PROFILE)

    def run(schedule: bool, **load) -> dict:
        table = TruthTable(cost.profile, truth, w.proposers, schedule)
        return simulate(table, cost, WL, SimConfig(requests=80, warmup=8, **load), truth=truth, worker=w).row()

    for c in (4, 48):
        a, s = run(False, concurrency=c), run(True, concurrency=c)
        assert a["output_tokens_per_s"] == s["output_tokens_per_s"] and a["steps_by_gamma"] == s["steps_by_gamma"]
    ramp = {"concurrency": None, "ramp": ((5.0, 4), (5.0, 64))}
    a, s = run(False, **ramp), run(True, **ramp)
    assert a["steps_by_gamma"] != s["steps_by_gamma"]
