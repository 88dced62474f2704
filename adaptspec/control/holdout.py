"""Proof under live traffic: randomized holdouts, switchback windows, the realized speedup and the guard.

Pure bookkeeping (no I/O, no clock of its own); `control/holdout_policy.py` wires it around a policy.

Request level. Every decision falls in a stratum (content class, load bucket of the batch it joins, arm = the
proposer the policy chose). Inside a stratum, block randomisation holds out exactly one request in every
`round(1 / share)` (its position in the block drawn at random), so each stratum gets its share whatever the
traffic mix. Held requests are served without speculation; for every finished request the book keeps its
decode time per output token, d = (end - first token) / (output tokens - 1), per stratum and group.

The estimand is the geometric mean over the stratum's requests of the per-request speedup
d_off / d_spec, i.e. exp(E log d_off - E log d_spec): randomisation makes the held requests a sample of the
same population as the served ones, so the difference of the two groups' mean log d estimates it without
pairing. The 95% interval is Welch's t interval on the log scale: logs make the right-skewed decode times
close to normal and turn the ratio into a difference; Welch does not assume equal variances (speculation
spreads d, acceptance varies per request) and its Satterthwaite degrees of freedom stay honest when the
holdout has a few dozen requests against thousands served. (A bootstrap needs far more CPU per update and
is no better at these sizes.) Interval: exp(diff -+ t_{df, 0.975} * sqrt(s1^2/n1 + s2^2/n2)). For the speedup
of the very requests served (rather than of the traffic they were drawn from) this variance is Neyman's
conservative one: in the simulator the interval covered the paired truth in all 154 strata of 30 runs.

System level (switchback). A held request shares its batch with speculating ones, so it cannot see what
their drafts cost the batch. Switchback windows can: per worker, time is cut into windows of `window_s`; each
window runs the policy or speculation off (off in a `share` of windows: one window in every block of
round(1/share) at a position drawn per (seed, worker, block); share 0.5 gives pairs in random order);
the first `washout_s` of a window are not measured (the batch still holds requests of the previous regime),
and the window's throughput is the output tokens the worker emitted in its measured part (each finished
request's tokens spread evenly over its decode time) divided by that part's length; a window is evaluated
`settle_s` after its end (tokens of requests still running then are left out). The last `cooldown_s` are not
measured either: a request crossing the switch changes pace there, which even spreading misplaces. Nor is any
time before the worker runs the window's regime alone (`RegimeOccupancy`: no request of the other regime still
running): at load the previous regime's last requests can outlast any washout, and a batch with a few drafting
requests pays their draft passes in every step; a window that never runs pure is not measured at all.
Windows are compared within a load bucket by the same log-scale Welch interval, one sample per window.

Guard. A stratum (or, from switchback evidence, a whole load bucket) whose interval lies wholly below 1 is
guarded: its requests run without speculation, except a randomised `share` of them (switchback: of its
windows) that still run the policy's choice, so the evidence can change. It is released once the point
estimate is back at or above 1 (a dead band between engage and release: no flapping). A load bucket's guard
also takes as evidence the requests that ran with their regime alone all their life, one sample each
(`RegimeRequests`, a sequential test that spends its error rate over its looks): at low load that settles
within a few dozen requests instead of several windows a regime. Only the windows release a bucket. (At load
the requests' samples are not independent: requests running at the same time share every step's cost, so
their interval is too narrow when a regime's pure stretches are few; docs/results/holdout.md measures what
that does to the false-trip rate.)
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

# load buckets: the batch a request joins, in powers of two
_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256)

TREATED, CONTROL = "treated", "control"  # request groups: served as the policy decided / without speculation


def load_bucket(batch: float) -> str:
    """'1', '2-3', '4-7', ..., '256+' for the batch a request joins."""
    b = max(1, int(batch + 0.5))
    for lo, hi in zip(_EDGES, _EDGES[1:], strict=False):
        if b < hi:
            return str(lo) if hi - lo == 1 else f"{lo}-{hi - 1}"
    return f"{_EDGES[-1]}+"


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile (Cornish-Fisher expansion, Abramowitz & Stegun 26.7.5; exact for df 1 and 2)."""
    if df < 1.5:
        return math.tan(math.pi * (p - 0.5))
    if df < 3:
        return (2 * p - 1) * math.sqrt(2.0 / (4 * p * (1 - p)))  # df = 2 (conservative for 2 < df < 3)
    z = NormalDist().inv_cdf(p)
    z2 = z * z
    return (z + (z2 + 1) * z / (4 * df) + ((5 * z2 + 16) * z2 + 3) * z / (96 * df ** 2)
            + (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / (384 * df ** 3))


@dataclass(frozen=True, slots=True)
class Interval:
    """Speedup estimate (control over treated time, or treated over control throughput) and its interval."""

    estimate: float
    low: float
    high: float
    n_treated: int
    n_control: int

    def as_dict(self) -> dict:
        return {"speedup": self.estimate, "low": self.low, "high": self.high,
                "n_treated": self.n_treated, "n_control": self.n_control}


def _mean_var(xs: Sequence[float]) -> tuple[float, float]:
    n = len(xs)
    m = sum(xs) / n
    return m, sum((x - m) ** 2 for x in xs) / (n - 1)


def log_ratio_interval(faster: Sequence[float], slower: Sequence[float], confidence: float = 0.95,
                       min_n: int = 2) -> Interval | None:
    """exp(mean log slower - mean log faster) with a Welch t interval; None below `min_n` samples a side.

    For decode times pass (treated, control); for throughputs pass (control, treated): either way a value
    above 1 means speculation made things better.
    """
    if len(faster) < max(2, min_n) or len(slower) < max(2, min_n):
        return None
    la = [math.log(x) for x in faster if x > 0]
    lb = [math.log(x) for x in slower if x > 0]
    if len(la) < 2 or len(lb) < 2:
        return None
    ma, va = _mean_var(la)
    mb, vb = _mean_var(lb)
    sa, sb = va / len(la), vb / len(lb)
    se2 = sa + sb
    diff = mb - ma
    if se2 <= 0:
        return Interval(math.exp(diff), math.exp(diff), math.exp(diff), len(la), len(lb))
    df = se2 * se2 / ((sa * sa / (len(la) - 1) if sa else 0.0) + (sb * sb / (len(lb) - 1) if sb else 0.0))
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(se2)
    return Interval(math.exp(diff), math.exp(diff - half), math.exp(diff + half), len(la), len(lb))


class BlockAssigner:
    """Stratified block randomisation: in each stratum, one member of every block of `round(1/share)`."""

    def __init__(self, share: float, seed: int | None = 0) -> None:
        self.share = share
        self.block = max(1, round(1.0 / share)) if share > 0 else 0
        self._rng = random.Random(seed)
        self._state: dict[tuple, list[int]] = {}  # stratum -> [position in block, chosen position, block size]

    def pick(self, stratum: tuple, block: int | None = None) -> bool:
        """True for the stratum's chosen member of the current block (of `block` members, default the share's;
        a changed size takes effect with the stratum's next block)."""
        size = self.block if block is None else max(1, block)
        if not self.block:
            return False
        st = self._state.get(stratum)
        if st is None or st[0] >= st[2]:
            st = self._state[stratum] = [0, self._rng.randrange(size), size]
        hit = st[0] == st[1]
        st[0] += 1
        return hit


def window_uniform(seed: int | None, worker: str, window: int) -> float:
    """A uniform in [0, 1) fixed by (seed, worker, window): every proxy replica draws the same regime."""
    h = hashlib.blake2b(f"{seed}|{worker}|{window}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0 ** 64


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one decision falls in the experiment (carried by `Decision.assignment` to the request's end)."""

    content_class: str
    bucket: str
    arm: str  # the proposer the policy chose ("none": the policy itself chose off)
    group: str  # TREATED or CONTROL
    worker: str = ""
    window: int | None = None  # switchback window index (None: switchback off)
    regime: str | None = None  # "policy" | "off": the window's regime for this request (None: switchback off)
    reason: str = ""  # "holdout" | "guard" | "guard probe" | "switchback" | ""
    load: float = 1.0  # the batch the request joined
    decided_at: float = 0.0  # clock reading at the decision (switchback only)
    seq: int = 0  # its number in the worker's running-request bookkeeping (switchback only)
    clean: bool = False  # no request of the other regime was running on the worker at the decision


@dataclass
class _Window:
    start: float
    measure_from: float
    end: float
    regime: str
    measure_to: float = math.inf  # the measured part is [measure_from, measure_to)
    tokens: float = 0.0  # output tokens the worker emitted in the measured part (finished requests)
    mixed: bool = False  # the guard flipped the regime mid-window: not a clean sample
    floor: float = 0.0  # where the measured part starts at the earliest (start, or start + washout after a switch)
    loads: list = field(default_factory=list)
    decode: list = field(default_factory=list)
    # engine-side switch: the worker applies the regime to its running requests from the switch on, and the
    # window's tokens are the worker's own step-level count (`SwitchbackBook.note_tokens`), not finished requests'
    engine: bool = False
    worker: str = ""

    @property
    def throughput(self) -> float:
        return self.tokens / (min(self.end, self.measure_to) - self.measure_from)


class RequestBook:
    """Decode seconds per output token per (class, bucket, arm) and group, the last `max_samples` of each."""

    def __init__(self, max_samples: int = 2000) -> None:
        self.max_samples = max_samples
        self._d: dict[tuple[str, str, str], dict[str, deque]] = {}

    def observe(self, key: tuple[str, str, str], group: str, decode_s_per_token: float) -> None:
        groups = self._d.get(key)
        if groups is None:
            groups = self._d[key] = {TREATED: deque(maxlen=self.max_samples),
                                     CONTROL: deque(maxlen=self.max_samples)}
        groups[group].append(decode_s_per_token)

    def keys(self) -> list[tuple[str, str, str]]:
        return sorted(self._d)

    def counts(self, key: tuple[str, str, str]) -> tuple[int, int]:
        g = self._d.get(key)
        return (len(g[TREATED]), len(g[CONTROL])) if g else (0, 0)

    def interval(self, key: tuple[str, str, str], confidence: float = 0.95, min_n: int = 2) -> Interval | None:
        g = self._d.get(key)
        if g is None:
            return None
        return log_ratio_interval(g[TREATED], g[CONTROL], confidence, min_n)


class SwitchbackBook:
    """Switchback windows per worker: regime schedule, measured throughput, per-bucket comparison."""

    def __init__(self, share: float, window_s: float, washout_s: float, seed: int | None = 0,
                 max_windows: int = 400, settle_s: float | None = None, cooldown_s: float = 0.0,
                 order: str = "pairs") -> None:
        self.share, self.window_s, self.washout_s, self.seed = share, window_s, washout_s, seed
        self.order = order
        # a window is evaluated settle_s after its end, once most requests that ran in it have reported
        self.settle_s = window_s if settle_s is None else settle_s
        # the last cooldown_s of a window are not measured either: a request running across the switch
        # changes pace there, which spreading its tokens evenly would misplace
        self.cooldown_s = cooldown_s
        self._open: dict[tuple[str, int], _Window] = {}
        self._done: dict[str, deque] = {}  # bucket -> closed windows
        self._counted: dict[str, tuple[float, float]] = {}  # worker -> (time, its cumulative output tokens)
        self._first: set[tuple[str, int]] = set()  # (worker, window): an engine-switched worker's first window
        self._last: dict[str, tuple[int, str]] = {}  # worker -> (index, regime) of its latest opened window
        self.max_windows = max_windows

    def index(self, now: float) -> int:
        return int(math.floor(now / self.window_s))

    def regime(self, worker: str, window: int, guarded: bool = False) -> str:
        """The window's regime: 'off' in a `share` of windows (guarded bucket: 'policy' in a `share`).

        Balanced by blocks: of every round(1/q) consecutive windows (q = the minority regime's share) exactly
        one, at a position drawn per (seed, worker, block), runs the minority regime; share 0.5 gives pairs in
        random order. Independent draws could leave a bucket with too few windows of one regime.
        Order "abba" (share 0.5): blocks of 4 windows x y y x, x drawn per block: after each switch inside a
        block the regime runs two windows, long enough at load for the batch to drain the other regime's
        requests; a block is balanced against a linear trend too.
        """
        a, b = ("policy", "off") if guarded else ("off", "policy")  # a runs in a `share` of windows
        if self.order == "abba":
            x, y = (a, b) if window_uniform(self.seed, worker, window // 4) < 0.5 else (b, a)
            return x if window % 4 in (0, 3) else y
        minority, majority, q = (a, b, self.share) if self.share <= 0.5 else (b, a, 1.0 - self.share)
        block = max(1, round(1.0 / q))
        pos = int(window_uniform(self.seed, worker, window // block) * block)
        return minority if window % block == pos else majority

    def note_decision(self, worker: str, window: int, regime: str, load: float, now: float,
                      next_regime: str | None = None, pure_since: float | None = -math.inf) -> None:
        """A decision in the window: opens it (with the regime it runs) and records the load.

        The washout is taken only after a switch (the worker's previous window ran the other regime, or had no
        decisions) and the cooldown only before one (`next_regime`, the schedule's regime for the next window,
        differs; None: assume a switch): a window between two of its own regime is measured whole.
        `pure_since`: since when the worker runs no request of the other regime (None: it still does). The
        measured part starts no earlier: at load the other regime's last requests can outlast any washout (at
        H200-70B c=128 plain requests beside drafting ones: 2.5-4 minutes), and a batch with a few drafting
        requests pays their draft passes in every step. A window that never runs pure is not measured.
        """
        w = self.open(worker, window, regime, now, next_regime, pure_since)
        w.loads.append(load)

    def open(self, worker: str, window: int, regime: str, now: float, next_regime: str | None = None,
             pure_since: float | None = -math.inf, engine: bool = False) -> _Window:
        """The worker's window (opened with `regime` if new; marked mixed if it ran another one before).
        `engine`: the worker switches its running requests at the window's start (no drain to wait for: the
        window is pure from its start, its washout only lets the batch settle) and its tokens come from
        `note_tokens`."""
        key = (worker, window)
        w = self._open.get(key)
        if w is None:
            start = window * self.window_s
            prev = self._last.get(worker)
            after_switch = prev is None or prev != (window - 1, regime)
            before_switch = next_regime != regime
            floor = start + (self.washout_s if after_switch else 0.0)
            w = self._open[key] = _Window(start, math.inf, start + self.window_s, regime,
                                          start + self.window_s - (self.cooldown_s if before_switch else 0.0),
                                          floor=floor, engine=engine, worker=worker)
            if engine and prev is None:  # the worker's first window: its batch may still be filling (a start-up,
                self._first.add(key)    # seconds of prefill at a few % of the throughput); not measured
            self._last[worker] = (window, regime)
            self._close_before(now)
        elif w.regime != regime:
            w.mixed = True
        if w.measure_from == math.inf and engine and key not in self._first:
            w.measure_from = w.floor
        elif w.measure_from == math.inf and pure_since is not None and not engine:
            w.measure_from = max(w.floor, pure_since)
        return w

    def note_tokens(self, worker: str, now: float, total: float) -> None:
        """The worker's cumulative output tokens at `now` (its step-level counter, e.g. a scrape of
        vllm:generation_tokens_total). The tokens since its previous reading are spread evenly over the time
        between the two and every engine-switched window gets the share that falls in its measured part: the
        window's throughput is the worker's own, step by step. A counter that went down (a restart) starts over."""
        prev = self._counted.get(worker)
        self._counted[worker] = (now, total)
        if prev is None or total < prev[1] or now <= prev[0]:
            return
        t1, dc = prev[0], total - prev[1]
        for i in range(max(self.index(t1), self.index(now) - 10_000), self.index(now) + 1):
            w = self._open.get((worker, i))
            if w is None or not w.engine:
                continue
            lo, hi = max(t1, w.measure_from), min(now, w.end, w.measure_to)
            if hi > lo:
                w.tokens += dc * (hi - lo) / (now - t1)
        self._close_before(now)

    def finish(self, worker: str, window: int, tokens: float, decode: float | None, now: float) -> None:
        """A request that started in `window` finished at `now` after `tokens` output tokens, decoding at
        `decode` seconds per token after the first (None: unknown, its tokens count at `now`).

        Its tokens are spread evenly over [first token, now] and every window of the worker gets the share
        emitted in its measured part, whichever window the request started in: a window's throughput is
        what the whole worker emitted while it ran (the batch-mates' slowdown included). Its decode time
        counts for the window it started in when it ended there.
        """
        t1 = now - decode * (tokens - 1) if decode is not None and tokens > 1 else now
        first, last = self.index(t1), self.index(now)
        for i in range(max(first, last - 10_000), last + 1):  # (a bogus timestamp is not worth a long loop)
            w = self._open.get((worker, i))
            if w is None or w.engine:  # an engine-switched window counts the worker's steps instead
                continue
            if now == t1:
                w.tokens += tokens if w.measure_from <= now < min(w.end, w.measure_to) else 0.0
                continue
            lo, hi = max(t1, w.measure_from), min(now, w.end, w.measure_to)
            if hi > lo:
                w.tokens += tokens * (hi - lo) / (now - t1)
        w = self._open.get((worker, window))
        if w is not None and decode is not None and now <= w.end:
            w.decode.append(decode)
        self._close_before(now)

    def measured(self, worker: str, window: int, t: float) -> bool:
        """Whether `t` lies in the measured part of the worker's (still open) window."""
        w = self._open.get((worker, window))
        return w is not None and w.measure_from <= t < min(w.end, w.measure_to)

    def _close_before(self, now: float) -> None:
        """Windows whose end is `settle_s` past: requests still running then are not waited for."""
        for key in [k for k, w in self._open.items() if self._settled(w, now)]:
            w = self._open.pop(key)
            if not w.loads or w.mixed or w.measure_from >= min(w.end, w.measure_to):
                continue
            loads = sorted(w.loads)
            bucket = load_bucket(loads[len(loads) // 2])
            self._done.setdefault(bucket, deque(maxlen=self.max_windows)).append(w)

    def _settled(self, w: _Window, now: float) -> bool:
        """A window is evaluated `settle_s` after its end, an engine-switched one once the worker's counter
        has been read past its measured part (all its tokens are in)."""
        if w.engine:
            seen = self._counted.get(w.worker)
            return (seen is not None and seen[0] >= min(w.end, w.measure_to)) or w.end + self.settle_s <= now
        return w.end + self.settle_s <= now

    def close_all(self, now: float) -> None:
        """Evaluate what has settled by `now` (the report calls it)."""
        self._close_before(now)

    def buckets(self) -> list[str]:
        return sorted(self._done, key=_bucket_order)

    def windows(self, bucket: str) -> list[_Window]:
        return list(self._done.get(bucket, ()))

    def interval(self, bucket: str, confidence: float = 0.95, min_windows: int = 3,
                 since: float = -math.inf) -> dict | None:
        """Throughput ratio policy / off (and decode-time speedup) over the bucket's measured windows (those
        starting at `since` or later)."""
        ws = [w for w in self._done.get(bucket, ()) if w.start >= since]
        if not ws:
            return None
        pol = [w.throughput for w in ws if w.regime == "policy" and w.tokens > 0]
        off = [w.throughput for w in ws if w.regime == "off" and w.tokens > 0]
        thr = log_ratio_interval(off, pol, confidence, min_windows)
        if thr is None:
            return None
        dp = [sum(w.decode) / len(w.decode) for w in ws if w.regime == "policy" and w.decode]
        do = [sum(w.decode) / len(w.decode) for w in ws if w.regime == "off" and w.decode]
        dec = log_ratio_interval(dp, do, confidence, min_windows)
        return {"throughput": thr, "decode": dec}


class RegimeRequests:
    """The guard's sequential test on requests: per load bucket, decode seconds per token of the requests decided
    in the measured part of a switchback window, by the window's regime (the last `max_samples` of each).

    One request is one sample, so the evidence grows with the traffic instead of with the windows. Where a request
    has the worker to itself (low load) its decode time is the system's, and the ratio is the throughput's
    direction (prefill is the same in both regimes). Where requests share a batch across a switch, the ratio is
    pulled towards speculation (its requests run beside cheaper plain ones, the plain ones beside drafting; in
    the simulator 0.98-1.05 for a true 0.72 at H200-70B c=128): the test gets slower or silent there, it does not
    trip where speculation pays, and the guard lets only the windows release a bucket.
    Looks: when the bucket's count reaches first_look x 2^k the k-th look (k = 0, 1, ...) uses error rate
    (1 - confidence) / 2^(k+1); the rates sum to at most 1 - confidence, so the chance of ever tripping where
    speculation is not slower stays below it however long the guard watches (Bonferroni over the looks).
    """

    def __init__(self, max_samples: int = 2000, first_look: int = 20) -> None:
        self.max_samples, self.first_look = max_samples, first_look
        self._d: dict[str, dict[str, deque]] = {}
        self._looks: dict[str, int] = {}

    def observe(self, bucket: str, regime: str, decode_s_per_token: float) -> None:
        groups = self._d.setdefault(bucket, {"policy": deque(maxlen=self.max_samples),
                                             "off": deque(maxlen=self.max_samples)})
        groups[regime].append(decode_s_per_token)

    def count(self, bucket: str) -> int:
        g = self._d.get(bucket)
        return len(g["policy"]) + len(g["off"]) if g else 0

    def interval(self, bucket: str, confidence: float = 0.95, min_n: int = 2) -> Interval | None:
        """Decode speedup of the policy's windows over the off windows (above 1: speculation faster)."""
        g = self._d.get(bucket)
        return log_ratio_interval(g["policy"], g["off"], confidence, min_n) if g else None

    def smaller(self, bucket: str) -> int:
        """Samples of the regime with fewer."""
        g = self._d.get(bucket)
        return min(len(g["policy"]), len(g["off"])) if g else 0

    def look(self, bucket: str, confidence: float = 0.95, min_n: int = 2) -> Interval | None:
        """The interval at the bucket's next scheduled look, at that look's confidence; None between looks.
        Looks are counted on the regime with fewer samples (first_look / 2 x 2^k of each): at load one regime
        may have hundreds before the other has any, and a look without both would be spent for nothing."""
        k = self._looks.get(bucket, 0)
        if self.smaller(bucket) < max(2, (self.first_look + 1) // 2) * 2 ** k:
            return None
        self._looks[bucket] = k + 1
        return self.interval(bucket, 1.0 - (1.0 - confidence) / 2 ** (k + 1), min_n)


class RegimeOccupancy:
    """Per worker, the requests of each switchback regime still running, and when each regime last admitted one.

    A request ran *pure* when no request of the other regime ran on its worker at any time of its life: none was
    running at its decision and none was admitted before it finished. At load that is what a washout only
    approximates: the batch (and so every step's cost) was the regime's alone, and its decode time per token is
    the regime's. The bookkeeping sees the requests this proxy decided; one never reported counts as running for
    `stale_s` after its decision (it keeps the other regime's requests impure meanwhile: evidence lost, not
    biased).
    """

    def __init__(self, stale_s: float = 600.0) -> None:
        self.stale_s = stale_s
        self._running: dict[tuple[str, str], dict[int, float]] = {}  # (worker, regime) -> {seq: decided at}
        self._admitted: dict[tuple[str, str], float] = {}  # (worker, regime) -> last decision
        self._ended: dict[tuple[str, str], float] = {}  # (worker, regime) -> last report of a finished request
        self._seq = 0

    @staticmethod
    def _other(regime: str) -> str:
        return "off" if regime == "policy" else "policy"

    def running(self, worker: str, regime: str, now: float) -> int:
        r = self._running.get((worker, regime))
        if not r:
            return 0
        while r and next(iter(r.values())) < now - self.stale_s:  # oldest first (decisions come in time order)
            del r[next(iter(r))]
        return len(r)

    def pure_since(self, worker: str, regime: str, now: float) -> float | None:
        """Since when the worker runs no request of the other regime (None: it still does)."""
        other = self._other(regime)
        if self.running(worker, other, now):
            return None
        return self._ended.get((worker, other), -math.inf)

    def admit(self, worker: str, regime: str, now: float) -> tuple[int, bool]:
        """A decision: (its number, whether no request of the other regime is running)."""
        clean = self.running(worker, self._other(regime), now) == 0
        self._seq += 1
        self._running.setdefault((worker, regime), {})[self._seq] = now
        self._admitted[(worker, regime)] = now
        return self._seq, clean

    def finish(self, worker: str, regime: str, seq: int, decided_at: float, clean: bool, now: float) -> bool:
        """The request ended: whether it ran pure."""
        if self._running.get((worker, regime), {}).pop(seq, None) is not None:
            self._ended[(worker, regime)] = now
        return clean and self._admitted.get((worker, self._other(regime)), -math.inf) < decided_at


def _bucket_order(b: str) -> int:
    return int(b.split("-")[0].rstrip("+"))


class Guard:
    """Strata (class, bucket, arm) and buckets whose speedup is confidently below 1."""

    def __init__(self) -> None:
        self.strata: set[tuple[str, str, str]] = set()
        self.buckets: set[str] = set()
        self.engaged = 0  # times a stratum or bucket became guarded
        self.released = 0

    def update(self, key, interval: Interval | None, target: set) -> str | None:
        """'engaged' / 'released' when the key changes state on this evidence, else None."""
        if interval is None:
            return None
        if key not in target and interval.high < 1.0:
            target.add(key)
            self.engaged += 1
            return "engaged"
        if key in target and interval.estimate >= 1.0:
            target.discard(key)
            self.released += 1
            return "released"
        return None

    def active(self, key: tuple[str, str, str]) -> bool:
        return key in self.strata or key[1] in self.buckets


def table_rows(book: RequestBook, guard: Guard, confidence: float = 0.95, min_n: int = 2) -> list[dict]:
    """One row per (class, bucket, arm) the request book has seen, ordered by class, load, arm."""
    rows = []
    for key in sorted(book.keys(), key=lambda k: (k[0], _bucket_order(k[1]), k[2])):
        iv = book.interval(key, confidence, min_n)
        nt, nc = book.counts(key)
        row = {"content_class": key[0], "load_bucket": key[1], "arm": key[2], "n_treated": nt, "n_control": nc,
               "speedup": None, "low": None, "high": None, "guarded": guard.active(key)}
        if iv is not None:
            row.update(speedup=iv.estimate, low=iv.low, high=iv.high)
        rows.append(row)
    return rows


def switchback_rows(book: SwitchbackBook, guard: Guard, confidence: float = 0.95,
                    min_windows: int = 3) -> list[dict]:
    rows = []
    for b in book.buckets():
        ws = book.windows(b)
        res = book.interval(b, confidence, min_windows)
        row = {"load_bucket": b, "windows_policy": sum(w.regime == "policy" for w in ws),
               "windows_off": sum(w.regime == "off" for w in ws), "throughput_ratio": None, "low": None,
               "high": None, "decode_speedup": None, "guarded": b in guard.buckets}
        if res is not None:
            thr, dec = res["throughput"], res["decode"]
            row.update(throughput_ratio=thr.estimate, low=thr.low, high=thr.high,
                       decode_speedup=dec.estimate if dec is not None else None)
        rows.append(row)
    return rows


def format_table(rows: Iterable[dict], switchback: Iterable[dict] = ()) -> str:
    """The report as text: one line per stratum, then the switchback buckets."""
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    lines = [f"{'class':<11}{'load':>8}  {'arm':<7}{'n_spec':>7}{'n_off':>7}{'speedup':>9}  {'95% interval':<17}"
             "guard"]
    for r in rows:
        ci = f"[{f(r['low'])}, {f(r['high'])}]" if r["speedup"] is not None else "-"
        lines.append(f"{r['content_class']:<11}{r['load_bucket']:>8}  {r['arm']:<7}{r['n_treated']:>7}"
                     f"{r['n_control']:>7}{f(r['speedup']):>9}  {ci:<17}{'ON' if r['guarded'] else ''}")
    sb = list(switchback)
    if sb:
        lines.append("")
        lines.append(f"{'switchback':<11}{'load':>8}  {'windows':>12}{'throughput':>12}  {'95% interval':<17}"
                     f"{'decode':>8}  guard")
        for r in sb:
            ci = f"[{f(r['low'])}, {f(r['high'])}]" if r["throughput_ratio"] is not None else "-"
            lines.append(f"{'':<11}{r['load_bucket']:>8}  {r['windows_policy']:>5}p/{r['windows_off']:>4}off"
                         f"{f(r['throughput_ratio']):>12}  {ci:<17}{f(r['decode_speedup']):>8}  "
                         f"{'ON' if r['guarded'] else ''}")
    return "\n".join(lines)
