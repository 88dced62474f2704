"""One step of the reference engine (worker/engine.py) over its running batch: each request's gamma at this batch,
drafts (one batched call per proposer), one target forward, verification (greedy requests by argmax, the others
by probabilities), and the commit that applies stops, counts and streams. A request whose step raises is retried
alone so that only the failing one gets the error. `Stepping` is a mixin of `Engine`, which owns the state it
reads (model, KV cache, proposers, lock, metrics)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import torch

from adaptspec.control.schedule import gamma_at
from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers import Draft, ProposeInput
from adaptspec.worker.requests import EngineMetrics, Seq, StepOutput, step_tally
from adaptspec.worker.sampling import logits_to_probs
from adaptspec.worker.verify import greedy_verify, verify_drafts

log = logging.getLogger("adaptspec.worker.engine")  # the engine's log, as before the step had a module of its own


class Stepping:
    """`step` and what it runs on: `_compute` (propose, forward, verify), `_verify_probs`, `_commit`; the engine
    provides the state below and `_finish_locked`."""

    model: TinyLlama
    cache: object
    vocab_size: int
    max_model_len: int
    max_speculative_tokens: int
    prefill_split_tokens: int
    speculation_cap: int | None
    greedy_fast_path: bool
    _proposers: dict
    _lock: threading.Lock
    _m: EngineMetrics
    _aborts: set[str]

    @torch.inference_mode()
    def step(self, batch: list[Seq]) -> None:
        """One engine step over `batch` (all running): propose, one target forward, verify, commit.

        Isolation: if the batched propose/forward/verify raises, every request is retried alone (nothing is
        committed before verification, and stale K/V past a request's cached length is harmless), so only
        the request(s) that fail alone are failed (a RuntimeError to their sink); the others make their
        step.

        Prefill split: requests feeding more than `prefill_split_tokens` uncached tokens (a prompt) run in
        their own forward when others are decoding, so one long prompt does not pad every decode row to its
        length (one 300-token prefill inside a 32-request decode batch: ~200 ms, vs ~15 + ~30 ms apart)."""
        t0 = time.perf_counter()
        cap = self.speculation_cap
        for s in batch:  # the running batch of this step sets each request's gamma (its schedule's cap)
            s.step_k = gamma_at(s.k, s.schedule, len(batch))
            if cap is not None:  # the worker-wide cap (a switchback's off window), running requests included
                s.step_k = min(s.step_k, cap)
        self._common_passes(batch)
        long = [s for s in batch if len(s.tokens) - s.kv_len > self.prefill_split_tokens]
        if long and len(long) < len(batch):
            short = [s for s in batch if len(s.tokens) - s.kv_len <= self.prefill_split_tokens]
            groups = [short, long]
        else:
            groups = [batch]
        done, ks, out = [], [], []
        for group in groups:
            g, k1, o1 = self._compute_isolated(group)
            done += g
            ks += k1
            out += o1
        tally = step_tally(done, ks, groups)  # before the commit moves the requests' positions
        self._commit(done, ks, out, t0, tally)

    def _common_passes(self, batch: list[Seq]) -> None:
        """A model's passes are shared by the step (it runs max(k) of them for every row it drafts for), so rows
        admitted under two plans (the proxy's batch gamma moved between them) would make the step pay the
        larger plan's passes for the smaller plan's tokens. Rows of one model (a draft model; the head and the
        hybrids over it) draft at most the k most of them asked (the smaller on a tie); shorter asks stay, and so
        does a seeded request's k (its samples depend on its draft lengths)."""
        hybrid = self._proposers.get("hybrid")
        head = hybrid.model.name if hybrid is not None else None
        asks: dict[str, Counter[int]] = {}
        rows: list[tuple[Seq, str]] = []
        for s in batch:
            if s.step_k > 0 and s.proposer not in ("none", "ngram"):
                model = head if s.proposer == "hybrid" else s.proposer
                asks.setdefault(model, Counter())[s.step_k] += 1
                rows.append((s, model))
        mode = {m: max(c.items(), key=lambda kv: (kv[1], -kv[0]))[0] for m, c in asks.items() if len(c) > 1}
        for s, model in rows if mode else ():
            # a seeded request keeps its k: its samples are reproducible whatever else is in the batch
            k = mode.get(model)
            if k is not None and s.step_k > k and s.sampling.generator is None:
                s.step_k = k

    def _compute_isolated(self, batch: list[Seq]) -> tuple[list[Seq], list[int], list[list[int]]]:
        """`_compute(batch)`; if it raises, each request alone, failing only those that raise alone.
        -> (the requests computed, their k, their emitted tokens)."""
        try:
            ks, out = self._compute(batch)
            return batch, ks, out
        except Exception as e:
            if len(batch) == 1:
                self._fail(batch[0], e)
                return [], [], []
            log.exception("engine step over %d requests failed; retrying each request alone", len(batch))
        good, ks, out = [], [], []
        for s in batch:
            try:
                k1, o1 = self._compute([s])
            except Exception as e:
                self._fail(s, e)
            else:
                good.append(s)
                ks += k1
                out += o1
        return good, ks, out

    def _fail(self, s: Seq, e: Exception) -> None:
        log.error("request %s failed in the engine step; failing it", s.req.request_id, exc_info=e)
        with self._lock:
            self._finish_locked(s)
        self._emit(s, RuntimeError(f"engine step failed for request {s.req.request_id}: {e}"))

    def _emit(self, s: Seq, item) -> None:
        try:
            s.sink(item)
        except Exception:  # one broken consumer must not take the others' outputs down
            log.exception("output sink of request %s raised", s.req.request_id)

    def _hard_room(self, s: Seq) -> int:
        """The most tokens a draft for `s` may have this step whatever its gamma: max_tokens, the context and the
        engine's draft bound (a hybrid's lookup part drafts past gamma inside a long match)."""
        return max(0, min(self.max_speculative_tokens, s.req.max_tokens - s.generated - 1,
                          self.max_model_len - len(s.tokens) - 1))

    def _compute(self, batch: list[Seq]) -> tuple[list[int], list[list[int]]]:
        """Propose, forward and verify `batch` without committing: -> (k per request, emitted tokens per
        request, -1 padded)."""
        # 1. drafts, one batched call per proposer
        drafts: list[Draft] = [Draft([]) for _ in batch]
        groups: dict[str, list[int]] = {}
        for i, s in enumerate(batch):
            # room: every drafted token plus the bonus must fit both max_tokens and the context
            k = s.room = min(s.step_k, self._hard_room(s))  # step_k <= max_speculative_tokens (validated)
            if s.proposer != "none" and k > 0:
                groups.setdefault(s.proposer, []).append(i)
        def inputs(proposer, idx: list[int]) -> list[ProposeInput]:
            return [ProposeInput(batch[i].req.request_id, batch[i].tokens, batch[i].room, batch[i].sampling,
                                 batch[i].hidden if proposer.needs_hidden_states else None,
                                 room=self._hard_room(batch[i])) for i in idx]

        hybrid = self._proposers.get("hybrid")
        if "hybrid" in groups and hybrid.model.name in groups:
            # the hybrid's misses and the requests that ask its model directly share one call: one set of
            # batched passes (max k) for the step, not one per proposer name
            h_idx, m_idx = groups.pop("hybrid"), groups.pop(hybrid.model.name)
            h_in = inputs(hybrid, h_idx)
            looked, asked, m_extra = hybrid.plan(h_in)
            m_in = inputs(hybrid.model, m_idx)
            got = hybrid.model.propose(m_in + m_extra)
            for i, d in zip(m_idx, got[:len(m_in)], strict=True):
                drafts[i] = d
            for i, d in zip(h_idx, hybrid.settle(h_in, looked, asked, got[len(m_in):]), strict=True):
                drafts[i] = d
        for name, idx in groups.items():
            proposer = self._proposers[name]
            for i, d in zip(idx, proposer.propose(inputs(proposer, idx)), strict=True):
                drafts[i] = d
        for s, d in zip(batch, drafts, strict=True):
            s.source = d.source or s.proposer
        ks = [len(d.token_ids) for d in drafts]

        # 2. one target forward: uncached tokens + drafts for every request
        chunks = [s.tokens[s.kv_len:] + d.token_ids for s, d in zip(batch, drafts, strict=True)]
        lens = torch.tensor([len(c) for c in chunks])
        ends = lens.cumsum(0)
        rows = torch.cat([torch.arange(e - k - 1, e) for e, k in zip(ends.tolist(), ks, strict=True)])
        want_hidden = [s.proposer != "none" and self._proposers[s.proposer].needs_hidden_states for s in batch]
        out = self.model.forward(chunks, [s.slot for s in batch], [s.kv_len for s in batch], self.cache,
                                 logit_rows=rows, return_hidden=any(want_hidden))
        logits = out[0] if any(want_hidden) else out  # [sum(k) + B, V]
        if any(want_hidden):
            hidden, o = out[1], 0  # [sum(k) + B, h]
            for s, k, w in zip(batch, ks, want_hidden, strict=True):
                s.pending_hidden = hidden[o:o + k + 1] if w else None  # committed (one row) in _commit
                o += k + 1

        # 3. verify the ragged batch: greedy requests by argmax of the logits, the others by probabilities
        greedy = [s.sampling.temperature == 0 for s in batch]
        if not self.greedy_fast_path or not any(greedy):
            return ks, self._verify_probs(batch, drafts, ks, logits)
        row_starts = [0]
        for k in ks:
            row_starts.append(row_starts[-1] + k + 1)
        g_idx = [i for i, g in enumerate(greedy) if g]
        if len(g_idx) == len(batch):
            return ks, greedy_verify(logits, [d.token_ids for d in drafts], ks)
        s_idx = [i for i, g in enumerate(greedy) if not g]
        out: list[list[int]] = [[] for _ in batch]
        for idx, fn in ((g_idx, None), (s_idx, self._verify_probs)):
            rows = torch.cat([torch.arange(row_starts[i], row_starts[i + 1]) for i in idx])
            sub_logits = logits.index_select(0, rows)
            sub_ks = [ks[i] for i in idx]
            if fn is None:
                res = greedy_verify(sub_logits, [drafts[i].token_ids for i in idx], sub_ks)
            else:
                res = fn([batch[i] for i in idx], [drafts[i] for i in idx], sub_ks, sub_logits)
            for i, r in zip(idx, res, strict=True):
                out[i] = r
        return ks, out

    def _verify_probs(self, batch: list[Seq], drafts: list[Draft], ks: list[int],
                      logits: torch.Tensor) -> list[list[int]]:
        """The general path: per-row temperature/top_p probabilities, then `verify_drafts`."""
        reps = torch.tensor([k + 1 for k in ks])
        temps = torch.repeat_interleave(torch.tensor([s.sampling.temperature for s in batch]), reps)
        top_ps = torch.repeat_interleave(torch.tensor([s.sampling.top_p for s in batch]), reps)
        target = logits_to_probs(logits, temps, top_ps).probs
        draft_ids = torch.tensor([t for d in drafts for t in d.token_ids], dtype=torch.long)
        draft_probs = None
        if any(d.probs is not None for d in drafts):
            parts = []
            for d in drafts:
                if d.probs is not None:
                    parts.append(d.probs)
                elif d.token_ids:  # point-mass rows for n-gram drafts in a batch with draft-model drafts
                    parts.append(torch.zeros(len(d.token_ids), self.vocab_size).scatter_(
                        1, torch.tensor(d.token_ids)[:, None], 1.0))
            draft_probs = torch.cat(parts) if parts else None
        greedy = [s.sampling.temperature == 0 for s in batch]
        gens = {i: s.sampling.generator for i, s in enumerate(batch) if s.sampling.generator is not None}
        return verify_drafts(target, draft_ids, ks, draft_probs=draft_probs, greedy=greedy,
                             generator=gens or None).tolist()

    def _commit(self, batch: list[Seq], ks: list[int], out: list[list[int]], started: float | None = None,
                tally: tuple | None = None) -> None:
        """Commit verified tokens, apply stops, stream. The step's telemetry (started at `started`) is counted
        before anything is streamed, so a client that sees its last token also sees its last step counted."""
        finished: list[Seq] = []
        outputs: list[tuple[Seq, StepOutput]] = []
        with self._lock:
            m = self._m
            m.num_steps += 1
            for s, k, row in zip(batch, ks, out, strict=True):
                emitted = [t for t in row if t >= 0]
                accepted = len(emitted) - 1
                s.kv_len = len(s.tokens) + accepted
                if s.pending_hidden is not None:  # the row that produced the last emitted token
                    s.hidden, s.pending_hidden = s.pending_hidden[accepted].clone(), None
                if s.tally is not None and (s.steps or k):  # (a prefill step that drafted nothing: left out,
                    s.tally.step(s.source, k, accepted)   # as replay starts at output position 1)
                s.steps += 1
                s.by_gamma[s.step_k] = s.by_gamma.get(s.step_k, 0) + 1
                if k:
                    s.draft_tokens += k
                    s.accepted_tokens += accepted
                    s.drafts += 1
                    if s.source == "ngram" and s.proposer == "hybrid":
                        s.lookup_drafts += 1
                    observe = getattr(self._proposers.get(s.proposer), "observe", None)
                    if observe is not None:  # proposers that adapt to their verdicts (hybrid)
                        observe(s.req.request_id, s.source, k, accepted)
                    # positions tried: the accepted ones and the first rejection. A lookup draft the text cut
                    # short (fewer tokens than the step's room) stops the step where it ends: that position
                    # counts as tried and not accepted, so that the per-position rates price the truncation
                    # (the cost model takes every draft as long as gamma); a model's draft is conditional on
                    # its length, which it chose (a hybrid's model part: costmodel.hybrid_step)
                    # (a hybrid chooses its lookup draft's length too: the match it follows)
                    plain_lookup = s.source == "ngram" and s.proposer != "hybrid"
                    reached = min(s.room if plain_lookup else k, accepted + 1)
                    if len(s.pos_tried) < max(k, reached):
                        grow = max(k, reached) - len(s.pos_tried)
                        s.pos_tried += [0] * grow
                        s.pos_accepted += [0] * grow
                    for j in range(reached):
                        s.pos_tried[j] += 1
                    for j in range(accepted):
                        s.pos_accepted[j] += 1
                    m.spec_num_drafts += 1
                    m.spec_num_draft_tokens += k
                    m.spec_num_accepted_tokens += accepted
                    for j in range(accepted):
                        m.spec_accepted_per_pos[j] += 1
                    key = (s.cls, s.proposer)
                    d0, t0, a0 = m.spec_by_class.get(key, (0, 0, 0))
                    m.spec_by_class[key] = (d0 + 1, t0 + k, a0 + accepted)
                new: list[int] = []
                reason = None
                for t in emitted:
                    if t in s.stop_ids:
                        reason = "stop"
                        break
                    new.append(t)
                    if s.generated + len(new) >= s.req.max_tokens or len(s.tokens) + len(new) >= self.max_model_len:
                        reason = "length"
                        break
                s.tokens.extend(new)
                s.generated += len(new)
                m.num_generated_tokens += len(new)
                if reason is None and s.req.request_id in self._aborts:
                    self._aborts.discard(s.req.request_id)
                    reason = "abort"
                if reason is not None:
                    finished.append(s)
                    self._finish_locked(s)
                outputs.append((s, s.output(new, reason is not None, reason)))
            if started is not None and tally is not None:
                m.step_counters = m.step_counters.add_step(time.perf_counter() - started, *tally)
        for s, o in outputs:
            self._emit(s, o)
