"""Online step-time calibration: a worker's step-time coefficients, fitted from its telemetry counters.

The windows of `telemetry.StepCounters` satisfy (telemetry.py) a linear model with one row per window

    step_seconds = o * steps + c * batched_tokens + k * kv_tokens + sum_p (a_p * passes_p + b_p * tokens_p)

The noise of a window is the sum of its steps' noise, so its variance grows with `steps`: each window is
weighted by 1/steps (the per-step means x/steps, y/steps weighted by steps). `StepCalibrator` keeps the
sufficient statistics of that weighted regression, discounted by 0.5 per `half_life_steps` engine steps
(forgetting), O(1) memory and time per window:

    S = sum x x^T / steps      r = sum x y / steps      q = sum y^2 / steps      N = sum steps

and solves, when asked, the ridge-to-prior problem with non-negative coefficients

    min_theta  sum (y - x theta)^2 / steps + sum_j D_j (theta_j - theta0_j)^2    subject to  theta >= 0

(`nnls_quadratic`, an active-set method on the d x d normal equations, d <= 7), where theta0 are the
coefficients of the profile the proxy was given (the prior) and D_j = prior_steps / [(S/N)^-1]_jj: the prior
is worth `prior_steps` engine steps of the information that identifies each coefficient given the others (a
diagonal ridge on the raw S_jj would pull hard on coefficients whose regressors are nearly collinear, e.g.
the intercept next to batched tokens, or drafted tokens inside batched tokens).

Identification. With a constant batch the intercept and the per-token slope cannot be told apart (the
regressors are collinear). A slope is fitted only when its regressor per step varies enough across windows
once the regressors before it are accounted for (relative residual spread >= `min_spread`); until then it
keeps the prior's value and the intercept absorbs the level; so does a fitted slope whose standard error
exceeds its value while the prior lies within two errors of it (the data neither determine nor contradict
it). The model is `trusted` once enough steps were seen (`min_steps`, fewer when the profile is far off:
`required_steps`) AND it predicts the windows better than the profile: before each window is added (once
the fit has a tenth of `min_steps` behind it), both predict it (the profile at the window's per-step means,
so a roofline keeps its max(); with prompt tokens in a window, the range between those tokens spread over its steps
and each priced at the compute slope, since the counters do not say which steps carried the chunks, and the
profile's error is the window's distance from that range; the fit linearly) and their discounted squared errors are compared
(prequential, out of sample, over the regression's horizon); or the profile is biased now, its mean error
over the last few dozen windows beyond 4 standard errors and 20% of the step (then a tenth of `min_steps`
is enough: least squares is unbiased by construction, and per-step noise as large as the step — prefill
steps among decodes — hides a 5x error from squared errors for hundreds of steps). A right profile that the
linear form cannot express (a GPU roofline) keeps pricing; a wrong one is replaced as soon as the fit
predicts better. Trust does not flicker with the load: the squared errors span the regression's horizon.

Collinearity. Batched and KV tokens per step both grow with the number of running requests, and a model
proposer's passes and drafted tokens with the drafting share at a fixed gamma: the data then determine the
sum of a pair's costs, not how it splits, and the split decides a drafted token's price (batched, not KV).
Such a pair (the target's two slopes; each proposer's two costs the profile prices: per pass and per token, or
per call and per token for a head priced per drafting step) is fitted as ONE scale s
of the profile's coefficients (theta_g = s * theta0_g: the profile's ratio, the data's level; a profile
measured elsewhere is off mostly by a common factor) when either (a) one member is not identified next to
one that is (holding it at the prior's value would load its whole error onto the other), or (b) both are
fitted but the design is ill-conditioned, their estimates correlating below -0.9 with a relative standard
error above `weak_rel` (10%), or (a model proposer's pair) a member's relative standard error is above 25%
whatever the correlation (`loose_rel`: a split that loose must not move a price by a factor the data do not show;
one above 100% is held at the prior instead, below), and the fitted ratio is within two standard errors of the
profile's (Wald test). Data that separate the pair, or contradict the ratio, fit both freely.
`CalibratedCosts.tied` names them.

The drafted token's price. A drafted token is a batched token with almost no KV, so its price, the batched-token
slope, decides every speculation choice; yet along the policy's own traffic batched and KV tokens grow together
(running requests x their draft length, and x their context), and what separates them there (prompts at batch 1,
n-gram hit rates) does not pin that slope where it matters: a worker whose step is not exactly linear in the
regressors gets a split that fits its traffic and misprices drafting (docs/results/calibration.md, 2026-12-02).
`drafted_contrast` measures what the windows say about it by design, whatever the residuals: the relative spread of
drafted tokens per step left once requests and KV tokens per step are accounted for (sqrt(residual / explained);
the moments of [steps, requests, KV tokens, drafted tokens] kept alongside S, weighted and discounted alike), and
`contrast_steps` = steps x contrast^2 its evidence, in engine steps' worth of drafted tokens varying fully on their
own (drafting on in half the steps and off in the others gives contrast 1). Below `probe_steps` (default 0: never)
of it the fit asks for contrast (`CalibratedCosts.probe`): the policy then admits a small share of requests with speculation toggled
(control/calibration_probe.py), windows at the same batch with and without drafted tokens, and stops once the
evidence is there (a share p of probes alone gives contrast sqrt(p / (1 - p)): 1/8 needs 7 x `probe_steps` steps).
It reads no residuals: a misspecified worker's standard errors are small and wrong.

Calls and passes. A model proposer's cost per call (a drafting step, whatever its passes: a head priced per step),
per pass (each of its gamma sequential passes: a draft model, a head priced per pass) and per drafted token are told
apart only by windows whose passes per call differ (call vs pass) and whose batches differ (pass vs token: at batch
1 a pass drafts one token). They are identified in the order pass, call, token: a cost the windows cannot separate
from an earlier one keeps the profile's value, and what the profile does not explain lands on the per-pass cost.
So a right profile is kept whatever the split (its per-call head: the pass fits ~0 on the rest), and a wrong one is
corrected where the error is cheapest to find out: a head priced per call at gamma 8 that really costs per pass,
or a draft cost that grows at batch 1, are priced per pass, which makes the shorter drafts and larger batches the
policy has not run yet cheaper rather than dearer. An option priced too cheaply gets run and measured; one priced
too dearly never would be (a fit that put a head's per-step cost on drafted tokens priced it 8x too high at batch
32, and the policy stopped drafting with it). And when the fitted price of what a proposer ran differs from the
profile's by more than `split_tol` (25%) while its three costs are not all identified, the policy probes what the
windows lack (control/calibration_probe.py `GammaProbe`): a share of the proposer's requests at half the gamma while
calls and passes are not told apart (`CalibratedCosts.split_probe`), and at load a share of the requests it planned
otherwise with the proposer at gamma 2 while passes and tokens are not (`token_probe`: several requests drafting in
one call), until the windows separate the costs. A wrong
prior for a cost the windows cannot separate is kept only until then: the probes are what corrects it.

Calls larger than the windows held. A line fitted through a head's calls for one or two requests at gamma 1-2 says
little about a call for 16 requests at gamma 3: its slopes carry whatever per-call time the profile lacks (there, a
per-token cost 5x the head's, its pass held at the profile's), and drawn out 4-40x they priced such calls at 2-3x
their cost on the reference worker (a cold proxy at 16 clients planned off on 91% of its requests, 0.80x of static
EAGLE:3). `CalibratedCosts.seen` keeps the largest passes and drafted tokens per call of any window, for a proposer
whose fitted costs the windows determine loosely (a relative standard error above `weak_rel`; a line they pin down
is drawn out as it is); past them a call costs the cheaper of the fit's price and the profile's at this box's speed
(the target's fitted step over the profile's), never less than the fit's price of the largest seen call it holds
(`DraftCost.time`). The cheaper side is the one that corrects itself: a call priced too cheaply is planned, run,
and its windows widen `seen`; one priced too dearly would never be run to show it is not.

Errors. sigma^2 (per-step noise) is the weighted residual sum of squares over the windows' degrees of
freedom; the standard error of each fitted coefficient is sigma * sqrt(diag((S + D)^-1)) (NaN for
coefficients held at the prior).

Output: `CalibratedCosts` (control/calibration_costs.py, re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from adaptspec.control.calibration_costs import CalibratedCosts
from adaptspec.control.calibration_design import (  # noqa: F401  (re-exported: the fit's public design)
    BASE_FEATURES,
    MODEL_PROPOSERS,
    feature_names,
    nnls_quadratic,
    prior_coefficients,
    regressors,
)
from adaptspec.control.profiles import Profile
from adaptspec.control.telemetry import StepCounters

_GRID = 2.0 ** (1.0 / 24.0)  # ~2.9% steps for the snapped coefficients
_CLEAR_WIN = 4.0  # a fit whose prequential error is below 1/4 of the profile's needs proportionally fewer steps
_MIN_EVIDENCE = 0.1  # ... down to this share of min_steps
_MIN_WINDOWS = 8.0  # and never fewer telemetry windows than this
_ERR_DECAY = 0.5 ** (1.0 / 16.0)  # the profile's recent bias: half-life of 16 windows
_BIAS_T = 4.0  # a profile whose mean error is this many standard errors from 0 ...
_BIAS_REL = 0.2  # ... and at least this share of the measured step time is systematically off
_COLLINEAR = 0.9  # two slopes whose estimates correlate below -0.9: the data determine their sum, not each


def _snap(x: float) -> tuple[float, int | None]:
    """x on a ~3% geometric grid, and its grid index (None for 0)."""
    if x <= 0.0 or not math.isfinite(x):
        return 0.0, None
    i = round(math.log(x) / math.log(_GRID))
    return _GRID**i, i


@dataclass
class StepCalibrator:
    """Recursive weighted least squares with forgetting on step-telemetry windows, one per worker.

    `update(cumulative)` takes scraped cumulative counters (the first call, and the first after a reset,
    only set the baseline); `observe(window)` takes one window's deltas directly (simulators)."""

    prior: Profile
    prior_steps: float = 20.0
    half_life_steps: float = 20_000.0
    min_steps: float = 300.0
    min_spread: float = 0.05
    weak_rel: float = 0.1  # a coefficient whose standard error exceeds this share of it is weakly identified
    loose_rel: float = 0.25  # ... and a pair with one this loose is fitted at the profile's ratio (`_ties`)
    probe_steps: float = 0.0  # ask for probes while contrast_steps is below this (0: never; opt in, e.g. 300)
    split_tol: float = 0.25  # a profile whose price of a proposer's calls is off by more: its split is in doubt
    proposers: tuple[str, ...] = MODEL_PROPOSERS
    names: tuple[str, ...] = field(init=False)
    theta0: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if self.prior_steps <= 0 or self.half_life_steps <= 0 or self.min_steps < 0:
            raise ValueError("prior_steps and half_life_steps must be > 0, min_steps >= 0")
        self.names = feature_names(self.proposers)
        self.theta0 = prior_coefficients(self.prior, self.proposers)
        self.reset()

    def reset(self) -> None:
        """Forget every window and the baseline (the prior stays)."""
        d = len(self.names)
        self._s = np.zeros((d, d))  # sum x x^T / steps
        self._r = np.zeros(d)  # sum x y / steps
        self._q = 0.0  # sum y^2 / steps
        self._windows = 0.0  # discounted number of windows
        self._ctx = np.zeros(2)  # [KV tokens, requests] of the windows whose engine counts requests per step
        self._u = np.zeros((4, 4))  # sum u u^T / steps, u = [steps, requests, KV, drafted tokens] (same windows)
        self._err = np.zeros(2)  # discounted prequential squared errors per step: [fit, profile]
        self._err_windows = 0.0  # the windows behind them (discounted alike)
        # the profile's residual per step r = (y - profile) / steps, weighted by steps (discounted alike):
        # [sum n, sum n^2, sum n r, sum n r^2, sum y] -> its bias and the bias's standard error
        self._bias = np.zeros(5)
        self._last: StepCounters | None = None
        self._cached: CalibratedCosts | None = None
        self._grid: tuple[int | None, ...] | None = None  # the last fit's grid indices (`_hold`)
        self._free = np.zeros(d, dtype=bool)  # what the last fit identified (`_identified`'s hysteresis)
        # per model proposer: the largest passes and drafted tokens per call of any window (`CalibratedCosts.seen`)
        self._seen: dict[str, tuple[float, float]] = {}

    @property
    def steps(self) -> float:
        return float(self._s[0, 0])

    def update(self, cumulative: StepCounters) -> bool:
        """Feed one scrape of cumulative counters; True when a window was added. A counter that went down
        (engine restart) makes this scrape the new baseline; the fit so far is kept."""
        last, self._last = self._last, cumulative
        if last is None:
            return False
        window = cumulative.since(last)
        return window is not None and self.observe(window)

    def observe(self, w: StepCounters) -> bool:
        """Add one window of deltas; windows without steps or with non-finite / negative values are ignored."""
        x = regressors(w, self.proposers)  # [d]
        y = float(w.step_seconds)
        n = float(w.steps)
        if n < 1.0 or not (math.isfinite(y) and y >= 0.0 and np.isfinite(x).all() and (x >= 0).all()):
            return False
        lam = 0.5 ** (n / self.half_life_steps)
        lo, hi = self._prior_range(w, x)
        prior_y = min(max(y, lo), hi)  # the profile's error is the window's distance from what it allows
        fit_y = float(x @ np.asarray(list(self.costs().coefficients.values()))) if self.steps > 0 else prior_y
        # fit vs profile, out of sample, over the regression's own horizon (forgetting by steps), scored once
        # the fit has seen a tenth of min_steps (its first, immature predictions would weigh for long)
        if self.steps >= self.min_steps * _MIN_EVIDENCE:
            self._err = lam * self._err + np.array([(y - fit_y) ** 2, (y - prior_y) ** 2]) / n
            self._err_windows = lam * self._err_windows + 1.0
        # the profile's bias over the recent windows (a few dozen)
        r = (y - prior_y) / n
        self._bias = lam * _ERR_DECAY * self._bias + np.array([n, n * n, n * r, n * r * r, y])
        for i, p in enumerate(self.proposers):
            calls, passes, tokens = x[3 + 3 * i], x[4 + 3 * i], x[5 + 3 * i]
            if passes > 0.0:  # an engine that does not count calls: one a step
                per = calls if calls > 0.0 else n
                was = self._seen.get(p, (0.0, 0.0))
                self._seen[p] = (max(was[0], passes / per), max(was[1], tokens / per))
        self._s = lam * self._s + np.outer(x, x) / n
        self._r = lam * self._r + x * y / n
        self._q = lam * self._q + y * y / n
        self._windows = lam * self._windows + 1.0
        self._ctx = lam * self._ctx
        self._u = lam * self._u
        if w.requests > 0:  # an engine that counts requests per step
            self._ctx += np.array([w.kv_tokens, w.requests])
            u = np.array([n, w.requests, w.kv_tokens, float(sum(w.drafted_tokens.values()))])  # [4]
            self._u += np.outer(u, u) / n
        self._cached = None
        return True

    def _prior_range(self, w: StepCounters, x: np.ndarray) -> tuple[float, float]:
        """What the profile predicts for a window, as the range its steps allow: its target model at the window's
        per-step means (nonlinear forms kept), plus its drafting in the linear window form.

        A roofline with prompt tokens in the window (the engine counts requests per step, so the window's batched
        tokens beyond its decode rows are prompt chunks) cannot be pinned from the window's sums: which steps
        carried the chunks is not counted. Spread over every step (the target at the mean batched tokens) is the
        low end (the max() is convex); every prompt token at the compute slope on top of the decode rows at their
        means is the high end (chunks so large that their steps are compute-bound whatever rode with them). A
        window inside the range does not tell the profile wrong: scoring it against either end would judge a
        right roofline biased by the prompts' chunking (h200-llama3-70b at c=1-8: the upper end over-predicted
        every prompt step by up to a third, the linear fit took over and priced drafted tokens at the compute
        slope where decode steps verify them free). Additive forms and windows without prompts are points."""
        n = float(w.steps)
        t = self.prior.target
        drafting = float(x[3:] @ self.theta0[3:])
        rows = w.requests + float(sum(w.drafted_tokens.values()))  # one row per request + its drafted tokens
        prompt = w.batched_tokens - rows
        spread = n * t.time(w.batched_tokens / n, w.kv_tokens / n) + drafting
        if w.requests <= 0 or t.additive or prompt <= 0.0:
            return spread, spread
        apart = n * t.time(rows / n, w.kv_tokens / n) + t.compute_s_per_token * prompt + drafting
        return min(spread, apart), max(spread, apart)

    # -- the fit ---------------------------------------------------------------------------------------
    def _identified(self) -> np.ndarray:
        """Which coefficients the data identify, in order (a slope needs residual spread, see module doc). With
        hysteresis for a proposer's costs: one the last fit identified stays identified while its spread is at
        least half of `min_spread`, so a spread hovering at the threshold does not toggle a price between the
        prior's value and the fit's at every refit (seen: a head's call cost 0 and 1.7 ms on alternate scrapes).
        The target's slopes have none: a KV slope barely identified early must not escape the pair's tie."""
        d = len(self.names)
        free = np.zeros(d, dtype=bool)
        n = self.steps
        if n <= 0:
            return free
        g = self._s / n  # per-step second moments
        free[0] = True
        # per proposer: per pass, then per call, then per drafted token (module doc, "Calls and passes"): a cost
        # the data cannot separate from one before it keeps the prior's value, and what the prior does not explain
        # lands on the earlier one, which prices the unexplored side (shorter drafts, larger batches) cheaper
        order = [1, 2] + [3 + 3 * i + k for i in range(len(self.proposers)) for k in (1, 0, 2)]
        for j in order:
            gjj = g[j, j]
            if gjj <= 0:
                continue
            idx = np.where(free)[0]
            resid = gjj - g[j, idx] @ np.linalg.lstsq(g[np.ix_(idx, idx)], g[idx, j], rcond=None)[0]
            explained = max(gjj - resid, 1e-300)
            held = j >= 3 and self._free[j]  # a proposer's cost (the target's pair has its own tie rule)
            if resid > 0 and math.sqrt(resid / explained) >= self.min_spread * (0.5 if held else 1.0):
                free[j] = True
        self._free = free.copy()
        return free

    def costs(self) -> CalibratedCosts:
        """The current fit (cached until the next window)."""
        if self._cached is None:
            self._cached = self._fit()
        return self._cached

    def _solve(self, free: np.ndarray, tied: Sequence[np.ndarray] = ()
               ) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
        """(coefficients, standard errors, sigma, covariance [d, d]) with the `free` ones fitted and the others at the prior;
        each group in `tied` (indices, all free) is fitted as one scale s of the prior's coefficients there
        (theta_g = s * theta0_g: the profile's ratios, the data's level).

        The fit is over phi, theta = B phi + (theta0 where not free): B has a unit column per untied free
        coefficient and the column theta0_g per tied group (whose prior value is s = 1)."""
        theta = self.theta0.copy()
        d = len(self.names)
        errors = np.full(d, math.nan)
        sigma = math.nan
        cov = np.full((d, d), math.nan)
        if not free.any():
            return theta, errors, sigma, cov
        n = self.steps
        in_tie = np.zeros(d, dtype=bool)
        for g in tied:
            in_tie[g] = True
        cols = [np.eye(d)[j] for j in np.where(free & ~in_tie)[0]]
        phi0 = [self.theta0[j] for j in np.where(free & ~in_tie)[0]]
        for g in tied:
            col = np.zeros(d)
            col[g] = self.theta0[g]
            cols.append(col)
            phi0.append(1.0)
        b = np.stack(cols, axis=1)  # [d, f]
        phi0 = np.asarray(phi0)  # [f]
        off = np.where(free, 0.0, self.theta0)  # [d] the coefficients held at the prior
        s_b = b.T @ self._s @ b  # [f, f]
        # the prior: worth prior_steps steps of each parameter's own (partial) information per step
        partial = 1.0 / np.diag(np.linalg.pinv(s_b / n))
        ridge = self.prior_steps * np.clip(partial, 0.0, None)
        m = s_b + np.diag(ridge)
        g = b.T @ (self._r - self._s @ off) + ridge * phi0
        theta = b @ nnls_quadratic(m, g) + off
        rss = self._q - 2.0 * theta @ self._r + theta @ self._s @ theta
        dof = self._windows - b.shape[1]
        if dof > 0.5:
            sigma = math.sqrt(max(rss, 0.0) / dof)
            cov = sigma**2 * (b @ np.linalg.inv(m) @ b.T)  # [d, d]
            errors[free] = np.sqrt(np.clip(np.diag(cov), 0.0, None))[free]
        return theta, errors, sigma, cov

    def _groups(self) -> list[np.ndarray]:
        """Coefficients that share a scale when the data cannot split them: the target's two slopes (batched
        and KV tokens grow together with the number of running requests), each model proposer's per-pass
        and per-token costs (passes and drafted tokens grow together at a fixed gamma)."""
        out = [np.array([1, 2])]
        for i in range(len(self.proposers)):
            # per pass and per token, where the profile prices both (a draft model, a head priced per pass); a head
            # priced per call and token is not tied: what its prior does not explain goes to the per-pass cost
            g = np.array([4 + 3 * i, 5 + 3 * i])
            if (self.theta0[g] > 0).all():
                out.append(g)
        return out

    def _ties(self, free: np.ndarray, theta: np.ndarray, errors: np.ndarray, cov: np.ndarray) -> list[np.ndarray]:
        """The groups to fit at the profile's ratios (module doc, Collinearity): the prior is positive on the
        whole group, every member has data; and either a member is not identified next to one that is,
        or all are fitted but weakly (estimates correlated below -0.9 and a relative standard error above
        `weak_rel`, or for a model's pair a relative standard error above `loose_rel` whatever the correlation)
        and their fitted ratio is within two standard errors of the profile's (a Wald test of
        theta_i theta0_j = theta_j theta0_i)."""
        out = []
        g_s = np.diag(self._s)
        for g in self._groups():
            if not (self.theta0[g] > 0).all() or not free[g].any() or not (g_s[g] > 0).all():
                continue
            if not free[g].all():
                out.append(g)
                continue
            i, j = g[0], g[1]
            if not np.isfinite(cov[np.ix_(g, g)]).all():  # too few windows for errors yet
                continue
            corr = cov[i, j] / max(math.sqrt(cov[i, i] * cov[j, j]), 1e-300)
            scale = np.maximum(theta[g], 1e-300)
            # a model's split the windows determine loosely (a slope they hardly determine at all, its error
            # above its value, is held at the prior below instead)
            loose = i > 2 and (errors[g] > self.loose_rel * scale).any() and (errors[g] <= scale).all()
            if not (errors[g] > self.weak_rel * scale).any() or (corr > -_COLLINEAR and not loose):
                continue
            contrast = theta[i] * self.theta0[j] - theta[j] * self.theta0[i]
            grad = np.zeros(len(theta))
            grad[i], grad[j] = self.theta0[j], -self.theta0[i]
            var = float(grad @ cov @ grad)
            if contrast * contrast <= 4.0 * var:
                out.append(g)
        return out

    def drafted_contrast(self) -> float:
        """sqrt(residual / explained) of drafted tokens per step regressed on [1, requests, KV tokens] per step
        (weighted, discounted): 0 when the windows' drafting only follows the batch, inf when it varies on its
        own; NaN without windows that count requests."""
        g = self._u  # [4, 4]
        if g[0, 0] <= 0 or g[3, 3] <= 0:
            return math.nan if g[0, 0] <= 0 else 0.0
        b = np.linalg.lstsq(g[:3, :3], g[:3, 3], rcond=None)[0]
        resid = max(float(g[3, 3] - g[:3, 3] @ b), 0.0)
        explained = float(g[3, 3]) - resid
        return math.inf if explained <= 0 else math.sqrt(resid / explained)

    def _split_probe(self, free: np.ndarray, theta: np.ndarray) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(proposers whose per-call and per-pass costs are not both identified, those whose per-pass and per-token
        costs are not), among the model proposers that ran and whose fitted cost of what they ran differs from the
        profile's by more than `split_tol` (module doc, "Calls and passes")."""
        calls, tokens = [], []
        totals = self._s[0]  # [d]: each regressor summed over the windows (S[0, j] = sum x_j, discounted)
        for i, p in enumerate(self.proposers):
            jc, jp, jt = 3 + 3 * i, 4 + 3 * i, 5 + 3 * i
            if totals[jc] <= 0 or totals[jp] <= 0 or (free[jc] and free[jp] and free[jt]):
                continue
            ran = totals[[jc, jp, jt]]
            fitted, prior = float(theta[[jc, jp, jt]] @ ran), float(self.theta0[[jc, jp, jt]] @ ran)
            if abs(fitted - prior) <= self.split_tol * max(prior, 1e-300):
                continue
            if not (free[jc] and free[jp]):
                calls.append(p)
            if not (free[jp] and free[jt]):
                tokens.append(p)
        return tuple(calls), tuple(tokens)

    def required_steps(self) -> float:
        """Engine steps of evidence the fit needs before it is trusted: `min_steps`, or fewer the worse the
        profile has predicted the windows. A profile that is systematically off (its mean error per
        step beyond 4 standard errors and beyond 20% of the mean step: a CPU profile measured at batch <= 64
        asked about batch 128 on a loaded machine) is replaced after a tenth of `min_steps`; otherwise a fit
        whose prequential squared error is below a quarter of the profile's needs proportionally fewer, down
        to the same tenth."""
        if self.profile_biased():
            return self.min_steps * _MIN_EVIDENCE
        fit_err, prof_err = self._err
        if prof_err <= 0.0:
            return self.min_steps
        return self.min_steps * min(1.0, max(_MIN_EVIDENCE, _CLEAR_WIN * fit_err / prof_err))

    def profile_bias(self) -> float:
        """The profile's recent mean error, relative: (seconds measured - predicted) / seconds measured."""
        sn, _, snr, _, sy = self._bias
        return float(snr / sy) if sy > 0 else 0.0

    def profile_bias_t(self) -> float:
        """|mean error per step| of the profile over its standard error (windows as weighted samples)."""
        sn, sn2, snr, snr2, _ = self._bias
        if sn <= 0 or sn2 <= 0:
            return 0.0
        m = snr / sn
        var = max(snr2 / sn - m * m, 0.0)
        n_eff = sn * sn / sn2
        if n_eff < _MIN_WINDOWS:
            return 0.0
        se = math.sqrt(var / n_eff)
        return math.inf if se == 0.0 else abs(m) / se

    def profile_biased(self) -> bool:
        """The profile's recent mean error is beyond `_BIAS_T` standard errors and `_BIAS_REL` of the step."""
        return self.profile_bias_t() >= _BIAS_T and abs(self.profile_bias()) >= _BIAS_REL

    def _trusted(self, n: float) -> bool:
        """Enough evidence, and the fit predicts better than the profile: over the fit's horizon, or because
        the profile is biased now (least squares is not, by construction)."""
        if n < self.required_steps() or self._windows < _MIN_WINDOWS:
            return False
        fit_err, prof_err = self._err
        return bool(self.profile_biased() or (self._err_windows > 0 and fit_err <= prof_err))

    def _hold(self, values: Sequence[float], errors: Sequence[float]) -> tuple[int | None, ...]:
        """Grid indices of `values` with hysteresis: a coefficient keeps its last grid point while the fit stays
        within 1.5 grid points (~4.4%) of it or within one standard error (`errors`, NaN: none) of it; the
        context per request (the last value, an average that follows the requests' progress) within 3.5 points
        (~10%). A fit that only jitters across a grid boundary, or a slope the windows determine loosely, would
        otherwise give the worker a new price list (a new profile name) every few scrapes, and every plan memoised
        under the old one would be recomputed (measured: 162 new names in 400 requests at one client)."""
        grid = tuple(_snap(float(v))[1] for v in values)
        last = self._grid
        if last is not None and len(last) == len(grid):
            held = []
            for i, (new, old) in enumerate(zip(grid, last, strict=True)):
                v, e = float(values[i]), float(errors[i]) if i < len(errors) else math.nan
                band = 3.5 if i == len(grid) - 1 else 1.5
                keep = new is not None and old is not None and (
                    abs(math.log(v) / math.log(_GRID) - old) <= band or abs(v - _GRID**old) <= e)
                held.append(old if keep else new)
            grid = tuple(held)
        self._grid = grid
        return grid

    def _fit(self) -> CalibratedCosts:
        free = self._identified()
        ident = free.copy()  # what the windows identify on their own (a tie fits a group at the prior's ratios)
        n = self.steps
        theta, errors, sigma, cov = self._solve(free)
        tied = self._ties(free, theta, errors, cov)
        for g in tied:
            free[g] = True
        in_tie = np.zeros(len(free), dtype=bool)
        for g in tied:
            in_tie[g] = True
        if tied:
            theta, errors, sigma, _ = self._solve(free, tied)
        # a slope the data hardly determine (standard error above its value) and that does not contradict
        # the prior (within 2 errors of it) keeps the prior's value: noise must not move a cost
        vague = free & ~in_tie & (np.arange(len(free)) > 0) & (errors > np.abs(theta)) & (
            np.abs(theta - self.theta0) <= 2.0 * errors)
        if vague.any():
            free = free & ~vague
            theta, errors, sigma, _ = self._solve(free, tied)
        kv, reqs = self._ctx
        grid = self._hold((*theta, kv / reqs if reqs > 0 and kv > 0 else 0.0), errors)
        key = ".".join("z" if i is None else str(i) for i in grid)
        # the calls seen by a proposer whose fitted costs the windows determine loosely (a relative standard error
        # above `weak_rel`: its line is not to be drawn far out), tokens rounded down to a power of 2 (they price
        # what lies past them: `CalibratedCosts.seen`; a maximum grows with every window, and a finer grid would
        # rename the price list as often)
        seen = {}
        for i, p in enumerate(self.proposers):
            if p not in self._seen:
                continue
            js = [j for j in (3 + 3 * i, 4 + 3 * i, 5 + 3 * i) if free[j]]
            # none fitted: the profile prices it (`apply`), and a range in the name would only rename the price list
            if not js or all(errors[j] <= self.weak_rel * theta[j] for j in js):
                continue
            a, b = self._seen[p]
            seen[p] = (float(math.floor(a)), 2.0 ** math.floor(math.log2(b)) if b >= 1.0 else 0.0)
        key += "".join(f".{p}{a:.0f}-{b:.0f}" for p, (a, b) in sorted(seen.items()))
        *snapped, ctx = (0.0 if i is None else _GRID**i for i in grid)
        batch = float(self._s[0, 1] / n) if n > 0 else 0.0
        contrast = self.drafted_contrast()
        evidence = n * contrast * contrast if math.isfinite(contrast) else math.nan
        split = self._split_probe(ident & free, theta) if n >= self.min_steps * _MIN_EVIDENCE else ((), ())
        return CalibratedCosts(
            coefficients=dict(zip(self.names, (float(t) for t in theta), strict=True)),
            errors=dict(zip(self.names, (float(e) for e in errors), strict=True)),
            fitted=dict(zip(self.names, (bool(f) for f in free), strict=True)),
            # a target priced at nothing is no step model: the profile's held proposer costs over-explained the
            # windows (e.g. passes at a constant gamma, collinear with the intercept, priced 2x) and NNLS zeroed it
            steps=n, trusted=self._trusted(n) and float(theta[0] + theta[1]) > 0.0, sigma_s=sigma, key=key, proposers=self.proposers, batch=batch,
            snapped=dict(zip(self.names, snapped, strict=True)), context_tokens=ctx,
            fit_mse=float(self._err[0] / self._err_windows) if self._err_windows > 0 else math.nan,
            prior_mse=float(self._err[1] / self._err_windows) if self._err_windows > 0 else math.nan,
            tied=tuple(self.names[j] for g in tied for j in g), drafted_contrast=contrast, contrast_steps=evidence,
            probe=bool(math.isfinite(contrast) and evidence < self.probe_steps),
            split_probe=split[0], token_probe=split[1], seen=seen)
