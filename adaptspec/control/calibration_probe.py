"""Calibration probes: admissions with speculation toggled, so that a worker's step-time fit sees a drafted token's price.

A drafted token is a batched token with almost no KV: its price decides every speculation choice, but along the
policy's own traffic drafted tokens follow the batch and the online fit cannot tell them from the rest of it
(control/calibration.py, "The drafted token's price"). While a worker's fit asks for contrast
(`CalibratedCosts.probe`), among the admissions whose choice the price can flip (the chosen plan's expected speedup,
or the best missed plan's when the choice is plain, within a factor `near` (1.3) of 1: a 2x speculation is not decided
by a 15% error in a drafted token's price, and toggling it would cost the most), one block in every `every` is
toggled: a request the policy would draft for
runs without speculation, one it would run plain drafts with the best plan that missed the margin. A block is one
batch's worth of admissions (the running batch + 1), so the batch turns over into windows with and without
drafted tokens at the same load, which is the contrast the regression needs; the rest of the time the policy decides
as usual. Once the fit has the contrast it stops asking and no more probes are made. Deterministic (admission
counts, no clock or randomness): the simulator and the proxy probe alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from adaptspec.control.types import Decision, WorkerState


@dataclass
class _Blocks:
    """Per worker: admissions left in the current probe block, and admissions until the next one."""

    every: int = 8  # one block of probes in this many (a share of 1/every of the candidate admissions)
    # each block multiplies the next gap by this (1: a constant share); a probe that has not resolved what it asks
    # after a few blocks then costs ever less: blocks 1, 2, ... k take a share that falls as 1 / (every backoff^k)
    backoff: float = 1.0
    max_every: int = 1024  # ... down to one block in this many
    _left: dict[str, int] = field(default_factory=dict)
    _gap: dict[str, int] = field(default_factory=dict)
    _every: dict[str, float] = field(default_factory=dict)  # per worker: the current `every` (backed off)
    made: dict[str, int] = field(default_factory=dict)  # probes made per worker

    @property
    def probes(self) -> int:
        """Probes made, all workers."""
        return sum(self.made.values())

    def _tick(self, w: WorkerState) -> bool:
        """Whether this candidate admission to `w` is a probe (advances w's block counters). A block is one
        batch's worth of admissions (the running batch + 1), the gap (every - 1) blocks."""
        block = max(1, round(w.load + 1.0))
        if w.name not in self._gap:  # the gap first: at most 1/every of the admissions, however few there are
            self._left[w.name] = 0
            self._gap[w.name] = (self.every - 1) * block - 1
            return False
        left = self._left[w.name]
        if left > 0:
            self._left[w.name] = left - 1
            return True
        gap = self._gap[w.name]
        if gap > 0:
            self._gap[w.name] = gap - 1
            return False
        every = self._every.get(w.name, float(self.every))
        self._every[w.name] = every = min(float(self.max_every), every * self.backoff)
        self._left[w.name] = block - 1
        self._gap[w.name] = round((every - 1) * block)
        return True


@dataclass
class ContrastProbe(_Blocks):
    near: float = 1.3  # close: expected speedup within [1/near, near]

    def __post_init__(self) -> None:
        if self.every < 2 or self.near <= 1.0:
            raise ValueError(f"every must be >= 2 and near > 1, got {self.every}, {self.near}")

    def due(self, w: WorkerState) -> bool:
        """Whether this admission to `w` is a probe (advances w's block counters when its fit asks)."""
        costs = w.step_costs
        if costs is None or not costs.probe or not w.per_request:  # a fixed pool's speculation is not per request
            return False
        return self._tick(w)

    def apply(self, d: Decision, w: WorkerState, missed_proposer: str | None, missed_gamma: int,
              missed_speedup: float = 0.0) -> Decision:
        """`d` toggled when this admission is a probe: drafting -> plain; plain -> the missed plan, if any.
        Only admissions whose choice is close (see module doc) count towards the blocks."""
        speedup = d.expected_speedup if (d.gamma > 0 or d.schedule) else missed_speedup
        if not (1.0 / self.near <= speedup <= self.near) or not self.due(w):
            return d
        if d.gamma > 0 or d.schedule:
            self.made[w.name] = self.made.get(w.name, 0) + 1
            return replace(d, proposer="none", gamma=0, schedule=None, expected_speedup=1.0,
                           reason=f"{d.reason} [calibration probe: plain]")
        if missed_proposer is None or missed_gamma <= 0:
            return d
        self.made[w.name] = self.made.get(w.name, 0) + 1
        return replace(d, proposer=missed_proposer, gamma=missed_gamma,
                       reason=f"{d.reason} [calibration probe: {missed_proposer} g={missed_gamma}]")


@dataclass
class GammaProbe(_Blocks):
    """Probes while a worker's fit cannot split a model proposer's costs per call, per pass and per drafted token
    and the profile's price of what it ran is off (control/calibration.py "Calls and passes"): in one block of a
    batch's worth of admissions in every `every`, a request planned with that proposer drafts gamma // 2 while calls
    and passes are not told apart (`CalibratedCosts.split_probe`: other passes per call), and at load one planned
    otherwise drafts with it at gamma 2 while passes and tokens are not (`token_probe`: several requests per call);
    none once the fit can tell. An option the fit prices too dearly would otherwise never be run again to show it
    is not.

    What a probe costs is not the block's share at load: a draft model or head drafting for a few requests of a
    batch runs its passes in every step of the batch (measured on the reference worker at 256 clients: the draft
    model on 17% of the admissions, 3.3 of its passes in every step, 0.86x of static EAGLE). So the load form
    probes only a proposer that could win there: `worth(proposer)` (the policy's: its best plan at this batch,
    priced by the profile and by the fit, whichever hopes more, at least `near` x the decision's expected speedup:
    a proposer that no price puts ahead of the plan cannot change the choice, whatever its split, so the probe
    would buy nothing with its passes);
    and every block doubles the gap to the next (`backoff`), so a probe that does not resolve the split costs
    ever less (blocks 1..k take a share below 2 / (every 2^k) of the admissions after them) instead of a
    constant share for good."""

    probe_gamma: int = 2
    backoff: float = 2.0
    near: float = 1.0  # worth: a price puts the proposer's best plan at >= near x the decision's

    def apply(self, d: Decision, w: WorkerState, worth: Callable[[str], bool] | None = None) -> Decision:
        costs = w.step_costs
        if costs is None or not w.per_request or not (costs.split_probe or costs.token_probe):
            return d
        if d.proposer in costs.split_probe:
            if d.gamma < 2 or not self._tick(w):
                return d
            g = d.gamma // 2
            self.made[w.name] = self.made.get(w.name, 0) + 1
            return replace(d, gamma=g, schedule=None, reason=f"{d.reason} [calibration probe: {d.proposer} g={g}]")
        names = [p for p in costs.token_probe if p in w.proposers and p != d.proposer]
        if w.load < 1.0 or not names:
            return d
        names = [p for p in names if worth is None or worth(p)]
        if not names or not self._tick(w):
            return d
        p, g = names[0], min(self.probe_gamma, w.max_gamma)
        self.made[w.name] = self.made.get(w.name, 0) + 1
        return replace(d, proposer=p, gamma=g, schedule=None, reason=f"{d.reason} [calibration probe: {p} g={g}]")
