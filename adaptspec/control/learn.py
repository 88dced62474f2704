"""Learning: a finished request's outcome -> the updates of the alpha table, the acceptance predictor and the
worker's traffic shape. Written once; the proxy (proxy/feedback.py) and the simulator (bench/simulator.py) both
call it, so simulated results exercise the learning the proxy ships.

    updates = learn(Outcome(worker, proposer, content_class, ..., speculation=Speculation(...)), alphas)
    updates.apply(state.observe, predictor, traffic)   # proxy: state backend; simulator: AlphaTable.add

`learn` is pure: it reads the class-level estimates a request's prediction was moved from (before the table
counts the request: the predictor's gate scores the shift against them) and changes nothing. What it teaches:

1. traffic: prompt tokens prefilled per output token (`TrafficShape.note`), when tokens came out;
2. the request's own report (`Speculation`, for a proposer that drafted):
   * the predictor (with the request's features): alpha from the positions tried / accepted (else the totals'
     moment fit), the propose rate from the steps that drafted (control/predict.py `AcceptancePredictor.observe`);
   * the (worker, proposer, class, regime) key: exact conditional rates from per-position counts (whatever
     length each draft had), with the propose rate's evidence: for a hybrid its lookup's share of its drafting
     steps (`lookup_drafts`), otherwise the share of the steps its gamma let draft (not capped to 0) that did;
     without positions, the totals (`trials.totals_observation`). A report split by draft source (`parts`: a per-step hybrid's lookup and
     head steps, as the simulator replays it) teaches each part's key instead;
3. shadow runs (`ShadowStats`, control/shadow.py): a proposer scored along a request that ran without it
   teaches that proposer's key like its own requests do, when the worker offers it; the n-gram shadow also
   teaches the predictor.

Step-time calibration is not per request: both feed a `StepCalibrator` each scrape of the step counters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from adaptspec.control.predict import AcceptancePredictor, RequestFeatures
from adaptspec.control.shadow import ShadowStats
from adaptspec.control.traffic import TrafficShape
from adaptspec.control.trials import totals_observation
from adaptspec.control.types import GREEDY, AlphaSource, Observation


@dataclass(frozen=True, slots=True)
class Part:
    """The drafts of a split report from one source (proposer), with the key's propose-rate evidence."""

    proposer: str
    draft_tokens: float
    tried: tuple[float, ...]
    accepted: tuple[float, ...]
    steps: float = 0.0
    drafts: float = 0.0


@dataclass(frozen=True, slots=True)
class Speculation:
    """What one request drafted and had accepted (`usage.speculative`): totals, verification steps (None:
    unknown), per draft position the drafts that tried / accepted it (None: unknown), for a hybrid the drafting
    steps its lookup served, and the steps whose gamma was capped to 0 (`steps_by_gamma["0"]`: a schedule at a
    large batch, an engine switched off), which had no chance to draft. `parts`: the report split by draft source; each part teaches its own key instead of the whole (an empty
    tuple: no key learns, e.g. a hindsight plan)."""

    draft_tokens: float
    accepted_tokens: float
    steps: float | None = None
    tried: tuple[float, ...] | None = None
    accepted: tuple[float, ...] | None = None
    lookup_drafts: float | None = None
    idle_steps: float = 0.0
    parts: tuple[Part, ...] | None = None

    def positions(self) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """(tried, accepted) per position when given and consistent with the accepted total."""
        if self.tried is None or self.accepted is None or abs(sum(self.accepted) - self.accepted_tokens) >= 0.5:
            return None
        return self.tried, self.accepted


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished request as learning sees it. `worker_proposers`: what the worker offers (a shadow counts only
    for those); `shadows`: (proposer, run) scored along the request's output; `now`: None, the table's clock."""

    worker: str
    proposer: str
    content_class: str
    gamma: int = 0
    regime: str = GREEDY
    output_tokens: float = 0.0
    prompt_tokens: float | None = None
    speculation: Speculation | None = None
    shadows: tuple[tuple[str, ShadowStats], ...] = ()
    worker_proposers: tuple[str, ...] = ()
    features: RequestFeatures | None = None
    now: float | None = None


@dataclass(frozen=True, slots=True)
class Lesson:
    """One `AcceptancePredictor.observe`, with the class-level estimate read before the table counted it."""

    features: RequestFeatures
    proposer: str
    content_class: str
    draft_tokens: int
    accepted_tokens: int
    steps: int
    drafts: int | None
    tried: tuple[float, ...] | None
    accepted: tuple[float, ...] | None
    class_alpha: float
    class_rate: float

    def teach(self, predictor: AcceptancePredictor) -> None:
        predictor.observe(self.features, self.proposer, self.draft_tokens, self.accepted_tokens, self.steps,
                          self.drafts, self.tried, self.accepted, content_class=self.content_class,
                          class_alpha=self.class_alpha, class_rate=self.class_rate)


@dataclass(frozen=True, slots=True)
class Updates:
    """What one outcome teaches: table observations, predictor lessons, a traffic note (prompt, output tokens),
    and the shadow runs that counted (for the proxy's metrics)."""

    observations: tuple[Observation, ...] = ()
    lessons: tuple[Lesson, ...] = ()
    traffic: tuple[float, float] | None = None
    shadows: tuple[tuple[str, ShadowStats], ...] = ()

    def apply(self, observe: Callable[[Observation], None] | None, predictor: AcceptancePredictor | None = None,
              traffic: TrafficShape | None = None) -> None:
        """`observe`: the table's writer (a state backend's `observe`, `AlphaTable.add`; None: a table that does
        not learn); `predictor` / `traffic`: None where there is none."""
        if traffic is not None and self.traffic is not None:
            traffic.note(*self.traffic)
        if predictor is not None:
            for lesson in self.lessons:
                lesson.teach(predictor)
        if observe is not None:
            for obs in self.observations:
                observe(obs)


def learn(outcome: Outcome, alphas: AlphaSource) -> Updates:
    """The updates one finished request teaches (module doc); `alphas`: the live table, read only."""
    o = outcome
    observations: list[Observation] = []
    lessons: list[Lesson] = []
    spec = o.speculation
    if spec is not None and spec.draft_tokens > 0 and o.proposer != "none":
        if o.features is not None:
            lessons.append(_lesson(o, o.proposer, alphas, spec.draft_tokens, spec.accepted_tokens, spec.steps,
                                   spec.positions()))
        observations += _report(o, spec)
    counted = tuple((p, sh) for p, sh in o.shadows
                    if sh.steps > 0 and p != o.proposer and p in o.worker_proposers)
    for p, sh in counted:
        if p == "ngram" and o.features is not None and sh.draft_tokens > 0:
            positions = tuple(map(float, sh.tried_per_position)), tuple(map(float, sh.accepted_per_position))
            lessons.append(_lesson(o, p, alphas, sh.draft_tokens, sh.accepted_tokens, sh.steps, positions))
        observations.append(shadow_observation(o.worker, p, o.content_class, sh, o.regime, o.now))
    traffic = (o.prompt_tokens, o.output_tokens) if o.output_tokens > 0 and o.prompt_tokens is not None else None
    return Updates(tuple(x for x in observations if not x.empty), tuple(lessons), traffic, counted)


def source_parts(proposer: str, by_source: Mapping[str, ShadowStats]) -> tuple[Part, ...] | None:
    """A per-step hybrid's report by draft source (the reference worker's `usage.speculative.by_source`,
    worker/requests.py `SourceTally`) as `Speculation.parts`: its lookup steps ("ngram") teach the hybrid's own
    key (drafts / steps: the rule's lookup density), its model's drafting steps the model's key, as trace replay
    teaches them (bench/simulator.py). None without the lookup's part."""
    lookup = by_source.get("ngram")
    if lookup is None:
        return None
    parts = [Part(proposer, float(lookup.draft_tokens), tuple(map(float, lookup.tried_per_position)),
                  tuple(map(float, lookup.accepted_per_position)), float(lookup.steps), float(lookup.drafts))]
    for name, stats in by_source.items():
        if name not in ("ngram", proposer) and stats.drafts > 0:
            parts.append(Part(name, float(stats.draft_tokens), tuple(map(float, stats.tried_per_position)),
                              tuple(map(float, stats.accepted_per_position))))
    return tuple(parts)


def shadow_observation(worker: str, proposer: str, content_class: str, shadow: ShadowStats, regime: str = GREEDY,
                       now: float | None = None) -> Observation:
    """A shadow run counted into (worker, proposer, class) like that proposer's own requests: exact
    per-position rates, and the steps whose lookup drafted (the propose rate)."""
    tried, acc = shadow.tried_per_position, shadow.accepted_per_position
    succ = float(shadow.accepted_tokens)
    return Observation(worker, proposer, content_class, succ, sum(float(x) for x in tried) - succ, tried, acc,
                       draft_tokens=float(shadow.draft_tokens), now=now, steps=float(shadow.steps),
                       drafts=float(shadow.drafts), regime=regime)


def _report(o: Outcome, spec: Speculation) -> list[Observation]:
    if spec.parts is not None:
        return [_counts(o, p.proposer, p.tried, p.accepted, p.draft_tokens, p.steps, p.drafts) for p in spec.parts]
    positions = spec.positions()
    if positions is None:
        obs = totals_observation(o.worker, o.proposer, o.content_class, spec.draft_tokens, spec.accepted_tokens,
                                 None, o.now, steps=spec.steps or None, gamma=o.gamma if o.gamma > 0 else None,
                                 regime=o.regime)
        return [] if obs is None else [obs]
    tried, acc = positions
    steps = drafts = 0.0
    if o.proposer == "hybrid":
        if spec.lookup_drafts is not None and spec.lookup_drafts <= tried[0]:
            steps, drafts = tried[0], spec.lookup_drafts
    elif spec.steps and spec.steps - spec.idle_steps >= tried[0]:
        # the steps that could draft, and those that did (position 0 is tried by every draft)
        steps, drafts = spec.steps - spec.idle_steps, tried[0]
    return [_counts(o, o.proposer, tried, acc, spec.draft_tokens, steps, drafts)]


def _counts(o: Outcome, proposer: str, tried, acc, draft_tokens: float, steps: float, drafts: float) -> Observation:
    succ = sum(acc)
    return Observation(o.worker, proposer, o.content_class, succ, sum(tried) - succ, tried, acc,
                       draft_tokens=draft_tokens, now=o.now, steps=steps, drafts=drafts, regime=o.regime)


def _lesson(o: Outcome, proposer: str, alphas: AlphaSource, draft: float, accepted: float, steps: float | None,
            positions) -> Lesson:
    est = alphas.get(o.worker, proposer, o.content_class) if o.regime == GREEDY else \
        alphas.get(o.worker, proposer, o.content_class, regime=o.regime)
    tried, acc = positions if positions is not None else (None, None)
    n_steps = int(steps) if steps else 0
    # position 0 is tried by every drafting step: the propose rate's numerator (with the step count)
    drafts = int(tried[0]) if tried and n_steps >= tried[0] else None
    return Lesson(o.features, proposer, o.content_class, int(draft), int(accepted), n_steps, drafts, tried, acc,
                  est.mean, est.propose_rate)
