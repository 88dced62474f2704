"""The step-time fit's design: coefficient names, a window's regressor row, a profile's prior in that form, and
the non-negative least-squares solver on the normal equations (control/calibration.py fits with them)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adaptspec.control.profiles import Profile
from adaptspec.control.telemetry import StepCounters

MODEL_PROPOSERS: tuple[str, ...] = ("draft", "eagle")  # proposers with batched model passes
BASE_FEATURES: tuple[str, ...] = ("overhead_s", "compute_s_per_token", "kv_s_per_token")


def feature_names(proposers: Sequence[str] = MODEL_PROPOSERS) -> tuple[str, ...]:
    """Coefficient names, in regressor order: the target's three, then per proposer per-call / per-pass /
    per-token."""
    out = list(BASE_FEATURES)
    for p in proposers:
        out += [f"{p}_call_s", f"{p}_pass_s", f"{p}_token_s"]
    return tuple(out)


def regressors(w: StepCounters, proposers: Sequence[str] = MODEL_PROPOSERS) -> np.ndarray:
    """The regressor row of one window: [steps, batched, kv, calls_p, passes_p, tokens_p, ...]."""
    row = [w.steps, w.batched_tokens, w.kv_tokens]
    for p in proposers:
        row += [float(w.draft_calls.get(p, 0.0)), float(w.draft_passes.get(p, 0.0)),
                float(w.drafted_tokens.get(p, 0.0))]
    return np.asarray(row, dtype=float)  # [d]


def nnls_quadratic(m: np.ndarray, g: np.ndarray, tol: float = 1e-12) -> np.ndarray:
    """argmin 1/2 t^T m t - g^T t subject to t >= 0, for symmetric positive definite m (Lawson-Hanson's
    active set, on the normal equations)."""
    d = len(g)
    t = np.zeros(d)
    free = np.zeros(d, dtype=bool)
    scale = max(float(np.abs(g).max()), 1e-300)
    for _ in range(3 * d + 3):
        grad = g - m @ t  # minus the gradient: positive entries would decrease the objective
        cand = np.where(~free & (grad > tol * scale))[0]
        if len(cand) == 0:
            break
        free[cand[np.argmax(grad[cand])]] = True
        for _ in range(3 * d + 3):
            s = np.zeros(d)
            idx = np.where(free)[0]
            s[idx] = np.linalg.solve(m[np.ix_(idx, idx)], g[idx])
            if (s[idx] > 0).all():
                t = s
                break
            neg = idx[s[idx] <= 0]
            step = min(1.0, float(np.min(t[neg] / np.maximum(t[neg] - s[neg], 1e-300))))
            t = t + step * (s - t)
            free &= t > tol * max(float(t.max()), 1e-300)
            t[~free] = 0.0
    return t


def prior_coefficients(profile: Profile, proposers: Sequence[str] = MODEL_PROPOSERS) -> np.ndarray:
    """The profile's step model in the additive window form (a roofline's max becomes a sum: its upper bound).

    Draft model: `a = overhead + floor` per pass, `b = compute + kv * context` per token (the draft's KV read
    folded into its tokens), nothing per call; EAGLE head, `fraction` form: `fraction` of the target's terms
    per pass and token; EAGLE head, measured per-step form: `overhead_s` per call (a drafting step, whatever
    its passes), `per_token_s` per drafted token (its small KV term left out); other proposers: 0."""
    t = profile.target
    ctx = profile.context_tokens
    theta = [t.overhead_s + t.memory_floor_s, t.compute_s_per_token, t.kv_s_per_token]
    for p in proposers:
        e = a = b = 0.0
        if profile.offers(p):
            cost = profile.draft(p)
            if cost.kind == "draft" and cost.model is not None:
                m = cost.model
                e = cost.call_s
                a, b = m.overhead_s + m.memory_floor_s, m.compute_s_per_token + m.kv_s_per_token * ctx
            elif cost.kind == "eagle" and cost.per_step:
                e, b = cost.overhead_s, cost.per_token_s
            elif cost.kind == "eagle":
                a, b = cost.fraction * theta[0], cost.fraction * (theta[1] + theta[2] * ctx)
        theta += [e, a, b]
    return np.asarray(theta, dtype=float)  # [d]
