"""The reference engine: continuous batching with a KV cache and per-request speculative decoding.

One background thread runs the step loop. Every step, requests may join (up to `max_batch` KV slots, and a
prefill-token budget) and leave (finished, aborted). Each running request has its own proposer
(`none` | `ngram` | `draft` | `eagle` | `hybrid`) and k, capped at each step by its optional schedule
(`min(k, cap(running batch))`, control/schedule.py); the proposers draft for all their requests in one
batched call each, and then ONE target forward feeds, for every running request, its not-yet-cached tokens (the whole prompt
on its first step, else the last emitted token) followed by its drafts. The logits of each request's last
k_i + 1 positions become probabilities (`logits_to_probs`, per-request temperature/top_p) and
`verify_drafts` accepts/rejects the whole ragged batch at once (k_i = 0 is plain decoding); greedy requests
(temperature 0) skip the probabilities and are verified against the argmax of their logits
(`greedy_verify`: the same tokens, several times cheaper). Rejected drafts are rolled back by keeping the
request's cached length (stale K/V is overwritten later). For requests whose proposer reads the target's
hidden states (EAGLE-style, `needs_hidden_states`), the forward also returns the final hidden state of each
verified row, and the row that produced the request's last emitted token is kept for its next draft.

A request still feeding a long uncached chunk (its prompt: more than `prefill_split_tokens`, default 32,
tokens) runs in a forward of its own when others are decoding, so its length does not pad their rows.

Sampling values are checked at admission as the step sees them (float32), and if a batched step still
raises, each request is retried alone so that only the failing one(s) get the error.

API (docs/INTERFACES.md, "Worker"):

    engine = Engine.from_dirs("adaptspec/assets/tiny-target", "adaptspec/assets/tiny-draft",
                              max_batch=32, max_model_len=1024,
                              default_speculation={"proposer": "ngram", "num_speculative_tokens": 4})
    engine.start()                     # the step thread (also started lazily by generate)
    ids = engine.encode(engine.apply_chat_template([{"role": "user", "content": "Hi"}]))
    async for out in engine.generate(GenRequest("r1", ids, max_tokens=64, temperature=0.0,
                                                proposer="draft", num_speculative_tokens=3,
                                                schedule=[[8, 3], [32, 1]])):  # optional: caps k by running batch
        out.new_token_ids, out.finished, out.finish_reason   # "stop" | "length" | "abort"
        out.draft_tokens, out.accepted_tokens, out.steps     # cumulative for the request
        out.steps_by_gamma                                   # {gamma the step allowed: steps}
        out.queue_s                                          # seconds queued before joining the batch
        out.lookup_drafts                                    # hybrid: drafting steps n-gram lookup served
    engine.abort("r1"); engine.metrics(); engine.stop()

- `generate` is an async generator; closing it early (client gone) aborts the request and frees its slot.
  A request that cannot run (prompt + max_tokens > max_model_len, unknown proposer, bad sampling values)
  raises `adaptspec.errors.RequestError` on the first `__anext__`.
- Attributes: `tokenizer` (`adaptspec.worker.tokenizer.Tokenizer`), `chat_template`, `max_model_len`,
  `max_batch`, `vocab_size`, `proposers` (names offered besides "none"), `max_speculative_tokens`,
  `encode(text)`, `decode(ids)`, `apply_chat_template(messages)`.
- `metrics()` -> `EngineMetrics`: `running`, `waiting`, `kv_cache_usage` (cached tokens / capacity, 0..1),
  `spec_num_drafts`, `spec_num_draft_tokens`, `spec_num_accepted_tokens`, `spec_accepted_per_pos` (list,
  position 0 first), `spec_by_class` {(content_class, proposer): (drafts, draft_tokens, accepted_tokens)},
  plus `num_steps`, `num_generated_tokens` (cumulative counters, like vLLM's).
- `set_speculation_cap(cap)`: a worker-wide cap on every request's gamma from the next step on, running ones
  included (0: no request drafts; None: lifted, each request back to its own k and schedule); the proxy sets it
  for a switchback's off window (control/holdout_policy.py engine_tick). `speculation_cap`: the current one.
- `hybrid_model_cost` (default `HYBRID_MODEL_COST`), `hybrid_call_cost` (default `HYBRID_CALL_COST`): a hybrid's
  price of one more model-drafted token and of drafting at all at a lookup miss, as shares of a step; its model
  part drafts only as far as its drafts are likely to pay those (proposers/hybrid.py); model cost 0: always k.
  `hybrid_min_match` (default 2): the hybrid drafts with lookup once its drafts predicted this many emitted tokens
  in a row (the match in progress, proposers/hybrid.py); 0: lookup whenever it finds the n-gram (lookup first).
- Threads: `num_threads=None` (the default) runs the step thread with 1 torch intra-op thread; pass N to
  use N, or 0 to keep whatever torch is set to.
- Stop: the request's `stop_token_ids` (default: the tokenizer's EOS ids unless `ignore_eos`); the stop
  token itself is not returned. Seeded requests own a `torch.Generator` (drafting and verification draw
  from it), so their output does not depend on the rest of the batch.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

import torch

from adaptspec.control.schedule import gamma_at, parse_schedule
from adaptspec.control.types import PROPOSERS
from adaptspec.errors import RequestError
from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers import (
    Draft,
    DraftModelProposer,
    EagleHead,
    EagleProposer,
    HybridProposer,
    NgramProposer,
    ProposeInput,
)
from adaptspec.worker.proposers.hybrid import HYBRID_MIN_MATCH
from adaptspec.worker.requests import EngineMetrics, GenRequest, Seq, StepOutput, step_tally
from adaptspec.worker.sampling import logits_to_probs
from adaptspec.worker.tokenizer import Tokenizer
from adaptspec.worker.verify import greedy_verify, verify_drafts

__all__ = ["Engine", "EngineMetrics", "GenRequest", "StepOutput"]

log = logging.getLogger(__name__)

PROPOSER_NAMES = PROPOSERS
# The smallest positive temperature accepted: logits / T must stay finite in float32 (|logits| of a real
# model are far below 3e38 * 1e-30).
MIN_TEMPERATURE = 1e-30
# A hybrid's prices, as shares of a target step (proposers/hybrid.py): one more model-drafted token (a model
# pass and a verified position), and drafting at all at a lookup miss (the model call, and a step that
# verifies a draft instead of decoding one token). Its model drafts j tokens only if
# sum_{i <= j} (S_i - HYBRID_MODEL_COST) >= HYBRID_CALL_COST (S_i: their learned chance to survive).
# Measured on the CPU reference worker at batch 1 (benchmarks/measure_proposers.py --steps / --analyze,
# docs/results/eagle-hybrid.md): a head pass ~0.1-0.3 and a verified position ~0.03-0.09 of a plain step, but
# also a fixed part for drafting at all (0.2-0.9 of a step, unstable from run to run on the loaded box). A call
# price of 0.5 with 0.2 per token followed that structure, yet by the work it did (each row's steps priced by its
# run's fit) it was 0.4-2.1% behind one price of 0.35 per token and no call price, in three comparisons: the
# defaults stay there; on a memory-bound GPU both are far less.
HYBRID_MODEL_COST = 0.35
HYBRID_CALL_COST = 0.0




class Engine:
    def __init__(self, model: TinyLlama, tokenizer: Tokenizer, draft_model: TinyLlama | None = None, *,
                 max_batch: int = 32, max_model_len: int | None = None,
                 default_speculation: dict | tuple | None = None, max_speculative_tokens: int = 16,
                 max_prefill_tokens: int = 2048, num_threads: int | None = None,
                 ngram_min_n: int = 2, ngram_max_n: int = 4, eagle_head: EagleHead | None = None,
                 hybrid_model_cost: float = HYBRID_MODEL_COST, hybrid_call_cost: float = HYBRID_CALL_COST,
                 hybrid_min_match: int = HYBRID_MIN_MATCH):
        self.model = model
        self.tokenizer = tokenizer
        self.chat_template = tokenizer.chat_template
        self.vocab_size = model.cfg.vocab_size
        self.max_model_len = int(max_model_len or model.cfg.max_position_embeddings)
        if self.max_model_len > model.cfg.max_position_embeddings:
            raise ValueError(f"max_model_len {self.max_model_len} exceeds the model's "
                             f"max_position_embeddings {model.cfg.max_position_embeddings}")
        self.max_batch = max_batch
        self.max_speculative_tokens = max_speculative_tokens
        self.max_prefill_tokens = max_prefill_tokens
        # torch intra-op threads for the step thread: None -> 1 (measured on a busy 2-core box: a batch-1 step
        # took 396 ms with 2 spinning OpenMP threads vs 4.8 ms with 1); 0 -> leave torch's setting alone.
        if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                        or num_threads < 0):
            raise ValueError(f"num_threads must be None or an integer >= 0, got {num_threads!r}")
        self.num_threads = 1 if num_threads is None else num_threads
        self.cache = model.new_cache(max_batch, self.max_model_len)
        self._proposers: dict[str, object] = {"ngram": NgramProposer(ngram_min_n, ngram_max_n)}
        if draft_model is not None:
            if draft_model.cfg.vocab_size != self.vocab_size:
                raise ValueError(f"draft vocab {draft_model.cfg.vocab_size} != target vocab {self.vocab_size}")
            self._proposers["draft"] = DraftModelProposer(draft_model, max_batch, self.max_model_len)
        if eagle_head is not None:
            self._proposers["eagle"] = EagleProposer(eagle_head, model)
        model_proposer = self._proposers.get("eagle") or self._proposers.get("draft")
        if model_proposer is not None:  # per step: lookup inside a match in progress, the model elsewhere
            self._proposers["hybrid"] = HybridProposer(self._proposers["ngram"], model_proposer,
                                                       hybrid_model_cost, call_cost=hybrid_call_cost,
                                                       min_match=hybrid_min_match)
        self.proposers = tuple(self._proposers)
        # the n-gram proposer's (min_n, max_n), to score its lookup after the fact on requests that ran with another
        # proposer or none (control/shadow.py; the server reports it as usage.speculative.shadow)
        self.ngram_sizes = (ngram_min_n, ngram_max_n)
        self.default_proposer, self.default_k = self._parse_default(default_speculation)

        self.speculation_cap: int | None = None  # worker-wide cap on every running request's gamma (None: none)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: deque[Seq] = deque()
        self._aborts: set[str] = set()
        self._running: list[Seq] = []
        self._free_slots = list(range(max_batch))  # a min-heap: lowest slots first keeps them compact
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._m = EngineMetrics(spec_accepted_per_pos=[0] * max_speculative_tokens)
        # verify greedy requests by argmax of the logits (skipping probabilities); False forces the general
        # path for every request (tests compare the two)
        self.greedy_fast_path = True
        # a request feeding more uncached tokens than this (a prompt) is forwarded apart from decoding ones
        self.prefill_split_tokens = max(32, max_speculative_tokens + 1)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dirs(cls, target_dir: str | Path, draft_dir: str | Path | None = None,
                  eagle_dir: str | Path | None = None, **opts) -> Engine:
        model = TinyLlama.from_pretrained(target_dir)
        tok = Tokenizer.from_dir(target_dir)
        draft = TinyLlama.from_pretrained(draft_dir) if draft_dir is not None else None
        eagle = EagleHead.from_pretrained(eagle_dir) if eagle_dir is not None else None
        return cls(model, tok, draft, eagle_head=eagle, **opts)

    @classmethod
    def tiny(cls, **opts) -> Engine:
        """The built-in tiny pair shipped in adaptspec/assets, with its EAGLE head when that is shipped."""
        assets = Path(__file__).resolve().parents[1] / "assets"
        eagle = assets / "tiny-eagle"
        return cls.from_dirs(assets / "tiny-target", assets / "tiny-draft",
                             eagle if (eagle / "config.json").is_file() else None, **opts)

    def _parse_default(self, spec) -> tuple[str, int]:
        if spec is None:
            return "none", 0
        if isinstance(spec, dict):
            name, k = spec.get("proposer", "none"), spec.get("num_speculative_tokens", 4)
        else:
            name, k = spec
        name, k = self._check_spec(name, k)
        return name, k

    def _check_spec(self, name: str, k) -> tuple[str, int]:
        if name not in PROPOSER_NAMES:
            raise RequestError(f"unknown proposer {name!r}; expected one of {', '.join(PROPOSER_NAMES)}",
                               param="speculation.proposer", code="invalid_proposer")
        if name != "none" and name not in self._proposers:
            raise RequestError(f"proposer {name!r} is not available on this worker",
                               param="speculation.proposer", code="invalid_proposer")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= self.max_speculative_tokens:
            raise RequestError(f"num_speculative_tokens must be an integer in [0, {self.max_speculative_tokens}], "
                               f"got {k!r}", param="speculation.num_speculative_tokens")
        if name == "none" or k == 0:
            return "none", 0
        return name, k

    # ------------------------------------------------------------------ tokenizer glue
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="adaptspec-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        self._thread = None

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ requests
    def _make_seq(self, req: GenRequest, sink) -> Seq:
        ids = req.prompt_token_ids
        if not ids:
            raise RequestError("the prompt is empty", param="prompt")
        if any(not 0 <= t < self.vocab_size for t in ids):
            raise RequestError(f"prompt token ids must be in [0, {self.vocab_size})", param="prompt")
        if req.max_tokens < 1:
            raise RequestError(f"max_tokens must be >= 1, got {req.max_tokens}", param="max_tokens")
        if len(ids) + req.max_tokens > self.max_model_len:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{len(ids) + req.max_tokens} tokens ({len(ids)} in the prompt, {req.max_tokens} in the "
                "completion).", param="max_tokens", code="context_length_exceeded")
        self._check_sampling(req)
        if req.proposer is None:
            name, k = self.default_proposer, self.default_k
            if req.num_speculative_tokens is not None:
                name, k = self._check_spec(name if name != "none" else "ngram", req.num_speculative_tokens)
        else:
            k = req.num_speculative_tokens if req.num_speculative_tokens is not None else (self.default_k or 4)
            name, k = self._check_spec(req.proposer, k)
        if req.ignore_eos:
            stop = set(req.stop_token_ids or ())
        else:
            stop = set(req.stop_token_ids if req.stop_token_ids is not None else self.tokenizer.eos_token_ids)
        schedule = None
        if req.schedule is not None:
            try:
                schedule = parse_schedule(req.schedule, self.max_speculative_tokens)
            except ValueError as e:
                raise RequestError(f"speculation.schedule {e}", param="speculation.schedule") from None
        return Seq(req, name, k, stop, sink, schedule if name != "none" else None)

    @staticmethod
    def _check_sampling(req: GenRequest) -> None:
        """Sampling values as the step will see them (float32): a value that only breaks after rounding
        (top_p=1e-300 -> 0.0, temperature=1e-50 -> a denormal that overflows logits / T) is refused here,
        per request, instead of raising inside a batched step."""
        for name in ("temperature", "top_p"):
            v = getattr(req, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise RequestError(f"{name} must be a number, got {v!r}", param=name)
        t32 = float(torch.tensor(float(req.temperature), dtype=torch.float32))
        if not math.isfinite(t32) or t32 < 0 or (t32 == 0) != (req.temperature == 0) or 0 < t32 < MIN_TEMPERATURE:
            raise RequestError(f"temperature must be 0 or a finite number >= {MIN_TEMPERATURE:g}, "
                               f"got {req.temperature!r}", param="temperature")
        p32 = float(torch.tensor(float(req.top_p), dtype=torch.float32))
        if not (0 < req.top_p <= 1 and 0 < p32 <= 1):
            raise RequestError(f"top_p must be in (0, 1] (and positive in float32), got {req.top_p!r}",
                               param="top_p")
        if req.seed is not None and (isinstance(req.seed, bool) or not isinstance(req.seed, int)
                                     or not -(2**63) <= req.seed < 2**64):
            raise RequestError(f"seed must be an integer in [-2**63, 2**64), got {req.seed!r}", param="seed")

    def submit(self, req: GenRequest, sink) -> None:
        """Queue a request; `sink(StepOutput | BaseException)` is called from the engine thread."""
        seq = self._make_seq(req, sink)
        with self._lock:
            self._waiting.append(seq)
            self._wake.notify_all()
        self.start()

    async def generate(self, req: GenRequest) -> AsyncIterator[StepOutput]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def sink(item) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is closed: nobody is listening any more
                log.debug("dropping output of %s: event loop closed", req.request_id)

        self.submit(req, sink)
        done = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    done = True
                    raise item
                done = item.finished
                yield item
                if done:
                    return
        finally:
            if not done:
                self.abort(req.request_id)

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborts.add(request_id)
            self._wake.notify_all()

    def set_speculation_cap(self, cap: int | None) -> None:
        """Cap every request's gamma at `cap` from the next step on (0: speculation off for all, running requests
        included; None: no cap). Raises ValueError for anything but None or an integer in [0, max k]."""
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)
                                or not 0 <= cap <= self.max_speculative_tokens):
            raise ValueError(f"speculation cap must be null or an integer between 0 and "
                             f"{self.max_speculative_tokens}, got {cap!r}")
        self.speculation_cap = cap  # one attribute: the step thread reads it once per step

    def metrics(self) -> EngineMetrics:
        with self._lock:
            m = self._m
            used = sum(s.kv_len for s in self._running)
            return EngineMetrics(
                running=len(self._running), waiting=len(self._waiting),
                kv_cache_usage=used / float(self.max_batch * self.max_model_len),
                spec_num_drafts=m.spec_num_drafts, spec_num_draft_tokens=m.spec_num_draft_tokens,
                spec_num_accepted_tokens=m.spec_num_accepted_tokens,
                spec_accepted_per_pos=list(m.spec_accepted_per_pos), spec_by_class=dict(m.spec_by_class),
                num_steps=m.num_steps, num_generated_tokens=m.num_generated_tokens, step_counters=m.step_counters)

    # ------------------------------------------------------------------ the step loop
    def _loop(self) -> None:
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        while True:
            with self._lock:
                while not self._stopping and not self._running and not self._waiting:
                    self._wake.wait()
                if self._stopping:
                    pending = list(self._running) + list(self._waiting)
                    self._waiting.clear()
                    break
                self._handle_aborts_locked()
                self._admit_locked()
                batch = list(self._running)
            if not batch:
                continue
            try:
                self.step(batch)
            except Exception as e:  # a bug or OOM must not leave clients hanging
                log.exception("engine step failed; failing %d requests", len(batch))
                with self._lock:
                    for s in batch:
                        self._finish_locked(s)
                for s in batch:
                    self._emit(s, RuntimeError(f"engine step failed: {e}"))
        for s in pending:
            self._emit(s, s.output([], True, "abort"))
        with self._lock:
            for s in list(self._running):
                self._finish_locked(s)

    def _handle_aborts_locked(self) -> None:
        if not self._aborts:
            return
        ids, self._aborts = self._aborts, set()
        for s in [s for s in self._running if s.req.request_id in ids]:
            self._finish_locked(s)
            self._emit(s, s.output([], True, "abort"))
        for s in [s for s in self._waiting if s.req.request_id in ids]:
            self._waiting.remove(s)
            self._emit(s, s.output([], True, "abort"))

    def _admit_locked(self) -> None:
        budget = self.max_prefill_tokens
        admitted = 0
        while self._waiting and self._free_slots:
            n = len(self._waiting[0].tokens)
            if admitted and n > budget:
                break
            s = self._waiting.popleft()
            s.queue_s = time.monotonic() - s.queued_at
            s.slot = heapq.heappop(self._free_slots)
            s.kv_len = 0
            self._running.append(s)
            if s.proposer != "none":
                self._proposers[s.proposer].add(s.req.request_id)
            budget -= n
            admitted += 1

    def _finish_locked(self, s: Seq) -> None:
        if s in self._running:
            self._running.remove(s)
            heapq.heappush(self._free_slots, s.slot)
            if s.proposer != "none":
                self._proposers[s.proposer].remove(s.req.request_id)

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

    # ------------------------------------------------------------------ blocking helper (scripts, tests)
    def generate_sync(self, reqs: list[GenRequest], timeout: float = 300.0) -> dict[str, list[int]]:
        """Run `reqs` to completion from a plain thread; -> {request_id: generated token ids}."""
        return {rid: tokens for rid, (tokens, _) in self.run_sync(reqs, timeout).items()}

    def run_sync(self, reqs: list[GenRequest], timeout: float = 300.0) -> dict[str, tuple[list[int], StepOutput]]:
        """Run `reqs` together to completion from a plain thread; -> {request_id: (generated token ids, its last
        StepOutput)} (the last output carries the request's speculation counters)."""
        results: dict[str, list[int]] = {r.request_id: [] for r in reqs}
        last: dict[str, StepOutput] = {}
        done = threading.Event()
        remaining = [len(reqs)]
        errors: list[BaseException] = []
        lock = threading.Lock()

        def make_sink(rid):
            def sink(item):
                with lock:
                    if isinstance(item, BaseException):
                        errors.append(item)
                        finished = True
                    else:
                        results[rid].extend(item.new_token_ids)
                        last[rid] = item
                        finished = item.finished
                    if finished:
                        remaining[0] -= 1
                        if remaining[0] == 0:
                            done.set()
            return sink

        for r in reqs:
            self.submit(r, make_sink(r.request_id))
        t0 = time.monotonic()
        if not done.wait(timeout):
            raise TimeoutError(f"run_sync: not done after {time.monotonic() - t0:.0f}s")
        if errors:
            raise errors[0]
        return {rid: (tokens, last[rid]) for rid, tokens in results.items()}
