"""Shadow n-gram counters (the vLLM plugin's `adaptspec:shadow_ngram_*_by_class_total`) -> per-class stats
(control/counters.py `shadow_deltas`): deltas between scrapes, the first scrape a baseline, inconsistent or
hostile series dropped, never counted."""

from __future__ import annotations

from adaptspec.control.counters import (
    SHADOW_ACCEPTED,
    SHADOW_DRAFT_TOKENS,
    SHADOW_DRAFTS,
    SHADOW_STEPS,
    SHADOW_TRIED,
    CounterTracker,
    shadow_deltas,
)
from adaptspec.control.shadow import ShadowStats, walk_lookup


def scrape(per_class: dict[tuple[str, str], ShadowStats], k: int = 4) -> list:
    """The samples a plugin exposing these cumulative stats would give (zeros for positions up to k)."""
    out = []
    for (cls, regime), s in per_class.items():
        lab = {"content_class": cls, "regime": regime}
        out += [(SHADOW_STEPS, lab, float(s.steps)), (SHADOW_DRAFTS, lab, float(s.drafts)),
                (SHADOW_DRAFT_TOKENS, lab, float(s.draft_tokens))]
        for j in range(k):
            t = s.tried_per_position[j] if j < len(s.tried_per_position) else 0
            a = s.accepted_per_position[j] if j < len(s.accepted_per_position) else 0
            out += [(SHADOW_TRIED, {**lab, "position": str(j)}, float(t)),
                    (SHADOW_ACCEPTED, {**lab, "position": str(j)}, float(a))]
    return out


def add(a: ShadowStats, b: ShadowStats) -> ShadowStats:
    n = max(len(a.tried_per_position), len(b.tried_per_position))

    def pad(x):
        return [*x, *([0] * (n - len(x)))]

    return ShadowStats(a.steps + b.steps, a.drafts + b.drafts, a.draft_tokens + b.draft_tokens,
                       a.accepted_tokens + b.accepted_tokens,
                       tuple(x + y for x, y in zip(pad(a.tried_per_position), pad(b.tried_per_position), strict=True)),
                       tuple(x + y for x, y in zip(pad(a.accepted_per_position), pad(b.accepted_per_position),
                                                   strict=True)))


def walks():
    a = walk_lookup([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11, 1, 2, 3, 4, 5, 6, 99, 7, 8, 9, 10], 4, (2, 4), earliest=True)
    b = walk_lookup([5, 6, 5, 6, 5, 6], [5, 6, 5, 7, 5, 6, 5, 6], 4, (1, 2), earliest=True)
    return a, b


def test_first_scrape_is_a_baseline_then_deltas_are_whole_requests():
    a, b = walks()
    tracker = CounterTracker()
    assert shadow_deltas(tracker, "w", scrape({("code", "greedy"): a})) == {}  # history before the proxy came
    both = add(a, b)
    got = shadow_deltas(tracker, "w", scrape({("code", "greedy"): both, ("chat", "sampled"): a}))
    # code: b since the baseline, exactly (padded to the plugin's k positions); chat: a baseline (first seen)
    assert set(got) == {("code", "greedy")}
    s = got[("code", "greedy")]
    assert (s.steps, s.drafts, s.draft_tokens, s.accepted_tokens) == (b.steps, b.drafts, b.draft_tokens,
                                                                      b.accepted_tokens)
    assert s.tried_per_position[:len(b.tried_per_position)] == b.tried_per_position
    assert sum(s.accepted_per_position) == b.accepted_tokens
    # nothing new: nothing counted (an idle engine adds nothing)
    assert shadow_deltas(tracker, "w", scrape({("code", "greedy"): both, ("chat", "sampled"): a})) == {}
    # a second worker's series are its own
    assert shadow_deltas(tracker, "w2", scrape({("code", "greedy"): both})) == {}


def test_other_labels_are_summed_and_a_restart_counts_from_zero():
    a, b = walks()
    tracker = CounterTracker()
    engines = [(n, {**lab, "engine": e}, v) for e in ("0", "1") for n, lab, v in scrape({("math", "greedy"): a})]
    shadow_deltas(tracker, "w", engines)
    engines2 = [(n, {**lab, "engine": e}, v) for e, s in (("0", add(a, b)), ("1", add(a, a)))
                for n, lab, v in scrape({("math", "greedy"): s})]
    got = shadow_deltas(tracker, "w", engines2)[("math", "greedy")]
    assert got.steps == b.steps + a.steps and got.accepted_tokens == b.accepted_tokens + a.accepted_tokens
    # engine 0 restarted (its counters went down: the new values are the delta), engine 1 idle
    engines3 = [(n, {**lab, "engine": e}, v) for e, s in (("0", b), ("1", add(a, a)))
                for n, lab, v in scrape({("math", "greedy"): s})]
    got = shadow_deltas(tracker, "w", engines3)[("math", "greedy")]
    assert (got.steps, got.draft_tokens, got.accepted_tokens) == (b.steps, b.draft_tokens, b.accepted_tokens)


def test_inconsistent_or_hostile_series_are_dropped():
    a, b = walks()
    tracker = CounterTracker()
    shadow_deltas(tracker, "w", scrape({("code", "greedy"): a}))
    bad = scrape({("code", "greedy"): add(a, b)})
    # drafts moved without the steps (a reset between two families' reads): accepted above tried, dropped
    bad = [(n, lab, v + 1000.0 if n == SHADOW_ACCEPTED and lab["position"] == "0" else v) for n, lab, v in bad]
    assert shadow_deltas(tracker, "w", bad) == {}
    hostile = [(SHADOW_STEPS, {"content_class": "code", "regime": "lukewarm"}, 5.0),  # not a regime
               (SHADOW_TRIED, {"content_class": "code", "regime": "greedy", "position": "x"}, 3.0),
               (SHADOW_TRIED, {"content_class": "code", "regime": "greedy", "position": "100000"}, 3.0)]
    t2 = CounterTracker()
    shadow_deltas(t2, "w", [(n, lab, 0.0) for n, lab, _ in hostile])
    assert shadow_deltas(t2, "w", hostile) == {}
