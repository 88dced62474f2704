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
        out.by_source                                        # hybrid, last output: steps by draft source
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

from adaptspec.control.hybrid_rule import RULES, rule_error
from adaptspec.control.schedule import parse_schedule
from adaptspec.control.types import PROPOSERS
from adaptspec.errors import RequestError
from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers import (
    DraftModelProposer,
    EagleHead,
    EagleProposer,
    HybridProposer,
    NgramProposer,
)
from adaptspec.worker.proposers.hybrid import HYBRID_MIN_MATCH
from adaptspec.worker.requests import EngineMetrics, GenRequest, Seq, SourceTally, StepOutput
from adaptspec.worker.stepping import Stepping
from adaptspec.worker.tokenizer import Tokenizer

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




class Engine(Stepping):
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
        # the per-step hybrid's rule, walked along every request not run with it (its shadow; None: lookup first)
        hybrid = self._proposers.get("hybrid")
        self.hybrid_rule = hybrid.rule() if hybrid is not None else None
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
        why = rule_error(req.hybrid_rule, name)
        if why is not None:
            raise RequestError(why, param="speculation.hybrid_rule")
        seq = Seq(req, name, k, stop, sink, schedule if name != "none" else None)
        if name == "hybrid":
            seq.tally = SourceTally()
        return seq

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
        self.submit_many([(req, sink)])

    def submit_many(self, items: list[tuple[GenRequest, object]]) -> None:
        """Queue several (request, sink) pairs at once: the engine thread sees all of them waiting together
        (one lock), so they are admitted to the same step when the batch has room."""
        seqs = [self._make_seq(req, sink) for req, sink in items]
        with self._lock:
            self._waiting.extend(seqs)
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
                if s.req.hybrid_rule is not None:  # the request's own rule (the proxy's per-class choice)
                    self._proposers["hybrid"].set_rule(s.req.request_id, RULES[s.req.hybrid_rule])
            budget -= n
            admitted += 1

    def _finish_locked(self, s: Seq) -> None:
        if s in self._running:
            self._running.remove(s)
            heapq.heappush(self._free_slots, s.slot)
            if s.proposer != "none":
                self._proposers[s.proposer].remove(s.req.request_id)

    # ------------------------------------------------------------------ blocking helper (scripts, tests)
    def generate_sync(self, reqs: list[GenRequest], timeout: float = 300.0) -> dict[str, list[int]]:
        """Run `reqs` to completion from a plain thread; -> {request_id: generated token ids}."""
        return {rid: tokens for rid, (tokens, _) in self.run_sync(reqs, timeout).items()}

    def run_sync(self, reqs: list[GenRequest], timeout: float = 300.0) -> dict[str, tuple[list[int], StepOutput]]:
        """Run `reqs` together to completion from a plain thread (queued at once: they join the same step when
        the batch has room); -> {request_id: (generated token ids, its last StepOutput)} (the last output carries
        the request's speculation counters)."""
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

        self.submit_many([(r, make_sink(r.request_id)) for r in reqs])
        t0 = time.monotonic()
        if not done.wait(timeout):
            raise TimeoutError(f"run_sync: not done after {time.monotonic() - t0:.0f}s")
        if errors:
            raise errors[0]
        return {rid: (tokens, last[rid]) for rid, tokens in results.items()}
