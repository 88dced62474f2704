"""One generation as the worker's HTTP layer (server.py) sees it: the validated request (`Job`), the text side
(`TextTracker`: incremental detokenisation and text-level stop strings) and what the response reports
(`JobResult`, its `usage.speculative` object)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from adaptspec.control.shadow import ShadowStats
from adaptspec.worker._openai import SpecChoice

__all__ = ["Job", "JobResult", "TextTracker"]


class TextTracker:
    """Turns the growing token list into text deltas; ends the text before the first stop string."""

    def __init__(self, decode: Callable[[list[int]], str], stops: list[str] | None, lazy: bool = False) -> None:
        self._decode = decode
        self.lazy = lazy and not stops  # nobody reads deltas: decode once, in flush()
        self.stops = stops or []
        self._max_stop = max((len(s) for s in self.stops), default=0)
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0  # chars of self.text already handed out
        self.stopped = False

    def add(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        if self.lazy:
            return ""
        full = self._decode(self.ids)
        if self.stops:
            start = max(0, self.sent - self._max_stop)
            hits = [i for i in (full.find(s, start) for s in self.stops) if i >= 0]
            if hits:
                self.text, self.stopped = full[: min(hits)], True
                return self._take(len(self.text))
        self.text = full
        safe = len(full.rstrip("\ufffd"))  # an incomplete UTF-8 sequence may still change
        for s in self.stops:  # hold back a tail that could still become a stop string
            for n in range(min(len(s) - 1, safe), 0, -1):
                if full.endswith(s[:n], 0, safe):
                    safe = min(safe, safe - n)
                    break
        return self._take(max(safe, self.sent))

    def flush(self) -> str:
        if self.lazy:
            self.text = self._decode(self.ids)
        return self._take(len(self.text))

    def _take(self, end: int) -> str:
        delta, self.sent = self.text[self.sent : end], end
        return delta


@dataclass(slots=True)
class JobResult:
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str | None = None
    draft_tokens: int = 0
    accepted_tokens: int = 0
    steps: int = 0
    drafts: int = 0
    tried_per_position: tuple[int, ...] = ()
    accepted_per_position: tuple[int, ...] = ()
    steps_by_gamma: dict[int, int] = field(default_factory=dict)
    lookup_drafts: int | None = None  # hybrid requests only
    shadow: ShadowStats | None = None  # n-gram lookup scored along the output (requests not run with it)
    hybrid_shadow: ShadowStats | None = None  # the per-step hybrid's lookup steps along it (not run with it)
    by_source: dict[str, ShadowStats] | None = None  # a hybrid's steps by draft source (requests.SourceTally)
    # every rule of control/hybrid_rule.py RULES walked along the output (a per-step hybrid's worker, every request)
    hybrid_rules: dict[str, ShadowStats] | None = None

    def speculative(self) -> dict:
        out = {"draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens, "steps": self.steps,
               "drafts": self.drafts, "tried_per_position": list(self.tried_per_position),
               "accepted_per_position": list(self.accepted_per_position),
               "steps_by_gamma": {str(g): n for g, n in sorted(self.steps_by_gamma.items())}}
        if self.lookup_drafts is not None:
            out["lookup_drafts"] = self.lookup_drafts
        shadow = {name: stats.to_dict() for name, stats in (("ngram", self.shadow), ("hybrid", self.hybrid_shadow))
                  if stats is not None}
        if shadow:
            out["shadow"] = shadow
        if self.by_source is not None:
            out["by_source"] = {name: stats.to_dict() for name, stats in self.by_source.items()}
        if self.hybrid_rules is not None:
            out["hybrid_rules"] = {name: stats.to_dict() for name, stats in self.hybrid_rules.items()}
        return out


@dataclass(slots=True)
class Job:
    """One validated request, ready for the engine."""

    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stops: list[str] | None
    spec: SpecChoice
    ignore_eos: bool
    stream: bool
    result: JobResult = field(default_factory=JobResult)
