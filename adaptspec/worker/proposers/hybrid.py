"""Hybrid proposer: n-gram prompt lookup first, a model proposer (EAGLE head or draft model) where lookup fails.

Per request and per step: if the request's own text has an earlier occurrence of its suffix n-gram
(`NgramProposer`), the tokens that followed it are the draft (point masses, `probs=None`: free to propose,
and on copy-heavy text usually long runs); otherwise the model proposer drafts, with its own sampled
distribution as the draft probs. Each step's draft comes wholly from one source, so the verifier sees
either point masses or the model's distributions — exact either way (the engine batches both kinds).

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

from dataclasses import replace

from adaptspec.worker.proposers.base import Draft, ProposeInput, Proposer
from adaptspec.worker.proposers.ngram import NgramProposer

__all__ = ["HybridProposer"]


class HybridProposer:
    name = "hybrid"

    def __init__(self, ngram: NgramProposer, model: Proposer, model_cost: float = 0.0, prior_weight: float = 4.0,
                 explore_every: int = 8, call_cost: float = 0.0):
        if not 0.0 <= model_cost < 1.0:
            raise ValueError(f"model_cost must be in [0, 1), got {model_cost}")
        if not 0.0 <= call_cost < 4.0:
            raise ValueError(f"call_cost must be in [0, 4), got {call_cost}")
        self.call_cost = call_cost
        if prior_weight <= 0:
            raise ValueError(f"prior_weight must be > 0, got {prior_weight}")
        self.ngram, self.model = ngram, model
        if explore_every < 1:
            raise ValueError(f"explore_every must be >= 1, got {explore_every}")
        self.model_cost, self.prior_weight, self.explore_every = model_cost, prior_weight, explore_every
        self.needs_hidden_states = model.needs_hidden_states
        self.drafts_by_source = {"ngram": 0, model.name: 0}  # steps each source drafted (>= 1 token)
        self.tokens_by_source = {"ngram": 0, model.name: 0}  # tokens each source drafted
        self.model_declined = 0  # lookup misses where no model token was worth drafting
        self.model_shortened = 0  # lookup misses where the model drafted, fewer tokens than k
        # per position j of model drafts: [tried, accepted], per request and pooled over all requests
        self._stats: dict[str, list[list[int]]] = {}
        self._pooled: list[list[int]] = []
        self._declined: dict[str, int] = {}  # request -> misses its model declined in a row
        self._declined_all = 0  # misses declined in a row over all requests (short requests explore too)

    def add(self, request_id: str) -> None:
        self.model.add(request_id)
        self._stats.setdefault(request_id, [])

    def remove(self, request_id: str) -> None:
        self.model.remove(request_id)
        self._stats.pop(request_id, None)
        self._declined.pop(request_id, None)

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
        own = self._stats.get(request_id, [])
        survive, worth, j = 1.0, 0.0, 0
        for j in range(k):
            gt, ga = self._pooled[j] if j < len(self._pooled) else (0, 0)
            pooled = (ga + 1) / (gt + 2)
            t, a = own[j] if j < len(own) else (0, 0)
            survive *= (a + self.prior_weight * pooled) / (t + self.prior_weight)
            if survive < self.model_cost:
                break
            worth += survive - self.model_cost
        else:
            j = k
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
        for st in stats:
            while len(st) < drafted:
                st.append([0, 0])
            for j in range(min(accepted + 1, drafted)):  # tried: the accepted positions and the first miss
                st[j][0] += 1
                st[j][1] += j < accepted

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        out, asked, inputs = self.plan(batch)
        return self.settle(batch, out, asked, self.model.propose(inputs) if inputs else [])

    def plan(self, batch: list[ProposeInput]) -> tuple[list[Draft], list[int], list[ProposeInput]]:
        """The lookup part of `propose`: (the drafts so far, the indices whose misses the model drafts for, and
        their model inputs, each with the k it pays for). The engine may run those inputs in one call with the
        requests that ask the same model directly (one set of batched passes); `settle` takes the drafts."""
        out = self.ngram.propose(batch)
        for d in out:
            d.source = "ngram"
        misses = [i for i, d in enumerate(out) if not d.token_ids]
        ks = {i: self.model_k(batch[i].request_id, batch[i].k) for i in misses}
        for i, k in ks.items():
            rid = batch[i].request_id
            self._declined[rid] = 0 if k else self._declined.get(rid, 0) + 1
            self._declined_all = 0 if k else self._declined_all + 1
        asked = [i for i in misses if ks[i] > 0]
        self.model_shortened += sum(1 for i in asked if ks[i] < batch[i].k)
        return out, asked, [replace(batch[i], k=ks[i]) for i in asked]

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
