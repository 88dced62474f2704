"""Acceptance traces: measured per-position acceptance of each proposer, one request per JSONL line.

    {"id": "q17", "class": "code", "prompt_tokens": 412, "output_tokens": 6, "max_k": 4,
     "accept_runs": {"ngram": [1, 3, 1, 1, 2, 1], "eagle": [2, 5, 3, 1, 2, 1]},
     "prompt": "...", "temperature": 0.0}

`accept_runs[p][i]` (i = 0 .. output_tokens - 1) is the number of tokens a verification step emits when it
starts with i output tokens already generated and proposer p drafts up to `max_k` tokens: 1 = the first draft
token was rejected or nothing was drafted, at most `max_k + 1` (every draft accepted plus the bonus token).
A step that drafts gamma <= max_k tokens emits `min(run, gamma + 1)`. Index 0 is the step right after the
prompt; engines whose prefill emits the first output token (vLLM, the reference worker, the simulator) start
decoding at index 1. A request may carry any subset of the proposers ngram / draft / eagle. `class` is one of
the six content classes and may be left out when `prompt` is given: the shipped classifier then decides.
`temperature` defaults to 0 (greedy). This is the per-position form public measurement studies of vLLM
publish, so traces measured on real GPUs replay as they are (`adaptspec simulate --trace FILE`).

Stable API (the recorder, `adaptspec trace record`, writes through it):

    load_traces(path) -> list[TraceRequest]        every line validated; ConfigError names file, line, key, value
    validate(obj, source="<trace>", line=1) -> TraceRequest    one parsed JSON object
    dump(requests, path) -> Path                   write JSONL that load_traces reads back unchanged
    TraceRequest.to_dict() -> dict                 one line's JSON object
    synthesize(workload, n, seed=0, max_k=8) -> list[TraceRequest]    a synthetic trace (tests, demos)
    TraceWorkload(requests, order=, seed=) / TraceWorkload.from_files(paths, order=, seed=)
                                                   what `simulate` replays ("shuffle" | "file" order)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ConfigError

if TYPE_CHECKING:
    from adaptspec.bench.workloads import Workload

TRACE_PROPOSERS: tuple[str, ...] = ("ngram", "draft", "eagle")
_REQUIRED = ("id", "prompt_tokens", "output_tokens", "max_k", "accept_runs")
_KEYS = frozenset((*_REQUIRED, "class", "prompt", "temperature"))


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace. `content_class` is the trace's `class`, or the classifier's on `prompt`."""

    id: str
    content_class: str
    prompt_tokens: int
    output_tokens: int
    max_k: int
    accept_runs: Mapping[str, tuple[int, ...]]  # proposer -> run per output position, len == output_tokens
    prompt: str | None = None
    temperature: float = 0.0
    class_given: bool = True  # False: `content_class` came from the classifier (not written back by dump)

    def emitted(self, proposer: str, position: int, gamma: int) -> int:
        """Tokens a step starting at `position` emits when `proposer` drafts `gamma` tokens (0: one)."""
        if gamma <= 0:
            return 1
        return min(self.accept_runs[proposer][position], gamma + 1)

    def to_dict(self) -> dict:
        out: dict = {"id": self.id}
        if self.class_given:
            out["class"] = self.content_class
        out.update(prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens, max_k=self.max_k,
                   accept_runs={p: list(r) for p, r in self.accept_runs.items()})
        if self.prompt is not None:
            out["prompt"] = self.prompt
        if self.temperature:
            out["temperature"] = self.temperature
        return out


def _fail(message: str, source: str, line: int, key: str | None = None, value: object = None) -> ConfigError:
    return ConfigError(f"invalid trace line {line}: {message}", file=source, key=key, value=value)


def _int(obj: Mapping, key: str, lo: int, source: str, line: int) -> int:
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise _fail(f"must be an integer >= {lo}", source, line, key, v)
    return v


def validate(obj: object, source: str = "<trace>", line: int = 1) -> TraceRequest:
    """One trace line (a parsed JSON object) -> TraceRequest, or ConfigError naming line, key and value."""
    if not isinstance(obj, Mapping):
        raise _fail("each line must be a JSON object", source, line, value=type(obj).__name__)
    unknown = sorted(set(obj) - _KEYS)
    if unknown:
        raise _fail(f"unknown key (expected {sorted(_KEYS)})", source, line, unknown[0], obj[unknown[0]])
    for key in _REQUIRED:
        if key not in obj:
            raise _fail("missing required key", source, line, key)
    rid = obj["id"]
    if not isinstance(rid, str) or not rid:
        raise _fail("must be a non-empty string", source, line, "id", rid)
    prompt_tokens = _int(obj, "prompt_tokens", 1, source, line)
    output_tokens = _int(obj, "output_tokens", 1, source, line)
    max_k = _int(obj, "max_k", 1, source, line)
    prompt = obj.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise _fail("must be a string", source, line, "prompt", prompt)
    temperature = obj.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature < 0:
        raise _fail("must be a finite number >= 0", source, line, "temperature", temperature)
    cls = obj.get("class")
    if cls is None:
        if prompt is None:
            raise _fail("give 'class', or 'prompt' for the classifier to decide", source, line, "class")
        from adaptspec.control.classify import Classifier

        cls, given = Classifier.default().predict(prompt)[0], False
    elif cls not in CONTENT_CLASSES:
        raise _fail(f"unknown content class (expected one of {list(CONTENT_CLASSES)})", source, line, "class", cls)
    else:
        given = True
    runs_obj = obj["accept_runs"]
    if not isinstance(runs_obj, Mapping) or not runs_obj:
        raise _fail("must be a non-empty object {proposer: [runs]}", source, line, "accept_runs", runs_obj)
    runs: dict[str, tuple[int, ...]] = {}
    for p, seq in runs_obj.items():
        key = f"accept_runs.{p}"
        if p not in TRACE_PROPOSERS:
            raise _fail(f"unknown proposer (expected one of {list(TRACE_PROPOSERS)})", source, line, "accept_runs", p)
        if not isinstance(seq, list) or len(seq) != output_tokens:
            n = len(seq) if isinstance(seq, list) else type(seq).__name__
            raise _fail(f"must be a list of output_tokens = {output_tokens} runs", source, line, key, n)
        for i, r in enumerate(seq):
            if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= max_k + 1:
                raise _fail(f"runs must be integers in 1..max_k+1 = 1..{max_k + 1}", source, line, f"{key}[{i}]", r)
        runs[p] = tuple(seq)
    return TraceRequest(rid, cls, prompt_tokens, output_tokens, max_k, runs, prompt, float(temperature), given)


def load_traces(path: str | Path) -> list[TraceRequest]:
    """Every request of a JSONL trace file, in file order (blank lines skipped; ids must be unique)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read trace: {exc.strerror}", file=str(p)) from None
    out: list[TraceRequest] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(f"not valid JSON: {exc.msg} at column {exc.colno}", str(p), n) from None
        req = validate(obj, str(p), n)
        if req.id in seen:
            raise _fail(f"duplicate id (first on line {seen[req.id]})", str(p), n, "id", req.id)
        seen[req.id] = n
        out.append(req)
    if not out:
        raise ConfigError("trace has no requests", file=str(p))
    return out


def dump(requests: Iterable[TraceRequest], path: str | Path) -> Path:
    """Write `requests` as JSONL (one compact object a line) that `load_traces` reads back unchanged."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r.to_dict(), separators=(",", ":"), ensure_ascii=False) for r in requests]
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def synthesize(workload: Workload, n: int, *, seed: int = 0, max_k: int = 8, concentration: float = 4.0,
               proposers: Iterable[str] = TRACE_PROPOSERS) -> list[TraceRequest]:
    """A synthetic trace: `n` requests of `workload` (class, lengths), runs drawn per position.

    Each request gets its own first-position rate per proposer, Beta-distributed around its class's rate in
    `workloads.ACCEPTANCE` with `concentration` (a + b; small = requests differ a lot within a class), and
    keeps that table's per-position decay. Runs are capped at the output left (as a recorder does). For
    tests and for replay demos; measured traces come from `adaptspec trace record`.
    """
    from adaptspec.bench.workloads import ACCEPTANCE

    rng = np.random.default_rng([seed, 7])
    cls_idx, prompt, output = workload.sample(rng, n)
    out = []
    for r in range(n):
        cls, n_out = workload.classes[cls_idx[r]], int(output[r])
        runs = {}
        for p in proposers:
            acc = ACCEPTANCE[p][cls]
            mean = min(max(acc.alpha, 1e-3), 1 - 1e-3)
            a = rng.beta(mean * concentration, (1 - mean) * concentration)
            rates = np.clip(a * acc.decay ** np.arange(max_k), 0.0, 1.0)  # [max_k]
            ok = rng.random((n_out, max_k)) < rates  # [n_out, max_k]
            run = 1 + np.cumprod(ok, axis=1).sum(axis=1)  # [n_out]
            run = np.minimum(run, n_out - np.arange(n_out))  # a step cannot emit past the end
            runs[p] = tuple(int(x) for x in run)
        out.append(TraceRequest(f"synth-{seed}-{r}", cls, int(prompt[r]), n_out, max_k, runs))
    return out


TRACE_ORDERS: tuple[str, ...] = ("shuffle", "file")


class TraceWorkload:
    """Traces as a simulator workload: request r of a run is entry r mod n of the replay order.

    `order="shuffle"` (what `adaptspec simulate --trace` does by default): the requests in one fixed random
    permutation drawn from `seed` (every file's requests mixed), as a live server's arrivals interleave users
    and tasks; a recorded file's order is how its recorder walked its prompt set (the shipped traces come in
    class blocks of 20-60), and replayed as it is, each concurrency point would measure different classes and
    meet some of them cold mid-point: an artifact of the file, not of the policy. `order="file"`: the files'
    order, files one after another (for a time-ordered production log whose sequence is the point).

    Has the `Workload` surface the simulator uses (`name`, `classes`, `sample`), plus the runs: the same
    requests come in the same order for every policy (common random numbers without any coin).
    """

    def __init__(self, requests: Sequence[TraceRequest], name: str = "trace", *, order: str = "file",
                 seed: int = 0) -> None:
        if not requests:
            raise ConfigError("trace has no requests", key="--trace")
        if order not in TRACE_ORDERS:
            raise ConfigError(f"unknown trace order (one of {', '.join(TRACE_ORDERS)})", key="--trace-order",
                              value=order)
        self.name = name
        self.order = order
        self.requests = list(requests)
        if order == "shuffle":
            perm = np.random.default_rng([seed, 0x7ACE]).permutation(len(self.requests))  # [n]
            self.requests = [self.requests[i] for i in perm]
        self.classes = CONTENT_CLASSES
        self.max_output = max(r.output_tokens for r in self.requests)

    @classmethod
    def from_files(cls, paths: Sequence[str | Path], *, order: str = "file", seed: int = 0) -> TraceWorkload:
        """Every file's requests, files one after another, replayed in `order` (see the class doc)."""
        reqs = [r for p in paths for r in load_traces(p)]
        return cls(reqs, name="+".join(Path(p).stem for p in paths), order=order, seed=seed)

    def request(self, r: int) -> TraceRequest:
        return self.requests[r % len(self.requests)]

    def sample(self, rng: object, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(class index into `classes`, prompt tokens, output tokens) of pool requests 0..n-1 (`rng` unused)."""
        reqs = [self.request(r) for r in range(n)]
        cls_idx = np.array([CONTENT_CLASSES.index(q.content_class) for q in reqs], dtype=np.int64)
        return (cls_idx, np.array([q.prompt_tokens for q in reqs], dtype=np.int64),
                np.array([q.output_tokens for q in reqs], dtype=np.int64))
