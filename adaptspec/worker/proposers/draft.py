"""Draft-model proposer: a small causal LM sharing the target's tokenizer, with its own KV cache.

All requests that use the draft model are drafted together: step 0 feeds each request's catch-up chunk
(the committed tokens its draft cache has not seen yet: at least the last emitted token, plus the whole
prompt on a request's first step) as one ragged batched forward; steps 1..k-1 feed the previous draft
token of every request still drafting. Each draft token is sampled from the draft distribution after the
request's own temperature/top_p (`logits_to_probs`) with the request's generator, and that very
distribution is returned as the draft probs `[k, V]` for the verifier (so rejection sampling stays exact).
At temperature 0 drafting is greedy.

What the draft cache holds is tracked per request as a token list; after verification the accepted
drafts are already in the cache, so catching up costs only the tokens that differ.
"""

from __future__ import annotations

import heapq
from pathlib import Path

import torch

from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers.base import Draft, ProposeInput
from adaptspec.worker.sampling import logits_to_probs, sample_from_probs

__all__ = ["DraftModelProposer"]


class DraftModelProposer:
    name = "draft"
    needs_hidden_states = False

    def __init__(self, model: TinyLlama, max_slots: int, max_len: int, split_tokens: int = 32):
        self.model = model
        self.split_tokens = split_tokens  # catch-up chunks longer than this run in their own forward
        self.max_len = max_len
        self.cache = model.new_cache(max_slots, max_len)
        self._free = list(range(max_slots))  # min-heap: compact slots let attention skip a gather
        self._slot: dict[str, int] = {}
        # the request's draft slot holds K/V of seq[:base] + tail (tail: drafts fed last step)
        self._cached: dict[str, tuple[int, list[int]]] = {}

    @classmethod
    def from_dir(cls, path: str | Path, max_slots: int, max_len: int) -> DraftModelProposer:
        return cls(TinyLlama.from_pretrained(path), max_slots, max_len)

    @property
    def vocab_size(self) -> int:
        return self.model.cfg.vocab_size

    def add(self, request_id: str) -> None:
        if request_id in self._slot:
            return
        if not self._free:
            raise RuntimeError("draft proposer has no free KV slot")
        self._slot[request_id] = heapq.heappop(self._free)
        self._cached[request_id] = (0, [])

    def remove(self, request_id: str) -> None:
        slot = self._slot.pop(request_id, None)
        if slot is not None:
            heapq.heappush(self._free, slot)
        self._cached.pop(request_id, None)

    @torch.inference_mode()
    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        for item in batch:
            self.add(item.request_id)
        # room in the draft cache: the last draft token is never fed, so k - 1 extra positions are needed
        ks = [max(0, min(it.k, self.max_len - len(it.token_ids) + 1)) for it in batch]
        chunks, starts, slots = [], [], []
        for it in batch:
            base, tail = self._cached[it.request_id]
            seq = it.token_ids
            n = min(base, len(seq) - 1)
            for t in tail:  # committed tokens never change; only the drafted tail can differ
                if n >= len(seq) - 1 or seq[n] != t:
                    break
                n += 1
            chunks.append(seq[n:])
            starts.append(n)
            slots.append(self._slot[it.request_id])
        drafted: list[list[int]] = [[] for _ in batch]
        probs: list[list[torch.Tensor]] = [[] for _ in batch]
        active = [i for i, k in enumerate(ks) if k > 0]
        if active:
            logits = self._catch_up(active, chunks, slots, starts)
        step = 0
        while active:
            sp = logits_to_probs(logits, [batch[i].sampling.temperature for i in active],
                                 [batch[i].sampling.top_p for i in active])
            gens = {j: batch[i].sampling.generator for j, i in enumerate(active)
                    if batch[i].sampling.generator is not None}
            tok = sample_from_probs(sp.probs, gens or None, greedy=sp.greedy).tolist()
            for j, i in enumerate(active):
                drafted[i].append(tok[j])
                probs[i].append(sp.probs[j])
            step += 1
            active = [i for i in active if ks[i] > step]
            if active:
                logits = self.model.forward([[drafted[i][-1]] for i in active], [slots[i] for i in active],
                                            [len(batch[i].token_ids) + step - 1 for i in active], self.cache)
        out = []
        for i, it in enumerate(batch):
            self._cached[it.request_id] = (len(it.token_ids), drafted[i][:-1])  # cache: seq + drafts[:-1]
            out.append(Draft(drafted[i], torch.stack(probs[i]) if probs[i] else None))
        return out

    def _catch_up(self, active: list[int], chunks: list[list[int]], slots: list[int], starts: list[int]
                  ) -> torch.Tensor:
        """Step 0: feed each active request's catch-up chunk; -> the logits of each chunk's last token
        `[len(active), V]`, in `active` order.

        A request that joined since the last step feeds its whole prompt, the others one or a few tokens.
        The forward pads every row's queries to the longest chunk, so one prompt in the batch would make
        every row attend like a prefill (at 64 drafting requests, one 300-token prompt multiplied the pass
        ~20x): chunks longer than `split_tokens` run in a forward of their own, as the engine does for the
        target."""
        long = [j for j, i in enumerate(active) if len(chunks[i]) > self.split_tokens]
        groups = [list(range(len(active)))] if not long or len(long) == len(active) else \
            [[j for j, i in enumerate(active) if len(chunks[i]) <= self.split_tokens], long]
        parts, order = [], []
        for g in groups:
            idx = [active[j] for j in g]
            lens = torch.tensor([len(chunks[i]) for i in idx])
            parts.append(self.model.forward([chunks[i] for i in idx], [slots[i] for i in idx],
                                            [starts[i] for i in idx], self.cache,
                                            logit_rows=lens.cumsum(0) - 1))  # [len(g), V]
            order += g
        if len(parts) == 1:
            return parts[0]
        logits = torch.cat(parts)  # rows in `order`
        return logits[torch.tensor(order).argsort()]  # back to `active` order
