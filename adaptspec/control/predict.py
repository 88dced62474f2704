"""Per-request acceptance prediction: a request's alpha and propose rate per proposer, beyond its class.

Within one content class acceptance varies several-fold between requests (an answer that copies or edits
the given code accepts long n-gram runs; a question about code does not). This module predicts a request's
per-token acceptance `alpha` and, for proposers that do not always find a draft (n-gram lookup), its propose
rate, from cheap features the proxy already has, and learns online from the per-request feedback the proxy
gets back (`usage.speculative`).

Features (`RequestFeatures.from_prompt`: str.count / numpy passes over at most 2 KB of the text, head and tail):
  - the class scores (the classifier's probabilities; their prior-table mix is also the model's offset);
  - how much the prompt repeats itself (share of repeated 8-byte shingles, and of repeated lines);
  - how much of it is material the answer is asked to reuse or edit: code-looking lines, quoted / fenced
    blocks, an edit / complete / reuse verb in the instruction, a long context with a short instruction;
  - log prompt length (words), log max_tokens, temperature, digit / non-ASCII / punctuation shares.

Model (one per proposer and target): Bayesian logistic regression with a Gaussian prior, updated online by
an exact Laplace step per observation (the MAP along S x, found by a 1-D Newton solve, then a rank-1
Sherman-Morrison update of the covariance: O(d^2) for d ~ 20), with the offset
`logit(sum_c score_c * prior_alpha(proposer, c))`, so an untrained predictor returns the class prior table
and the weights learn only corrections. Observations are
binomial: accepted drafts out of tried draft positions for alpha, drafting steps out of steps for the
propose rate. A request's evidence is capped at `max_trials_per_request` pseudo-trials, because the
positions of one request are not independent (one request's many steps must not outweigh many requests).
`forget` (per observation) inflates the covariance slightly so the model tracks drift.

    feats = RequestFeatures.from_prompt(text, max_tokens=256, temperature=0.0, class_scores=scores)
    alpha, propose_rate, n_eff = predictor.predict(feats, "ngram")
    predictor.observe(feats, "ngram", draft_tokens=D, accepted_tokens=A, steps=S, drafts=N,
                      tried_per_position=tried, accepted_per_position=acc)   # from usage.speculative

`n_eff` is the prediction's weight in pseudo-trials (alpha(1-alpha) / its posterior variance), comparable to
the Beta posteriors of `estimators.AlphaTable`. Or keep the table's per-worker, per-class level and add only
the per-request part:

    alpha, propose_rate = predictor.adjust(feats, "ngram", table_alpha, table_propose_rate)

How the proxy and the simulator use it (estimator.predict, default on): the request's features are computed
once, its decision reads `predictor.view(alphas, feats, cls)` (an AlphaSource: the request's own class's
estimates, per-position rates and propose rate moved on the logit scale by `shift`; other classes unchanged,
and batch-wide draft gammas read `view.class_level`), and the finished request's feedback goes to
`observe(..., content_class=cls, class_alpha=..., class_rate=...)` with the class-level estimate read before
the table counts it. `shift` = gate weight x weights . (x - the class's mean x), temperature left out (the
sampling regime already picks the class-level key), rounded to 0.05 so the plan caches still hit. The gate
(`Gate`, one per proposer and class) is the online least-squares weight in [0, 1] of the shift against the
outcomes, each scored before the model learnt from it: where the features tell nothing about a class, the
weight stays ~0 and its requests are planned exactly as the class level; a request never gets a worse
estimate than the class level on average over the outcomes seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from adaptspec.control.estimators import alpha_from_steps, prior_alpha
from adaptspec.control.types import CONTENT_CLASSES, AlphaEstimate, AlphaSource

__all__ = ["FEATURE_NAMES", "AcceptancePredictor", "Gate", "OnlineLogistic", "Prediction", "RequestAlphas",
           "RequestFeatures"]

# verbs of a request to reuse or edit given text, looked up as the instruction's lower-cased words (bytes
# methods in C: a case-insensitive alternation regex over the same text costs ~10x more, str.translate ~5x)
_EDIT_WORDS = frozenset(w.encode() for w in (
    "rewrite", "re-write", "fix", "edit", "refactor", "correct", "modify", "update", "improve", "complete",
    "continue", "rename", "convert", "reformat", "format", "paraphrase", "proofread", "extract", "copy", "repeat",
    "quote", "translate", "add", "change", "replace", "implement"))
# bytes -> lower case, punctuation -> space: one C table lookup per byte
_WORD_BYTES = bytes(b + 32 if 65 <= b <= 90 else 32 if chr(b) in "\n\t\r.,:;!?()[]{}\"'`*#<>/\\|=+" else b
                    for b in range(256))
# code-looking lines, counted with str.count (C): indented lines, lines opening with a keyword, lines ending
# like a statement or a block, assignments
_CODE_MARKS = ("\n  ", "\n\t", "\ndef ", "\nclass ", "\nreturn ", "\nimport ", "\nfrom ", "\n#", "\n//",
               ":\n", "{\n", ";\n", "}\n", " = ")
_INSTR_CHARS = 240  # the instruction sits at the head or the tail of a long prompt
_SAMPLE_CHARS = 2048  # a long prompt is read at its head and tail only
_SHINGLE = 8  # bytes per shingle: about two tokens, the shortest span an n-gram lookup copies
_SHINGLE_BYTES = 1024  # repetition is measured on the first 1 KB (sorting the shingles is the costly part)
# byte kinds counted as len(b) - len(b.translate(None, kind)): one C pass each, no array
_DIGITS = b"0123456789"
_NON_ASCII = bytes(range(128, 256))  # UTF-8 lead and continuation bytes
_PUNCT = b"{}()[];:=<>\"'`,."

FEATURE_NAMES: tuple[str, ...] = (
    "bias", *(f"class_{c}" for c in CONTENT_CLASSES), "repeat_8bytes", "repeat_lines", "code_lines",
    "quoted_or_fenced", "edit_verb", "long_context", "log_words", "log_max_tokens", "temperature",
    "digit_share", "non_ascii_share", "punct_share",
)


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1.0 - 1e-4)
    return math.log(p / (1.0 - p))


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _repeated_shingle_share(raw: np.ndarray) -> float:
    """Share of the text's 8-byte shingles that occur more than once in it: text that repeats itself."""
    n = raw.shape[0] - _SHINGLE + 1
    if n < 2:
        return 0.0
    # [n] every (overlapping, unaligned) 8-byte window read as one integer: a strided view, no copy
    codes = np.sort(np.ndarray((n,), dtype="<u8", buffer=raw, strides=(1,)))
    return float(np.count_nonzero(codes[1:] == codes[:-1])) / n


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """A request's feature vector `x` [len(FEATURE_NAMES)] and its class scores (for the offset)."""

    x: np.ndarray  # [d] float64
    class_scores: tuple[float, ...]  # in CONTENT_CLASSES order, summing to 1

    @classmethod
    def from_prompt(cls, text: str, max_tokens: int | None = None, temperature: float = 0.0,
                    class_scores: Mapping[str, float] | None = None) -> RequestFeatures:
        """Features of a prompt text (all user/system content joined) and the request's sampling fields.
        `class_scores`: the classifier's {class: probability} (None or empty: uniform)."""
        scores = [float((class_scores or {}).get(c, 0.0)) for c in CONTENT_CLASSES]
        total = sum(scores)
        scores = [s / total for s in scores] if total > 0 else [1.0 / len(CONTENT_CLASSES)] * len(CONTENT_CLASSES)
        n_chars = len(text)
        # every scan below reads at most _SAMPLE_CHARS (head and tail): the cost does not grow with the prompt
        sample = text if n_chars <= _SAMPLE_CHARS else text[: _SAMPLE_CHARS // 2] + text[-_SAMPLE_CHARS // 2:]
        n_words = (sample.count(" ") + sample.count("\n") + 1) * n_chars / len(sample) if text else 0.0
        data = sample.encode("utf-8", "replace")
        raw = np.frombuffer(data, dtype=np.uint8)  # [bytes]
        repeat_8 = _repeated_shingle_share(raw[:_SHINGLE_BYTES])
        lines = [ln for ln in sample.splitlines() if ln.strip()]
        repeat_lines = 1.0 - len(set(lines)) / len(lines) if len(lines) > 1 else 0.0
        if lines:
            body = "\n" + sample  # so that the first line counts like the others
            code_lines = min(1.0, sum(body.count(mark) for mark in _CODE_MARKS) / len(lines))
        else:
            code_lines = 0.0
        quoted = "```" in sample or sample.count('"') >= 6 or "\n>" in sample
        instr = text[:_INSTR_CHARS] + " " + text[-_INSTR_CHARS:] if n_chars > 2 * _INSTR_CHARS else text
        edit = not _EDIT_WORDS.isdisjoint(instr.encode("utf-8", "replace").translate(_WORD_BYTES).split())
        long_context = min(1.0, n_chars / 2000.0) if len(lines) > 2 or n_chars > 600 else 0.0
        if data:
            n = len(data)
            digits, non_ascii, punct = ((n - len(data.translate(None, kind))) / n
                                        for kind in (_DIGITS, _NON_ASCII, _PUNCT))
        else:
            digits = non_ascii = punct = 0.0
        mt = 256 if max_tokens is None else max(1, int(max_tokens))
        x = np.array([1.0, *scores, repeat_8, repeat_lines, code_lines, float(quoted), float(edit), long_context,
                      math.log1p(n_words) / 8.0, math.log(mt) / 8.0, min(max(float(temperature), 0.0), 2.0),
                      digits, non_ascii, punct])  # [d]
        return cls(x, tuple(scores))


class OnlineLogistic:
    """Bayesian logistic regression on binomial counts with an offset, updated online (Laplace / EKF step).

    mean `m` [d], covariance `S` [d, d]; prediction logit = offset + m.x."""

    def __init__(self, dim: int, prior_var: float = 1.0, forget: float = 0.0):
        self.m = np.zeros(dim)  # [d]
        self.S = np.eye(dim) * prior_var  # [d, d]
        self.forget = forget
        self.n_obs = 0

    def predict(self, x: np.ndarray, offset: float) -> tuple[float, float]:
        """(probability, posterior variance of the logit)."""
        z = offset + float(self.m @ x)
        return _sigmoid(z), float(x @ self.S @ x)

    def update(self, x: np.ndarray, offset: float, successes: float, trials: float) -> None:
        """Laplace update for one binomial observation: the exact MAP under the current Gaussian (a 1-D
        problem: the likelihood moves the mean only along S x) and the curvature there."""
        if trials <= 0:
            return
        if self.forget:
            self.S *= 1.0 + self.forget
        Sx = self.S @ x  # [d]
        v = float(x @ Sx)  # prior variance of the logit
        z0 = offset + float(self.m @ x)
        # the MAP is m + S x t with t = successes - trials * sigmoid(z0 + v t): monotone, Newton from 0
        t = 0.0
        for _ in range(30):
            p = _sigmoid(z0 + v * t)
            f = t - successes + trials * p
            step = f / (1.0 + trials * v * p * (1.0 - p))
            t -= step
            if abs(step) < 1e-10:
                break
        p = _sigmoid(z0 + v * t)
        h = trials * max(p * (1.0 - p), 1e-6)  # the binomial log-likelihood's curvature at the MAP
        self.m += Sx * t
        self.S -= np.outer(Sx, Sx) * (h / (1.0 + h * v))
        self.n_obs += 1

    def to_dict(self) -> dict:
        return {"m": self.m.tolist(), "S": self.S.tolist(), "forget": self.forget, "n_obs": self.n_obs}

    @classmethod
    def from_dict(cls, d: Mapping) -> OnlineLogistic:
        m = np.asarray(d["m"], dtype=float)
        out = cls(m.shape[0], forget=float(d.get("forget", 0.0)))
        out.m, out.S, out.n_obs = m, np.asarray(d["S"], dtype=float), int(d.get("n_obs", 0))
        return out


class Prediction(NamedTuple):
    alpha: float  # per-token acceptance of a drafted token
    propose_rate: float  # share of steps in which the proposer drafts anything (1 for model proposers)
    n_eff: float  # weight of the alpha prediction in pseudo-trials


# proposers that may find nothing to draft; the others always draft
_LOOKUP_PROPOSERS = frozenset({"ngram"})
_PRIOR_PROPOSE_RATE = 0.6
_CLASS_MEAN_WINDOW = 256  # the class's mean features follow its last few hundred requests
_SHIFT_MASK = np.array([0.0 if n == "temperature" else 1.0 for n in FEATURE_NAMES])  # [d]
SHIFT_STEP = 0.05  # logit shifts are rounded to this (alpha moves < 1.3% per step): cacheable plans
GATE_PRIOR = 0.05  # pseudo-evidence for "no correction" (sum of weight * squared shift in alpha)
GATE_DECAY = 1.0 / 1024.0  # per observation: a gate's evidence follows its last ~thousand requests
GATE_Z = 1.5  # the gate trusts a correction at its least-squares weight less 1.5 standard errors


class AcceptancePredictor:
    """Per-proposer online models of a request's alpha (and propose rate for n-gram lookup)."""

    def __init__(self, prior_table: Mapping[str, Mapping[str, float]] | None = None, prior_var: float = 0.5,
                 max_trials_per_request: float = 8.0, forget: float = 1e-3, max_n_eff: float = 1e4):
        self.prior_table = prior_table
        self.prior_var = prior_var
        self.max_trials = float(max_trials_per_request)
        self.forget = forget
        self.max_n_eff = max_n_eff
        self._alpha: dict[str, OnlineLogistic] = {}
        self._propose: dict[str, OnlineLogistic] = {}
        self._prior_logits: dict[str, np.ndarray] = {}  # proposer -> [n_classes] prior alphas
        # per top class: running mean of the observed requests' features [d] and their count
        self._class_mean: dict[str, np.ndarray] = {}
        self._class_n: dict[str, int] = {}
        self._class_index = frozenset(CONTENT_CLASSES)
        # per (proposer, class): how much the shifts of alpha / of the propose rate have earned (see Gate)
        self._gate_alpha: dict[tuple[str, str], Gate] = {}
        self._gate_rate: dict[tuple[str, str], Gate] = {}

    def _model(self, table: dict[str, OnlineLogistic], proposer: str) -> OnlineLogistic:
        m = table.get(proposer)
        if m is None:
            m = table[proposer] = OnlineLogistic(len(FEATURE_NAMES), self.prior_var, self.forget)
        return m

    def _offset(self, feats: RequestFeatures, proposer: str) -> float:
        pri = self._prior_logits.get(proposer)
        if pri is None:
            pri = self._prior_logits[proposer] = np.array(
                [prior_alpha(proposer, c, self.prior_table) for c in CONTENT_CLASSES])
        return _logit(float(np.dot(pri, feats.class_scores)))

    def predict(self, feats: RequestFeatures, proposer: str) -> Prediction:
        model = self._alpha.get(proposer)
        offset = self._offset(feats, proposer)
        if model is None:
            alpha, var = _sigmoid(offset), self.prior_var * float(feats.x @ feats.x)
        else:
            alpha, var = model.predict(feats.x, offset)
        n_eff = min(self.max_n_eff, 1.0 / max(alpha * (1.0 - alpha) * var, 1e-12))
        rate = 1.0
        if proposer in _LOOKUP_PROPOSERS:
            pm = self._propose.get(proposer)
            rate = pm.predict(feats.x, _logit(_PRIOR_PROPOSE_RATE))[0] if pm is not None else _PRIOR_PROPOSE_RATE
        return Prediction(alpha, rate, n_eff)

    def _dx(self, feats: RequestFeatures, top: str) -> np.ndarray | None:
        """[d] the request's features less its class's mean, temperature left out: a request's sampling regime
        already picks its class-level estimate (greedy or sampled keys of the AlphaTable), so the shift must
        not count it twice. None for a class not seen yet."""
        mean = self._class_mean.get(top)
        return None if mean is None else (feats.x - mean) * _SHIFT_MASK

    def _top(self, feats: RequestFeatures, content_class: str | None) -> str:
        return content_class if content_class in self._class_index else \
            CONTENT_CLASSES[int(np.argmax(feats.class_scores))]

    def shift(self, feats: RequestFeatures, proposer: str, content_class: str | None = None) -> tuple[float, float]:
        """(alpha, propose rate) logit shifts of this request from the average observed request of its class,
        gated by what the shifts have earned so far (`Gate`) and rounded to `SHIFT_STEP` (so the plan caches,
        keyed by alpha buckets, still hit). (0, 0) untrained or for a class not seen yet."""
        top = self._top(feats, content_class)
        dx = self._dx(feats, top)
        if dx is None:
            return 0.0, 0.0
        out = []
        for table, gate in ((self._alpha, self._gate_alpha), (self._propose, self._gate_rate)):
            model, g = table.get(proposer), gate.get((proposer, top))
            lam = 0.0 if g is None else g.weight
            z = lam * float(model.m @ dx) if model is not None and lam > 0.0 else 0.0
            out.append(round(z / SHIFT_STEP) * SHIFT_STEP)
        return out[0], out[1]

    def adjust(self, feats: RequestFeatures, proposer: str, alpha: float, propose_rate: float = 1.0,
               content_class: str | None = None, gated: bool = False) -> tuple[float, float]:
        """A class-level (alpha, propose_rate) — e.g. the live `AlphaTable` estimate of this worker, proposer
        and class — moved by how far this request's features put it from the average observed request of
        its class (`content_class`, default the top class score): logit shift = weights . (x - mean x of the
        class). Untrained (or a class not seen yet): returned unchanged. This keeps the table's per-worker
        level and drift, and adds the per-request part. `gated`: the shift as `shift` gives it (what a policy
        plans with); else the model's raw shift."""
        if gated:
            za, zr = self.shift(feats, proposer, content_class)
        else:
            dx = self._dx(feats, self._top(feats, content_class))
            if dx is None:
                return alpha, propose_rate
            model, pm = self._alpha.get(proposer), self._propose.get(proposer)
            za = float(model.m @ dx) if model is not None else 0.0
            zr = float(pm.m @ dx) if pm is not None else 0.0
        return _shifted(alpha, za), _shifted(propose_rate, zr)

    def view(self, alphas: AlphaSource, feats: RequestFeatures, content_class: str) -> RequestAlphas:
        """`alphas` as one request sees them: its own class's estimates moved by its gated shift (`shift`)."""
        return RequestAlphas(alphas, self, feats, content_class)

    def _note_class_mean(self, feats: RequestFeatures, content_class: str | None = None) -> None:
        top = self._top(feats, content_class)
        n = self._class_n.get(top, 0) + 1
        self._class_n[top] = n
        mean = self._class_mean.get(top)
        if mean is None:
            self._class_mean[top] = feats.x.copy()
        else:
            mean += (feats.x - mean) * max(1.0 / n, 1.0 / _CLASS_MEAN_WINDOW)

    def observe(self, feats: RequestFeatures, proposer: str, draft_tokens: int, accepted_tokens: int, steps: int,
                drafts: int | None = None, tried_per_position: Sequence[float] | None = None,
                accepted_per_position: Sequence[float] | None = None, *, content_class: str | None = None,
                class_alpha: float | None = None, class_rate: float | None = None) -> None:
        """Learn from one finished request's `usage.speculative` (cumulative for the request).

        Trials for alpha: the draft positions verified (sum of `tried_per_position`, when given: exact);
        else `drafts` steps of gamma = draft_tokens / drafts, with the failures the truncated-geometric
        moment fit implies (as `estimators.AlphaTable.observe` does). `content_class`: the class the request
        was decided in (default: its top class score). `class_alpha` / `class_rate`: the class-level estimates
        the request's decision was moved from (the live table's, read before this request is counted in it):
        they score the shift against the outcome before the model learns from it, which is what the `Gate`
        weighs."""
        if draft_tokens < 0 or accepted_tokens < 0 or steps < 0 or accepted_tokens > draft_tokens:
            raise ValueError(f"bad speculative usage: draft_tokens={draft_tokens} accepted_tokens={accepted_tokens} "
                             f"steps={steps}")
        n_drafts = steps if drafts is None else drafts
        if tried_per_position and accepted_per_position:
            trials, succ = float(sum(tried_per_position)), float(sum(accepted_per_position))
        elif draft_tokens > 0 and n_drafts > 0:
            gamma = draft_tokens / n_drafts
            a = alpha_from_steps(accepted_tokens, n_drafts, gamma)
            succ = float(accepted_tokens)
            trials = succ + n_drafts * (1.0 - a**gamma)
        else:
            trials = succ = 0.0
        rate_obs = proposer in _LOOKUP_PROPOSERS and drafts is not None and steps > 0
        # prequential: score the raw shifts on this outcome first, then learn from it
        key = (proposer, self._top(feats, content_class))
        if trials > 0 and class_alpha is not None and 0.0 < class_alpha < 1.0:
            moved = self.adjust(feats, proposer, class_alpha, content_class=content_class)[0]
            self._gate(self._gate_alpha, key).update(class_alpha, moved, succ / trials, trials / self.max_trials)
        if rate_obs and class_rate is not None and 0.0 < class_rate < 1.0:
            moved = self.adjust(feats, proposer, 0.5, class_rate, content_class=content_class)[1]
            self._gate(self._gate_rate, key).update(class_rate, moved, min(drafts, steps) / steps,
                                                    steps / self.max_trials)
        self._note_class_mean(feats, content_class)
        if trials > 0:
            scale = min(1.0, self.max_trials / trials)
            self._model(self._alpha, proposer).update(feats.x, self._offset(feats, proposer), succ * scale,
                                                      trials * scale)
        if rate_obs:
            scale = min(1.0, self.max_trials / steps)
            self._model(self._propose, proposer).update(feats.x, _logit(_PRIOR_PROPOSE_RATE),
                                                        min(drafts, steps) * scale, steps * scale)

    @staticmethod
    def _gate(table: dict[tuple[str, str], Gate], key: tuple[str, str]) -> Gate:
        g = table.get(key)
        if g is None:
            g = table[key] = Gate()
        return g

    def to_dict(self) -> dict:
        return {"alpha": {p: m.to_dict() for p, m in self._alpha.items()},
                "propose": {p: m.to_dict() for p, m in self._propose.items()},
                "class_mean": {c: [m.tolist(), self._class_n[c]] for c, m in self._class_mean.items()},
                "gate": {"alpha": [[p, c, g.to_dict()] for (p, c), g in self._gate_alpha.items()],
                         "propose": [[p, c, g.to_dict()] for (p, c), g in self._gate_rate.items()]}}

    def load_dict(self, d: Mapping) -> None:
        self._alpha = {p: OnlineLogistic.from_dict(v) for p, v in d.get("alpha", {}).items()}
        self._propose = {p: OnlineLogistic.from_dict(v) for p, v in d.get("propose", {}).items()}
        self._class_mean = {c: np.asarray(v[0], dtype=float) for c, v in d.get("class_mean", {}).items()}
        self._class_n = {c: int(v[1]) for c, v in d.get("class_mean", {}).items()}
        gates = d.get("gate", {})
        self._gate_alpha = {(p, c): Gate.from_dict(v) for p, c, v in gates.get("alpha", [])}
        self._gate_rate = {(p, c): Gate.from_dict(v) for p, c, v in gates.get("propose", [])}


def _shifted(p: float, z: float) -> float:
    """p moved by z on the logit scale (0 and 1 stay)."""
    if z == 0.0 or not 0.0 < p < 1.0:
        return p
    return _sigmoid(_logit(p) + z)


class Gate:
    """How much of a correction to trust: the online least-squares weight w in [0, 1] of
    `estimate = c + w (a - c)`, c the class-level estimate, a the corrected one, y the outcome, each scored
    before the model learnt from it (prequential). w is the least-squares slope of y - c on a - c over the
    outcomes seen, taken at its lower confidence bound (`GATE_Z` standard errors below, the outcomes' spread
    around the class level as the noise), shrunk towards 0 by `prior` and clipped: a few outcomes that happen
    to agree with the correction do not outvote the class level (a thin posterior never outvotes the prior);
    many that agree give it nearly its least-squares weight. On the outcomes seen the gated estimate is never
    worse than the class level: at w = 0 it *is* the class level. Old evidence fades with `decay` per
    observation (the model and the traffic drift)."""

    __slots__ = ("sxy", "sxx", "syy", "n", "prior", "decay")

    def __init__(self, prior: float = GATE_PRIOR, decay: float = GATE_DECAY) -> None:
        self.sxy = self.sxx = self.syy = self.n = 0.0
        self.prior, self.decay = prior, decay

    @property
    def weight(self) -> float:
        if self.sxx <= 0.0:
            return 0.0
        noise = math.sqrt(self.syy / max(self.n, 1.0))  # sd of y - c: the slope's noise, on the cautious side
        return min(max((self.sxy - GATE_Z * noise * math.sqrt(self.sxx)) / (self.sxx + self.prior), 0.0), 1.0)

    def update(self, c: float, a: float, y: float, weight: float = 1.0) -> None:
        """One outcome y of a request whose class-level estimate was c and corrected estimate a; `weight`
        (capped at 1): how much the outcome tells (a request of few draft tokens tells little)."""
        w, keep = min(max(weight, 0.0), 1.0), 1.0 - self.decay
        d, e = a - c, y - c
        self.sxx = self.sxx * keep + w * d * d
        self.sxy = self.sxy * keep + w * d * e
        self.syy = self.syy * keep + w * e * e
        self.n = self.n * keep + w

    def to_dict(self) -> dict:
        return {"sxy": self.sxy, "sxx": self.sxx, "syy": self.syy, "n": self.n}

    @classmethod
    def from_dict(cls, d: Mapping) -> Gate:
        g = cls()
        g.sxy, g.sxx, g.n = float(d["sxy"]), float(d["sxx"]), float(d.get("n", 0.0))
        g.syy = float(d.get("syy", 0.0))
        return g


class RequestAlphas:
    """An `AlphaSource` for one request's decision: `base` (the live table, or its regime view), with the
    estimates of the request's own class moved by the predictor's gated shift (alpha, its per-position
    rates and the propose rate alike). Other classes (a batch's class mix) read through unchanged."""

    __slots__ = ("base", "predictor", "feats", "content_class", "_shifts")

    def __init__(self, base: AlphaSource, predictor: AcceptancePredictor, feats: RequestFeatures,
                 content_class: str) -> None:
        self.base, self.predictor, self.feats, self.content_class = base, predictor, feats, content_class
        self._shifts: dict[str, tuple[float, float]] = {}

    @property
    def class_level(self) -> AlphaSource:
        """The estimates before this request's shift (what a batch-wide plan over a class mix reads)."""
        return self.base

    def get(self, worker: str, proposer: str, content_class: str) -> AlphaEstimate:
        est = self.base.get(worker, proposer, content_class)
        if content_class != self.content_class:
            return est
        z = self._shifts.get(proposer)
        if z is None:
            z = self._shifts[proposer] = self.predictor.shift(self.feats, proposer, content_class)
        za, zr = z
        if za == 0.0 and zr == 0.0:
            return est
        per_pos, walked = est.per_position, est.walk_rates
        if za:
            per_pos = None if per_pos is None else tuple(_shifted(a, za) for a in per_pos)
            walked = None if walked is None else tuple(_shifted(a, za) for a in walked)
        return AlphaEstimate(_shifted(est.mean, za), est.std, est.n, per_pos, _shifted(est.propose_rate, zr),
                             reports=est.reports, walk_rates=walked)
