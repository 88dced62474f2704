"""Synthetic serving workloads for the simulator: class mixes, length distributions and acceptance rates.

A workload is a weighted mix of content classes (``adaptspec.control.types.CONTENT_CLASSES``); each class
has a log-normal prompt length and output length (in tokens). Acceptance is described per
(draft option, content class) by a first-position conditional rate ``alpha`` and a per-position decay
``d``: the k-th draft token (k = 1..gamma) is accepted, given the k-1 before it were, with probability
``alpha * d**(k-1)``. With ``d = 1`` this is the i.i.d. model of Leviathan et al. (2023), whose expected
emitted tokens per step is ``(1 - alpha**(gamma+1)) / (1 - alpha)``.

Calibration (public numbers; the simulator reproduces their *shape*, not any one paper's testbed)
------------------------------------------------------------------------------------------------
* Draft model, 8B draft on a 70B target (practitioner reports on production speculative decoding with
  Llama-3-70B + Llama-3-8B, as collected in the project brief, issue 6): acceptance by domain code 0.78,
  JSON / structured 0.86, docs / summarize 0.72, prose / chat 0.54. Math and translation are not in
  that report; math is set to 0.70 (numbers and formulae are predictable once the reasoning is fixed)
  and translation to 0.52 (prose-like: the small model's word choice diverges). A ~1B draft
  (e.g. Llama-3.2-1B for Llama-3.1-8B) keeps the ordering at 0.93x the rate. Decay 0.98 per position:
  a full draft model's conditional rate falls slowly with depth (published per-position rates such as
  0.84/0.60/0.39/0.27 are the chance of *reaching and* accepting position k; their conditionals,
  0.84, 0.71, 0.65, 0.69, are much flatter).
* Prompt lookup / n-gram (Saxena 2023, "prompt lookup decoding"; Spec-Bench, Xia et al., Findings of ACL
  2024, Table/leaderboard for PLD): ~2.4-2.7x on summarization and RAG, where the output copies the
  prompt, but ~1.05x on translation and closed-book QA, where it cannot. Rates here: summarize 0.70,
  structured 0.50 (keys and enum values are copied from the schema), code 0.35 (identifiers repeat),
  math 0.25 (numbers repeat), chat 0.10, translate 0.04, with decay 0.95 (a copied span either continues
  or breaks). At batch 1 on a memory-bound target these give ~2.7x (summarize, gamma 4) and ~1.04x
  (translate), the Spec-Bench picture.
* EAGLE-style heads (Li et al., EAGLE / EAGLE-2, 2024; Spec-Bench): the strongest general proposer, with
  the largest wins on multi-turn chat and math (Spec-Bench: EAGLE ~2.4-2.5x on MT-bench and GSM8K, ~1.8x
  on translation, ~2x on summarization/RAG). Rates: chat 0.72, math 0.76, code 0.74, structured 0.76,
  summarize 0.64, translate 0.58, decay 0.95 (a one-layer head drifts faster than a full draft model).
* Lengths: chat / open QA ~100-token prompts and ~300-token answers (ShareGPT-style traces), summarize /
  RAG ~1,500-token contexts and ~200-token answers (CNN/DailyMail, RAG traces), code ~300 -> ~250,
  structured / tool calls ~600-token schemas -> ~80-token JSON (BFCL-style), math ~150 -> ~250
  (GSM8K chain-of-thought), translate ~120 -> ~120. Log-normal with sigma 0.5-0.7, clipped.

The step-time side (70B on H100 ~41 ms/token at batch 1; gains shrinking past batch ~16-64 and reversing
when the verify batch is compute-bound; always-on speculation ~1.8x slower at high concurrency) lives in
the controller's profiles (``adaptspec/control/profiles/*.yaml``), which the simulator uses unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ClassSpec:
    """Length distribution of one content class (tokens; log-normal around the median, clipped)."""

    prompt_median: float
    prompt_sigma: float
    output_median: float
    output_sigma: float
    prompt_max: int = 8192
    output_max: int = 1024


CLASS_SPECS: dict[str, ClassSpec] = {
    "code": ClassSpec(300, 0.6, 250, 0.6),
    "structured": ClassSpec(600, 0.5, 80, 0.5),
    "summarize": ClassSpec(1500, 0.5, 200, 0.5),
    "translate": ClassSpec(120, 0.6, 120, 0.6),
    "math": ClassSpec(150, 0.5, 250, 0.5),
    "chat": ClassSpec(100, 0.7, 300, 0.7),
}

# Named mixes (weights need not sum to 1). "mixed" is a general assistant / API fleet.
# Long generations (reasoning, agents: thousands of output tokens, so the load changes while they run): chain-of-
# thought math, code and chat answers around 3,000 tokens (log-normal sigma 0.4, 512..8,192) after ~400-token
# prompts. Used by the `long` workload (gamma schedules, docs/results/sim-schedules.md).
LONG_SPECS: dict[str, ClassSpec] = {
    cls: ClassSpec(400, 0.5, 3000, 0.4, prompt_max=4096, output_max=8192) for cls in CONTENT_CLASSES
}

MIXES: dict[str, dict[str, float]] = {
    "mixed": {"chat": 0.30, "code": 0.20, "summarize": 0.20, "structured": 0.10, "math": 0.10, "translate": 0.10},
    "rag": {"summarize": 0.70, "chat": 0.20, "structured": 0.10},
    "agent": {"structured": 0.50, "code": 0.30, "chat": 0.20},
    "long": {"math": 0.40, "code": 0.30, "chat": 0.30},
    **{cls: {cls: 1.0} for cls in CONTENT_CLASSES},
}
# workloads whose lengths are not the per-class defaults
SPECS_OF: dict[str, Mapping[str, ClassSpec]] = {"long": LONG_SPECS}


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Per-position conditional acceptance: alpha_k = alpha * decay**(k-1), k = 1..gamma."""

    alpha: float
    decay: float = 1.0

    def curve(self, gamma: int) -> np.ndarray:
        return np.clip(self.alpha * self.decay ** np.arange(gamma, dtype=np.float64), 0.0, 1.0)


def _rates(table: Mapping[str, float], decay: float, scale: float = 1.0) -> dict[str, Acceptance]:
    return {cls: Acceptance(min(0.99, a * scale), decay) for cls, a in table.items()}


_DRAFT_8B_ON_70B = {"code": 0.78, "structured": 0.86, "summarize": 0.72, "chat": 0.54, "math": 0.70,
                    "translate": 0.52}
_NGRAM = {"summarize": 0.70, "structured": 0.50, "code": 0.35, "math": 0.25, "chat": 0.10, "translate": 0.04}
_EAGLE = {"chat": 0.72, "math": 0.76, "code": 0.74, "structured": 0.76, "summarize": 0.64, "translate": 0.58}

# proposer kind -> class -> Acceptance. "draft" is an 8B-class draft for a 70B target; "draft-small" a
# ~1B draft (8x-70x smaller than its target).
ACCEPTANCE: dict[str, dict[str, Acceptance]] = {
    "draft": _rates(_DRAFT_8B_ON_70B, 0.98),
    "draft-small": _rates(_DRAFT_8B_ON_70B, 0.98, scale=0.93),
    "ngram": _rates(_NGRAM, 0.95),
    "eagle": _rates(_EAGLE, 0.95),
}


@dataclass(frozen=True)
class AlphaModel:
    """Ground-truth acceptance used by the simulator: proposer -> class -> Acceptance."""

    table: Mapping[str, Mapping[str, Acceptance]] = field(default_factory=lambda: ACCEPTANCE)
    # proposer name as the policy sees it ("draft") -> key in `table` ("draft" or "draft-small")
    aliases: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def constant(cls, alpha: float, decay: float = 1.0) -> AlphaModel:
        """Same acceptance for every proposer and class (closed-form tests)."""
        acc = Acceptance(alpha, decay)
        return cls({p: dict.fromkeys(CONTENT_CLASSES, acc) for p in ("draft", "ngram", "eagle")})

    def get(self, proposer: str, content_class: str) -> Acceptance:
        key = self.aliases.get(proposer, proposer)
        try:
            return self.table[key][content_class]
        except KeyError:
            raise ConfigError("no acceptance rate for this proposer / class",
                              key=f"{key}.{content_class}") from None

    def curve(self, proposer: str, content_class: str, gamma: int) -> np.ndarray:
        return self.get(proposer, content_class).curve(gamma)


@dataclass(frozen=True)
class Workload:
    """A weighted mix of content classes with their length distributions."""

    name: str
    mix: Mapping[str, float]
    specs: Mapping[str, ClassSpec] = field(default_factory=lambda: CLASS_SPECS)

    def __post_init__(self) -> None:
        for cls, w in self.mix.items():
            if cls not in self.specs:
                raise ConfigError(f"unknown content class; expected one of {sorted(self.specs)}",
                                  key="mix", value=cls)
            if not (w >= 0 and np.isfinite(w)):
                raise ConfigError("class weight must be a finite number >= 0", key=f"mix.{cls}", value=w)
        if sum(self.mix.values()) <= 0:
            raise ConfigError("class weights must not all be zero", key="mix", value=dict(self.mix))

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(c for c, w in self.mix.items() if w > 0)

    @property
    def probabilities(self) -> np.ndarray:
        w = np.array([self.mix[c] for c in self.classes], dtype=np.float64)
        return w / w.sum()

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw n requests: (class index into `self.classes`, prompt tokens, output tokens)."""
        cls_idx = rng.choice(len(self.classes), size=n, p=self.probabilities)
        z_prompt, z_out = rng.standard_normal(n), rng.standard_normal(n)
        prompt = np.empty(n, dtype=np.int64)
        output = np.empty(n, dtype=np.int64)
        for i, cls in enumerate(self.classes):
            s = self.specs[cls]
            m = cls_idx == i
            prompt[m] = np.clip(np.round(s.prompt_median * np.exp(s.prompt_sigma * z_prompt[m])), 8, s.prompt_max)
            output[m] = np.clip(np.round(s.output_median * np.exp(s.output_sigma * z_out[m])), 8, s.output_max)
        return cls_idx, prompt, output


def parse_mix(text: str) -> dict[str, float]:
    """`code=1,summarize=2` -> {"code": 1.0, "summarize": 2.0} (errors name the bad item)."""
    mix: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, weight = item.partition("=")
        name = name.strip()
        if name not in CONTENT_CLASSES:
            raise ConfigError(f"unknown content class; expected one of {list(CONTENT_CLASSES)}",
                              key="--mix", value=name)
        try:
            mix[name] = float(weight) if sep else 1.0
        except ValueError:
            raise ConfigError("class weight must be a number", key=f"--mix {name}", value=weight) from None
        if not (mix[name] >= 0 and np.isfinite(mix[name])):
            raise ConfigError("class weight must be a finite number >= 0", key=f"--mix {name}", value=weight)
    if not mix or sum(mix.values()) <= 0:
        raise ConfigError("empty mix", key="--mix", value=text)
    return mix


def get_workload(name: str, mix: str | None = None) -> Workload:
    """A named workload (`mixed`, `rag`, `agent`, `long`, or one class), optionally re-weighted by a `--mix`
    string (keeping the named workload's lengths)."""
    specs = SPECS_OF.get(name, CLASS_SPECS)
    if mix:
        return Workload(name if name not in MIXES else f"{name}+mix", parse_mix(mix), specs)
    if name not in MIXES:
        raise ConfigError(f"unknown workload; expected one of {sorted(MIXES)}", key="--workload", value=name)
    return Workload(name, MIXES[name], specs)
