"""Hybrid proposer: n-gram prompt lookup and a model proposer (EAGLE head or draft model), chosen at every step.

**Which source drafts a step** (issue 32; the same causal rule as trace replay's `HybridRule`,
adaptspec/bench/stepwise.py). The lookup runs at every step, drafting or not, and each of its drafts is kept
as a shadow: the next step checks it against the tokens the target emitted since, so the hybrid knows the
*match in progress* m, the number of tokens up to the last one emitted that the lookup's successive drafts
predicted in a row (0 after one it did not; at most `window`). That is suffix decoding's signal: inside a
copied stretch every lookup draft holds and m grows; where the text departs from what it copies, m drops to 0.
The rule, from emitted tokens only:

- m >= `min_match` and the lookup has a draft: **lookup**, drafting L = min(cap, max(k, floor(multiplier * m)
  + 1)) tokens: the controller's gamma k, longer as the match grows (suffix decoding's draft length), up to
  cap = ceil(lookup_factor * k) and the step's room bound (k says what the batch affords; a match that long
  is worth a few more verified positions);
- otherwise the source whose draft is worth more now, priced per step: a lookup draft of L tokens emits
  E_L = 1 + S_1 + ... + S_L tokens for 1 + L * `position_cost` of a step (a verified position), the model's
  draft of j tokens (the j its recent acceptance pays for, below) E_j for 1 + j * `model_cost`; the larger of
  E / cost wins (none when neither drafts). The lookup's S_i are learned per match bucket (m = 0, 1, 2, 3+)
  from its shadow drafts, every step, whichever source drafted (a point-mass draft token is accepted exactly
  when the target emits it, so the emitted tokens are its verdict; censored at what the step emitted): free
  evidence, so neither source can be locked out. L is the longest with S_L >= `position_cost`, at most the cap.

`min_match=0` is lookup first (lookup whenever it finds the suffix n-gram, L as in the first case). Each step's
draft comes wholly from one source, so the verifier sees either point masses or the model's distributions:
exact either way (the engine batches both kinds), and the choice depends only on tokens already committed.

The model part drafts only as far as it pays. A lookup draft costs nothing to propose, but each model token
costs a model pass and a verified position: on a CPU-bound target (a 5-token verify pass ~2x a 1-token
decode) k model tokens at every lookup miss cost more than they yield, which made the hybrid slower than
plain n-gram on copy-heavy text (its misses are where the text departs from the prompt). So the hybrid
learns, per request, how often the model's drafts survive at each position (the engine reports each
step's verdict through `observe`, the optional proposer hook of base.py). With S_j the estimated chance
that positions 1..j all survive (each surviving token saves about one step), drafting j tokens is worth

    sum_{i <= j} (S_i - model_cost) - call_cost

where `model_cost` is the price of one more model-drafted token (a model pass and a verified position) and
`call_cost` the price of drafting at all (calling the model, and a target step that verifies a draft
instead of decoding one token), both as shares of a target step (Engine defaults: measured on the CPU
reference worker). S_j falls with j, so the best j is the longest with S_j >= model_cost, drafted when its
worth is >= 0, else none (the call price is weighed from the model's first verdict on: the uninformed prior
would never pay it). (On that CPU the first drafted token of a step costs ~0.5-0.9 of a step and
each further one ~0.2-0.3, but the fixed part moved from run to run on the loaded box, and a call price of
0.5 did no less work than none: the engine weighs none by default, docs/results/eagle-hybrid.md.)
Lookup drafts keep the full k. Estimates: per position, the request's own counts shrunk toward the
hybrid's pooled counts over all requests (`prior_weight` pseudo-observations; pooled counts start at
1 of 2). So that a low estimate cannot lock the model out for good (no drafts, no new evidence), the model
drafts one token at a miss after `explore_every` declined misses in a row, of the request or of all requests
(the pooled estimate is every new request's prior: with per-request counting alone, requests shorter than
`explore_every` misses would never draft again once it fell below the price). The draft length
depends only on steps already verified, so verification stays exact.

The model proposer keeps its per-request state (a draft model's KV slot) across steps where lookup
drafted: it catches up on the committed tokens the next time it runs. Each draft names its source
(`Draft.source`: "ngram" or the model proposer's name), so the engine counts model passes only for the steps
the model drafted; `drafts_by_source` / `tokens_by_source` count the steps / tokens each source drafted and
`model_declined` / `model_shortened` the misses where the model was not worth asking / asked for fewer than
k tokens, for the measurements and tests.
"""

from __future__ import annotations

import math
from dataclasses import replace

from adaptspec.control.hybrid_rule import HybridRule
from adaptspec.worker.proposers.base import Draft, ProposeInput, Proposer
from adaptspec.worker.proposers.ngram import NgramProposer

__all__ = ["HybridProposer"]

# The per-step rule's defaults (module doc), trace replay's `HybridRule` defaults: lookup once 2 tokens in a row
# were predicted by it, drafting max(k, 2m + 1) (at most 2k), the match looked back on up to 32 tokens.
HYBRID_MIN_MATCH = 2
HYBRID_MATCH_MULTIPLIER = 2.0
HYBRID_LOOKUP_FACTOR = 2.0
HYBRID_MATCH_WINDOW = 32
# A verified lookup position as a share of a target step: the CPU reference worker's 0.49 ms per batched token
# over its 5.1 ms step (cpu-tiny profile); a memory-bound GPU verifies a few more positions nearly for free.
HYBRID_POSITION_COST = 0.1
_BUCKETS = 4  # lookup evidence by match in progress: 0, 1, 2, 3+


class HybridProposer:
    name = "hybrid"

    def __init__(self, ngram: NgramProposer, model: Proposer, model_cost: float = 0.0, prior_weight: float = 4.0,
                 explore_every: int = 8, call_cost: float = 0.0, *, min_match: int = HYBRID_MIN_MATCH,
                 multiplier: float = HYBRID_MATCH_MULTIPLIER, lookup_factor: float = HYBRID_LOOKUP_FACTOR,
                 window: int = HYBRID_MATCH_WINDOW, position_cost: float = HYBRID_POSITION_COST):
        if not 0.0 <= model_cost < 1.0:
            raise ValueError(f"model_cost must be in [0, 1), got {model_cost}")
        if not 0.0 <= call_cost < 4.0:
            raise ValueError(f"call_cost must be in [0, 4), got {call_cost}")
        if prior_weight <= 0:
            raise ValueError(f"prior_weight must be > 0, got {prior_weight}")
        if explore_every < 1:
            raise ValueError(f"explore_every must be >= 1, got {explore_every}")
        if min_match < 0 or window < max(min_match, 1) or not multiplier > 0 or not lookup_factor >= 1.0:
            raise ValueError(f"bad hybrid rule min_match={min_match} multiplier={multiplier} "
                             f"lookup_factor={lookup_factor} window={window}: need 0 <= min_match <= window, "
                             "window >= 1, multiplier > 0 and lookup_factor >= 1")
        if not 0.0 <= position_cost < 1.0:
            raise ValueError(f"position_cost must be in [0, 1), got {position_cost}")
        self.call_cost, self.position_cost = call_cost, position_cost
        self.ngram, self.model = ngram, model
        self.model_cost, self.prior_weight, self.explore_every = model_cost, prior_weight, explore_every
        self.min_match, self.multiplier, self.lookup_factor, self.window = min_match, multiplier, lookup_factor, window
        self.needs_hidden_states = model.needs_hidden_states
        self.drafts_by_source = {"ngram": 0, model.name: 0}  # steps each source drafted (>= 1 token)
        self.tokens_by_source = {"ngram": 0, model.name: 0}  # tokens each source drafted
        self.model_declined = 0  # model turns where no model token was worth drafting
        self.model_shortened = 0  # model turns where the model drafted, fewer tokens than k
        # per position j of model drafts: [tried, accepted], per request and pooled over all requests
        self._stats: dict[str, list[list[int]]] = {}
        self._pooled: list[list[int]] = []
        self._declined: dict[str, int] = {}  # request -> misses its model declined in a row
        self._declined_all = 0  # misses declined in a row over all requests (short requests explore too)
        # request -> (committed length when the lookup last drafted, that draft, its match bucket): checked at
        # the next step; per bucket and position of the lookup's drafts: [tried, accepted], pooled
        self._shadow: dict[str, tuple[int, tuple[int, ...], int]] = {}
        self._lookup_stats: list[list[list[int]]] = [[] for _ in range(_BUCKETS)]
        self._match: dict[str, int] = {}  # request -> the match in progress m
        self._rules: dict[str, tuple[int, float]] = {}  # request -> its own (min_match, multiplier) (`set_rule`)

    def add(self, request_id: str) -> None:
        self.model.add(request_id)
        self._stats.setdefault(request_id, [])

    def remove(self, request_id: str) -> None:
        self.model.remove(request_id)
        self.ngram.remove(request_id)
        for state in (self._stats, self._declined, self._shadow, self._match, self._rules):
            state.pop(request_id, None)

    def match(self, item: ProposeInput) -> int:
        """The match in progress m for this request after the tokens committed since its last step (module doc):
        the last lookup draft checked against them; m grows by the tokens it predicted if it predicted every
        one it covered, else m is 0. The check is also that draft's verdict, counted in its match bucket."""
        rid, seq = item.request_id, item.token_ids
        shadow = self._shadow.get(rid)
        m = self._match.get(rid, 0)
        if shadow is not None and len(seq) > shadow[0]:
            start, draft, bucket = shadow
            emitted = seq[start:start + len(draft)]
            held = 0
            while held < len(emitted) and emitted[held] == draft[held]:
                held += 1
            _count(self._lookup_stats[bucket], min(held + 1, len(emitted)), held)
            m = min(m + held, self.window) if held and held == len(emitted) else 0
            self._match[rid] = m
            del self._shadow[rid]
        return m

    def set_rule(self, request_id: str, rule: HybridRule) -> None:
        """Run this request with `rule`'s match threshold and draft-length multiplier (the proxy's per-class
        choice, control/hybrid_rule.py `RuleBook`) instead of the engine's; until `remove`."""
        self._rules[request_id] = (rule.min_match, rule.multiplier)

    def rule(self) -> HybridRule | None:
        """This rule's match test and lookup length as trace replay's `HybridRule` (what the worker walks along
        every request's output as the hybrid's shadow); None for lookup first (min_match 0), which it is not."""
        if self.min_match < 1:
            return None
        return HybridRule(min_match=self.min_match, multiplier=self.multiplier, window=self.window)

    def lookup_curve(self, m: int, n: int) -> list[float]:
        """S_1..S_n of a lookup draft at match m: its learned chance that positions 1..j all hold (module doc)."""
        return _curve(self._lookup_stats[min(m, _BUCKETS - 1)], n)

    def head_curve(self, request_id: str, k: int) -> list[float]:
        """S_1..S_k of the model's drafts for this request: its own counts shrunk toward the pooled ones."""
        own = self._stats.get(request_id, [])
        out, survive = [], 1.0
        for j in range(k):
            gt, ga = self._pooled[j] if j < len(self._pooled) else (0, 0)
            t, a = own[j] if j < len(own) else (0, 0)
            survive *= (a + self.prior_weight * (ga + 1) / (gt + 2)) / (t + self.prior_weight)
            out.append(survive)
        return out

    def lookup_cap(self, item: ProposeInput) -> int:
        """The longest lookup draft this step: the room bound and max(k, ceil(lookup_factor * k))."""
        want = max(item.k, math.ceil(self.lookup_factor * item.k))
        return min(want, item.room) if item.room else item.k

    def lookup_len(self, m: int, item: ProposeInput) -> int:
        """A lookup draft's length at match m: k, longer as the match grows, at most the cap."""
        multiplier = self._rules.get(item.request_id, (self.min_match, self.multiplier))[1]
        return min(self.lookup_cap(item), max(item.k, int(multiplier * m) + 1))

    def model_k(self, request_id: str, k: int) -> int:
        """How many tokens the model part drafts for this request now: the longest j <= k whose estimated
        chance that positions 1..j all survive is >= model_cost, if sum over i <= j of (that chance at i -
        model_cost) is >= call_cost, else 0 (k when model_cost is 0: unpriced); 1 instead of 0 after
        `explore_every` declines in a row, of this request or of all requests."""
        if self.model_cost <= 0:
            return k
        j = self._survival_k(request_id, k)
        if j or max(self._declined.get(request_id, 0), self._declined_all) < self.explore_every:
            return j
        return min(k, 1)

    def _survival_k(self, request_id: str, k: int) -> int:
        worth, j = 0.0, 0
        for survive in self.head_curve(request_id, k):
            if survive < self.model_cost:
                break
            worth += survive - self.model_cost
            j += 1
        # the call price is weighed once the model has a verdict (pooled over requests): before that the prior
        # (1/2 per position) would never pay it, and the model would not draft until its first exploration
        tried = self._pooled[0][0] if self._pooled else 0
        return j if j and (worth >= self.call_cost or not tried) else 0

    def observe(self, request_id: str, source: str | None, drafted: int, accepted: int) -> None:
        """The engine's verdict on one step's draft (`drafted` tokens from `source`, `accepted` of them kept):
        a model draft counts towards its positions' survival, per request and pooled."""
        if source != self.model.name or drafted <= 0:
            return
        stats = [self._pooled] + ([self._stats[request_id]] if request_id in self._stats else [])
        for st in stats:  # tried: the accepted positions and the first miss
            _count(st, min(accepted + 1, drafted), accepted, drafted)

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        out, asked, inputs = self.plan(batch)
        return self.settle(batch, out, asked, self.model.propose(inputs) if inputs else [])

    def plan(self, batch: list[ProposeInput]) -> tuple[list[Draft], list[int], list[ProposeInput]]:
        """The lookup part of `propose`: (the drafts so far, the indices the model drafts for, and their model
        inputs, each with the k it pays for). The engine may run those inputs in one call with the requests that
        ask the same model directly (one set of batched passes); `settle` takes the drafts."""
        found = self.ngram.propose([replace(it, k=self.lookup_cap(it)) for it in batch])
        out: list[Draft] = []
        turns: dict[int, int] = {}  # index -> the match in progress where the rule weighs the two sources
        for i, (it, d) in enumerate(zip(batch, found, strict=True)):
            m = self.match(it)
            if d.token_ids:
                self._shadow[it.request_id] = (len(it.token_ids), tuple(d.token_ids), min(m, _BUCKETS - 1))
            else:  # the suffix n-gram is new: whatever matched before has ended
                self._match[it.request_id] = 0
            if d.token_ids and m >= self._rules.get(it.request_id, (self.min_match, 0.0))[0]:
                out.append(Draft(d.token_ids[:self.lookup_len(m, it)], source="ngram"))
            else:
                out.append(Draft([], source="ngram"))
                turns[i] = m
        ks = {i: self.model_k(batch[i].request_id, batch[i].k) for i in turns}
        for i, m in turns.items():
            it, look = batch[i], found[i].token_ids
            length, worth = self._lookup_worth(m, look)
            if length and worth >= self._model_worth(it.request_id, ks[i]):
                out[i] = Draft(list(look[:length]), source="ngram")
                ks[i] = 0
                continue
            rid = it.request_id
            self._declined[rid] = 0 if ks[i] else self._declined.get(rid, 0) + 1
            self._declined_all = 0 if ks[i] else self._declined_all + 1
        asked = [i for i in turns if ks[i] > 0]
        self.model_shortened += sum(1 for i in asked if ks[i] < batch[i].k)
        return out, asked, [replace(batch[i], k=ks[i]) for i in asked]

    def _lookup_worth(self, m: int, draft: list[int]) -> tuple[int, float]:
        """(L, tokens per step-cost) of the lookup's draft at match m: the longest L whose S_L pays a verified
        position, E_L / (1 + L * position_cost); (0, 1.0) when none."""
        emitted, length = 1.0, 0
        for survive in self.lookup_curve(m, len(draft)):
            if survive < self.position_cost:
                break
            emitted += survive
            length += 1
        return length, emitted / (1.0 + length * self.position_cost)

    def _model_worth(self, request_id: str, k: int) -> float:
        """Tokens per step-cost of the model's draft of k tokens: E_k / (1 + k * model_cost); 1.0 for none."""
        if k <= 0:
            return 1.0
        return (1.0 + sum(self.head_curve(request_id, k))) / (1.0 + k * self.model_cost)

    def settle(self, batch: list[ProposeInput], out: list[Draft], asked: list[int],
               drafts: list[Draft]) -> list[Draft]:
        """`plan`'s drafts with the model's drafts for `asked` filled in, counted by source."""
        for i, d in zip(asked, drafts, strict=True):
            d.source = self.model.name
            out[i] = d
        misses = [i for i, d in enumerate(out) if d.source != "ngram" or not d.token_ids]
        ready = [i for i in misses if batch[i].hidden is not None or not self.needs_hidden_states]
        self.drafts_by_source["ngram"] += len(batch) - len(misses)
        self.drafts_by_source[self.model.name] += sum(1 for i in misses if out[i].token_ids)
        self.model_declined += sum(1 for i in ready if not out[i].token_ids)
        for d in out:
            self.tokens_by_source[d.source] += len(d.token_ids)
        return out


def _count(stats: list[list[int]], tried: int, accepted: int, drafted: int = 0) -> None:
    """Count one draft's verdict: positions 1..tried tried, 1..accepted accepted (rows kept for 1..drafted)."""
    while len(stats) < max(tried, drafted):
        stats.append([0, 0])
    for j in range(tried):
        stats[j][0] += 1
        stats[j][1] += j < accepted


def _curve(stats: list[list[int]], n: int) -> list[float]:
    """S_1..S_n from per-position [tried, accepted] counts, each position's rate with a uniform prior."""
    out, survive = [], 1.0
    for j in range(n):
        t, a = stats[j] if j < len(stats) else (0, 0)
        survive *= (a + 1) / (t + 2)
        out.append(survive)
    return out
