"""A reference controller for the gamma-schedule benchmark: the cost model's best plan for the TRUE acceptance.

Per content class it takes the proposer with the best goodput alone (batch 1) under the simulator's ground-truth
acceptance, and that proposer's best gamma at every batch level of control/schedule.py (0 where speculating
does not beat plain decoding): the schedule an omniscient per-step controller would send. With
`schedule=False` it applies the same table at admission only (the cap at the batch the request joins, fixed
for the request's life). The ratio of the two on a load pattern is about what in-flight schedules can add
there with perfect estimates; it prices each class as if the whole batch ran its plan, with the profile's
context length, so it is a reference, not a strict bound. Used by benchmarks/sim_schedules.py.

    table = TruthTable(profile, AlphaModel(), ("ngram", "eagle"), schedule=True)
    simulate(table, ProfileCost(profile), workload, config, truth=AlphaModel())
"""

from __future__ import annotations

from collections.abc import Sequence

from adaptspec.bench.workloads import AlphaModel
from adaptspec.control import costmodel
from adaptspec.control.profiles import Profile
from adaptspec.control.schedule import ANY_BATCH, Schedule, cap_at, compress, levels, max_cap
from adaptspec.control.types import Decision, WorkerState


class TruthTable:
    """Per class: (proposer, schedule) from the true acceptance; decides at admission (see the module doc)."""

    name = "truth-table"

    def __init__(self, profile: Profile, truth: AlphaModel, proposers: tuple[str, ...], schedule: bool,
                 max_gamma: int = 8) -> None:
        self.profile, self.truth, self.schedule, self.max_gamma = profile, truth, schedule, max_gamma
        self.proposers = tuple(p for p in proposers if p != "none")
        self._tables: dict[str, tuple[str, Schedule]] = {}

    def table(self, content_class: str) -> tuple[str, Schedule]:
        """The class's proposer and its best gamma at every batch level (compressed), computed once."""
        got = self._tables.get(content_class)
        if got is None:
            curve = {p: tuple(self.truth.curve(p, content_class, self.max_gamma)) for p in self.proposers}
            best = {p: costmodel.best_gamma(self.profile, p, curve[p], 1.0, self.max_gamma) for p in self.proposers}
            p = max(self.proposers, key=lambda q: best[q].goodput)
            rows = []
            for b in levels():
                plan = costmodel.best_gamma(self.profile, p, curve[p], float(b), self.max_gamma)
                rows.append((b, plan.gamma if plan.speedup >= 1.0 else 0))
            got = self._tables[content_class] = (p, compress([*rows, (ANY_BATCH, rows[-1][1])]))
        return got

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: object) -> Decision:
        w = workers[0]
        proposer, sched = self.table(content_class)
        g = cap_at(sched, int(w.load) + 1)
        if self.schedule and max_cap(sched) > 0:
            return Decision(w.name, proposer, g, content_class, self.name, "table", schedule=sched)
        return Decision(w.name, proposer if g else "none", g, content_class, self.name, "table")
