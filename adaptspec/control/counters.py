"""Engine counters -> alpha observations.

Counters. `CounterTracker` turns cumulative engine counters into deltas; a counter that goes down means
the engine restarted, and its new value is the delta. The first scrape is a baseline (delta 0), so a
proxy that starts next to a long-running engine does not ingest its whole history as one burst; a series
that appears in a later scrape was created since, from zero.

`ingest_vllm` reads vLLM-style speculation counters (engine-wide and the adaptspec per-class families),
`ingest_sglang` SGLang's accept-length gauge; proxy/engines.py picks one per worker.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

from adaptspec.control import metric_names as names
from adaptspec.control.alpha import ANY_CLASS, GREEDY, REGIMES, AlphaTable, alpha_from_accept_length
from adaptspec.control.shadow import MAX_POSITIONS, ShadowStats


class CounterTracker:
    """Deltas of cumulative counters, per key; a decrease is a reset (the new value is the delta).

    A key's first value is a baseline (delta 0) until `scraped()` marks the end of the first scrape; after that,
    a key seen for the first time is a series the engine created since (a labelled counter appears at its first
    increment, e.g. the first request of a content class), so its whole value is the delta."""

    def __init__(self) -> None:
        self._last: dict[Hashable, float] = {}
        self._baselined = False

    def scraped(self) -> None:
        """The first scrape is over: series that appear from now on started at zero."""
        self._baselined = True

    def delta(self, key: Hashable, value: float) -> float:
        prev = self._last.get(key)
        self._last[key] = value
        if prev is None:
            return value if self._baselined else 0.0  # born since the last scrape, or the baseline
        if value < prev:
            return value  # the counter restarted from zero
        return value - prev

    def forget(self, prefix: Hashable) -> None:
        """Drop every key whose first element is `prefix` (e.g. a worker that left the pool)."""
        for key in [k for k in self._last if isinstance(k, tuple) and k and k[0] == prefix]:
            del self._last[key]


# Sample names of the families ingested here (control/metric_names.py defines them once).
VLLM_DRAFTS = names.total(names.VLLM_SPEC_DRAFTS)
VLLM_DRAFT_TOKENS = names.total(names.VLLM_SPEC_DRAFT_TOKENS)
VLLM_ACCEPTED = names.total(names.VLLM_SPEC_ACCEPTED)
VLLM_PER_POS = names.total(names.VLLM_SPEC_PER_POS)
BY_CLASS_DRAFTS = names.total(names.CLASS_SPEC_DRAFTS)
BY_CLASS_DRAFT_TOKENS = names.total(names.CLASS_SPEC_DRAFT_TOKENS)
BY_CLASS_ACCEPTED = names.total(names.CLASS_SPEC_ACCEPTED)
SGLANG_ACCEPT_LENGTH = names.SGLANG_ACCEPT_LENGTH
SGLANG_GEN_TOKENS = names.total(names.SGLANG_GENERATION_TOKENS)
_BY_CLASS = frozenset({BY_CLASS_DRAFTS, BY_CLASS_DRAFT_TOKENS, BY_CLASS_ACCEPTED})
VLLM_STYLE = frozenset({VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED, VLLM_PER_POS}) | _BY_CLASS
SGLANG_ACCEPT_RATE = names.SGLANG_ACCEPT_RATE
SGLANG_NUM_STEPS = names.SGLANG_NUM_STEPS
SGLANG_NUM_DRAFT_TOKENS = names.SGLANG_NUM_DRAFT_TOKENS
SGLANG_VERIFY_CALLS = names.total(names.SGLANG_VERIFY_CALLS)
SGLANG_STYLE = frozenset({SGLANG_ACCEPT_LENGTH, SGLANG_GEN_TOKENS, SGLANG_ACCEPT_RATE, SGLANG_NUM_STEPS,
                          SGLANG_NUM_DRAFT_TOKENS, SGLANG_VERIFY_CALLS})
SHADOW_STEPS = names.total(names.SHADOW_NGRAM_STEPS)
SHADOW_DRAFTS = names.total(names.SHADOW_NGRAM_DRAFTS)
SHADOW_DRAFT_TOKENS = names.total(names.SHADOW_NGRAM_DRAFT_TOKENS)
SHADOW_TRIED = names.total(names.SHADOW_NGRAM_TRIED)
SHADOW_ACCEPTED = names.total(names.SHADOW_NGRAM_ACCEPTED)
SHADOW_STYLE = frozenset({SHADOW_STEPS, SHADOW_DRAFTS, SHADOW_DRAFT_TOKENS, SHADOW_TRIED, SHADOW_ACCEPTED})

Sample = tuple[str, Mapping[str, str], float]  # (metric name, labels, value)


def ingest_vllm(
    table: AlphaTable,
    tracker: CounterTracker,
    worker: str,
    samples: Iterable[Sample],
    proposer: str,
    now: float | None = None,
) -> int:
    """Feed one scrape of a vLLM-style /metrics into the table; returns the number of keys updated.

    Engine-wide counters go to class `ANY_CLASS` (the per-class prior falls back to them); the
    `adaptspec:*_by_class_total` families (adaptspec worker, vLLM plugin) go to their class and proposer.
    Label sets other than `position` / `content_class` / `proposer` (model, engine index) are summed.
    """
    glob: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    by_class: dict[tuple[str, str], dict[str, float]] = {}
    for name, labels, value in samples:
        if name not in VLLM_STYLE:
            continue
        d = tracker.delta((worker, name, tuple(sorted(labels.items()))), float(value))
        if name == VLLM_PER_POS:
            pos = int(labels.get("position", 0))
            per_pos[pos] = per_pos.get(pos, 0.0) + d
        elif name in _BY_CLASS:
            key = (labels.get("content_class", ANY_CLASS), labels.get("proposer", proposer))
            by_class.setdefault(key, {})
            by_class[key][name] = by_class[key].get(name, 0.0) + d
        else:
            glob[name] = glob.get(name, 0.0) + d
    updated = 0
    dt, da, dn = glob.get(VLLM_DRAFT_TOKENS, 0.0), glob.get(VLLM_ACCEPTED, 0.0), glob.get(VLLM_DRAFTS, 0.0)
    if dt > 0:
        pos = [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)] if per_pos else None
        table.observe(worker, proposer, ANY_CLASS, dt, min(da, dt), pos, now, num_drafts=dn or None)
        updated += 1
    for (cls, prop), d in by_class.items():
        ct, ca, cn = d.get(BY_CLASS_DRAFT_TOKENS, 0.0), d.get(BY_CLASS_ACCEPTED, 0.0), d.get(BY_CLASS_DRAFTS, 0.0)
        if ct > 0 and prop != "none":
            table.observe(worker, prop, cls, ct, min(ca, ct), None, now, num_drafts=cn or None)
            updated += 1
    return updated


def shadow_deltas(tracker: CounterTracker, worker: str, samples: Iterable[Sample]
                  ) -> dict[tuple[str, str], ShadowStats]:
    """One scrape's shadow n-gram counters (`adaptspec:shadow_ngram_*_by_class_total`, vLLM plugin) as the
    counts added since the previous scrape, per (content class, sampling regime): {(class, regime): stats}.

    The deltas of a scrape are sums of whole requests' walks (the plugin counts a request at once), so they
    satisfy what one request's do; a (class, regime) whose deltas do not (a counter reset between the families'
    reads) is dropped rather than counted wrong. Other label sets (model, engine index) are summed."""
    acc: dict[tuple[str, str], dict] = {}
    for name, labels, value in samples:
        if name not in SHADOW_STYLE:
            continue
        d = tracker.delta((worker, name, tuple(sorted(labels.items()))), float(value))
        regime = labels.get("regime", GREEDY)
        if regime not in REGIMES:
            continue
        key = (labels.get("content_class", ANY_CLASS), regime)
        cur = acc.setdefault(key, {"tried": {}, "accepted": {}})
        if name in (SHADOW_TRIED, SHADOW_ACCEPTED):
            try:
                pos = int(labels.get("position", ""))
            except ValueError:
                continue
            if 0 <= pos < MAX_POSITIONS:
                per = cur["tried" if name == SHADOW_TRIED else "accepted"]
                per[pos] = per.get(pos, 0.0) + d
        else:
            cur[name] = cur.get(name, 0.0) + d
    out = {}
    for key, cur in acc.items():
        n = max([*cur["tried"], *cur["accepted"], -1]) + 1
        tried = [round(cur["tried"].get(j, 0.0)) for j in range(n)]
        accepted = [round(cur["accepted"].get(j, 0.0)) for j in range(n)]
        stats = ShadowStats.from_dict({"steps": round(cur.get(SHADOW_STEPS, 0.0)),
                                       "drafts": round(cur.get(SHADOW_DRAFTS, 0.0)),
                                       "draft_tokens": round(cur.get(SHADOW_DRAFT_TOKENS, 0.0)),
                                       "accepted_tokens": sum(accepted), "tried_per_position": tried,
                                       "accepted_per_position": accepted})
        if stats is not None and stats.steps > 0:
            out[key] = stats
    return out


def ingest_sglang(
    table: AlphaTable,
    tracker: CounterTracker,
    worker: str,
    samples: Iterable[Sample],
    proposer: str,
    gamma: int,
    now: float | None = None,
) -> int:
    """A pool's acceptance from SGLang's speculative metrics, the best the release exports:

    - draft length k: the live `sglang:spec_num_draft_tokens` - 1 (a chain drafts steps + 1 tokens) or
      `sglang:spec_num_steps` (both follow --speculative-adaptive), else the pool's launch `gamma`;
    - counters (sglang >= 0.5.23): `sglang:spec_verify_calls_total` counts every finished request's verify steps
      and `sglang:generation_tokens_total` its tokens, so over a scrape window the accept length is
      tokens / verify steps, weighted by those steps;
    - else the interval gauges: accepted drafts per step = `sglang:spec_accept_rate` x k (accepted / proposed
      drafts), or `sglang:spec_accept_length` - 1; the weight the verify steps since the last scrape
      (generated tokens / accept length), so an idle engine adds nothing.

    alpha then solves E(alpha, k) = 1 + accepted per step (Leviathan's form, drafts as a chain)."""
    gauges: dict[str, float] = {}
    tokens = verify = 0.0
    has_verify = False
    for name, labels, value in samples:
        if name in (SGLANG_ACCEPT_LENGTH, SGLANG_ACCEPT_RATE, SGLANG_NUM_STEPS, SGLANG_NUM_DRAFT_TOKENS):
            gauges[name] = float(value)  # one engine (tp / dp ranks report the same interval): the last wins
        elif name == SGLANG_GEN_TOKENS:
            tokens += tracker.delta((worker, name, tuple(sorted(labels.items()))), float(value))
        elif name == SGLANG_VERIFY_CALLS:
            has_verify = True
            verify += tracker.delta((worker, name, tuple(sorted(labels.items()))), float(value))
    k = float(gamma)
    if gauges.get(SGLANG_NUM_DRAFT_TOKENS, 0.0) > 1.0:
        k = gauges[SGLANG_NUM_DRAFT_TOKENS] - 1.0
    elif gauges.get(SGLANG_NUM_STEPS, 0.0) > 0.0:
        k = gauges[SGLANG_NUM_STEPS]
    if k <= 0 or tokens <= 0:
        return 0
    if has_verify:
        if verify <= 0:
            return 0
        steps, accepted = verify, min(max(tokens / verify - 1.0, 0.0), k)
    else:
        if SGLANG_ACCEPT_RATE in gauges and gauges[SGLANG_ACCEPT_RATE] > 0.0:
            accepted = min(gauges[SGLANG_ACCEPT_RATE], 1.0) * k
        elif gauges.get(SGLANG_ACCEPT_LENGTH, 0.0) >= 1.0:
            accepted = min(gauges[SGLANG_ACCEPT_LENGTH], k + 1.0) - 1.0
        else:
            return 0
        steps = tokens / (1.0 + accepted)
    a = alpha_from_accept_length(1.0 + accepted, k)
    table.observe_counts(worker, proposer, ANY_CLASS, steps * accepted, steps * (1.0 - a**k),
                         draft_tokens=steps * k, now=now)
    return 1
