"""Types shared by the controller, the proxy and the simulator (see docs/INTERFACES.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, get_args

if TYPE_CHECKING:
    from adaptspec.control.calibration import CalibratedCosts

CONTENT_CLASSES: tuple[str, ...] = ("code", "structured", "summarize", "translate", "math", "chat")
ENGINES: tuple[str, ...] = ("adaptspec", "vllm", "sglang", "openai")

ContentClass = Literal["code", "structured", "summarize", "translate", "math", "chat"]
# The proposer vocabulary, written once: what a decision, a request's `speculation.proposer`, a pool's
# `proposers`, a metric's `proposer` label and a profile's drafter kind may name. "none" is speculation off.
DraftingProposer = Literal["ngram", "draft", "eagle", "hybrid"]  # the ones that draft
Proposer = Literal["none", DraftingProposer]
PROPOSERS: tuple[str, ...] = get_args(Proposer)  # ("none", "ngram", "draft", "eagle", "hybrid")
DRAFTING_PROPOSERS: tuple[str, ...] = get_args(DraftingProposer)  # PROPOSERS less "none"
# Sampling regimes a table key carries (control/alpha.py): greedy (temperature 0 or top_k 1) or sampled.
GREEDY, SAMPLED = "greedy", "sampled"
REGIMES: tuple[str, ...] = (GREEDY, SAMPLED)


@dataclass(frozen=True, slots=True)
class WorkerState:
    """What a policy sees of one candidate worker at decision time."""

    name: str
    engine: str = "adaptspec"
    per_request: bool = True  # accepts per-request proposer / gamma (adaptspec worker, vLLM + plugin)
    proposers: tuple[str, ...] = ("ngram", "draft")  # offered per request, or the one fixed at launch
    gamma: int = 0  # fixed-speculation workers: gamma set at launch (0 = speculation off)
    max_gamma: int = 8
    profile: str | None = None  # step-time profile name (adaptspec/control/profiles/*.yaml)
    running: float = 0.0  # requests in the running batch (scraped)
    waiting: float = 0.0  # requests queued (scraped)
    kv_usage: float = 0.0  # 0..1 (scraped)
    inflight: int = 0  # this proxy's own in-flight requests to the worker (exact, instant)
    healthy: bool = True
    # prompt tokens prefilled per generated token in the worker's recent traffic (0 = unknown): prefill
    # shares the decode steps, see costmodel.evaluate
    prefill_ratio: float = 0.0
    prompt_tokens: float = 0.0  # mean prompt tokens prefilled per request (the size of a prefill chunk)
    # the worker's step costs fitted online from its telemetry (control/calibration.py); the cost-model
    # policies price with them instead of the profile's once `step_costs.trusted`
    step_costs: CalibratedCosts | None = None
    # the engine verifies each request's own draft tokens, flattened, whatever the profile says (vLLM, SGLang):
    # a profile's `padded_verify` (the reference engine's padded attention) does not price its steps
    flat_verify: bool = False

    @property
    def load(self) -> float:
        """Best instant estimate of the batch the next request joins."""
        return max(self.running + self.waiting, float(self.inflight))


@dataclass(frozen=True, slots=True)
class AlphaEstimate:
    """Posterior summary of the per-token acceptance rate for one (worker, proposer, class) key."""

    mean: float
    std: float
    n: float  # effective number of draft tokens behind the estimate (0 = prior only)
    per_position: tuple[float, ...] | None = None  # conditional rates alpha_1..alpha_k when known
    # share of verification steps that had a draft at all: an n-gram lookup proposes only when the context
    # repeats; the steps without a match verify one token and emit one (1.0 = every step drafts). For
    # "hybrid" (which always drafts): the share of its drafting steps its n-gram lookup served
    propose_rate: float = 1.0
    # finished requests (or counter windows) behind the estimate, discounted like n: drafted tokens of one
    # request are not independent trials, so "how many requests" says how far one unlucky request can mislead
    reports: float = 0.0
    # per_position corrected for the walk they were counted along (alpha.walk_rates): the rates to price a step
    # at any gamma with; None where per_position is None or nothing corrects it
    walk_rates: tuple[float, ...] | None = None

    @property
    def priced(self) -> float | tuple[float, ...]:
        """What the cost model prices with: the walk-corrected rates, else the per-position rates, else the mean."""
        return self.walk_rates or self.per_position or self.mean

    def priced_below(self, shift: float) -> float | tuple[float, ...]:
        """`priced` with every rate `shift` lower (floored at 0): a cautious plan's alpha."""
        rates = self.walk_rates or self.per_position
        if rates:
            return tuple(max(a - shift, 0.0) for a in rates)
        return max(self.mean - shift, 0.0)


@dataclass(frozen=True, slots=True)
class Observation:
    """One update of an alpha table key: Bernoulli counts, per draft position the drafts that tried it and those
    that accepted it, the draft tokens behind them (what the key's history is discounted by; default successes
    + failures), verification steps and those that drafted (the propose rate), at time `now` (None: the table's
    clock). `AlphaTable.observe_counts`' arguments as a value: what learning (control/learn.py) and counter
    ingestion produce and what the state backends receive (proxy/state.py)."""

    worker: str
    proposer: str
    content_class: str
    successes: float
    failures: float
    pos_trials: tuple[float, ...] = ()
    pos_accepted: tuple[float, ...] = ()
    draft_tokens: float | None = None
    now: float | None = None
    steps: float = 0.0
    drafts: float = 0.0
    regime: str = GREEDY

    def __post_init__(self) -> None:
        object.__setattr__(self, "pos_trials", tuple(float(x) for x in self.pos_trials))
        object.__setattr__(self, "pos_accepted", tuple(float(x) for x in self.pos_accepted))

    @property
    def empty(self) -> bool:
        """Nothing to count (a table ignores it)."""
        return self.successes + self.failures <= 0 and not any(self.pos_trials) and self.steps <= 0


class AlphaSource(Protocol):
    def get(self, worker: str, proposer: str, content_class: str) -> AlphaEstimate: ...


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy chose for one request, and why (goes to headers, logs and metrics)."""

    worker: str
    proposer: str  # "none" when speculation is off
    gamma: int  # 0 when speculation is off
    content_class: str
    policy: str
    reason: str
    expected_speedup: float = 1.0
    # where the request falls in the holdout / switchback experiment (control/holdout.py Assignment), if any
    assignment: object | None = None
    # caps on gamma by the live running batch, applied by the worker at every step (control/schedule.py);
    # None: gamma stays as admitted. With a schedule the request runs with k = max(gamma, its highest cap)
    # and `proposer` is the one it drafts with whenever a cap allows (gamma may be 0 at admission)
    schedule: tuple[tuple[int, int], ...] | None = None
    # a per-step hybrid's rule by name (control/hybrid_rule.py RULES) where its class runs another than the
    # worker's own; None: the worker's own rule
    hybrid_rule: str | None = None
    # (proposer, gamma) of a plan priced alone at batch 1 (control/realized.py), or None: while the decision still
    # runs that plan (no probe or experiment replaced it), its realized decode rate over `expected_speedup` is
    # evidence for the policy's per-proposer correction (`rate_evidence`)
    priced: tuple[str, int] | None = None

    @property
    def max_k(self) -> int:
        """num_speculative_tokens to send: gamma, or the schedule's highest cap when that is higher."""
        if not self.schedule:
            return self.gamma
        return max(self.gamma, max(cap for _, cap in self.schedule))

    @property
    def rate_evidence(self) -> bool:
        """Whether the request is evidence for the batch-1 corrections: it runs the plan that was priced."""
        return self.priced is not None and self.priced == (self.proposer, self.gamma)


class Policy(Protocol):
    name: str

    def decide(
        self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource
    ) -> Decision: ...
