"""Engine adapters: everything the proxy does differently per engine type, in one place.

One adapter per engine (`adaptspec`, `vllm`, `sglang`, `openai`), looked up once per worker
(`Worker.adapter`). An adapter says

* whether the engine takes per-request speculation, and how a decision is written into the upstream body
  (adaptspec: a `speculation` object; vLLM + the adaptspec plugin: `vllm_xargs`; others: nothing);
* whether its responses carry usage / speculation stats worth parsing (`scan`), and whether those are
  always the feedback source (`own_feedback`: the adaptspec worker);
* whether it exposes Prometheus metrics (`scraped`) and how scraped speculation families become alpha
  observations (`ingest`: counters for vLLM-style engines, the accept-length gauge for SGLang);
* which of the pass-through endpoints (proxy/passthrough.py: `/v1/embeddings`, `/v1/responses`, `/tokenize`,
  `/detokenize`) it serves (`passthrough`).

Nothing outside this module compares engine names: the request path, feedback and the scraper ask the
adapter. The metric names live in adaptspec.control.metric_names.
"""

from __future__ import annotations

from adaptspec.control.counters import ingest_sglang, ingest_vllm
from adaptspec.control.types import ENGINES
from adaptspec.errors import ConfigError, RequestError

EMBEDDINGS, RESPONSES, TOKENIZE, DETOKENIZE = "/v1/embeddings", "/v1/responses", "/tokenize", "/detokenize"
PASSTHROUGH = (EMBEDDINGS, RESPONSES, TOKENIZE, DETOKENIZE)  # every endpoint proxy/passthrough.py routes


class Engine:
    """Defaults: an OpenAI-compatible server we can only route to (no speculation control, no metrics)."""

    name = "openai"
    per_request = False  # takes a per-request speculation decision in the body
    scan = False  # responses carry usage / speculation stats the proxy parses
    own_feedback = False  # per-request stats are always the alpha source (never the scraped counters)
    scraped = False  # exposes Prometheus /metrics with occupancy (and speculation) families
    # verifies each request's own draft tokens, flattened (WorkerState.flat_verify): every engine but the
    # reference worker, whose verify pads every row to the batch's longest draft (a profile's `padded_verify`)
    flat_verify = True
    # pass-through endpoints it serves (proxy/passthrough.py): OpenAI's API has embeddings and responses
    passthrough: frozenset[str] = frozenset({EMBEDDINGS, RESPONSES})

    def client_speculation(self, body: dict) -> object | None:
        """The client's own `speculation` field, for engines that understand one (else None)."""
        return None

    def rewrite(self, body: dict, per_request: bool, proposer: str, gamma: int,
                content_class: str, schedule: list | None = None,
                hybrid_rule: str | None = None) -> tuple[dict, tuple[str, ...]]:
        """(fields to set, fields to drop) in the upstream body for this attempt's applied plan (`schedule`:
        the decision's gamma caps by running batch, [[max_running_batch, cap], ...], or None; `hybrid_rule`: a
        per-step hybrid's rule by name, control/hybrid_rule.py RULES, for the engines that run one)."""
        return {}, ()

    def ingest(self, table, tracker, worker: str, samples: list, proposer: str, gamma: int) -> int:
        """Scraped speculation samples -> alpha observations in `table`; returns keys updated."""
        return 0

    def __repr__(self) -> str:
        return f"<engine {self.name}>"


class AdaptspecEngine(Engine):
    name = "adaptspec"
    per_request = scan = own_feedback = scraped = True
    flat_verify = False
    passthrough = frozenset({EMBEDDINGS, TOKENIZE, DETOKENIZE})  # the reference worker (worker/_tokenize.py)

    def client_speculation(self, body: dict) -> object | None:
        return body.get("speculation")

    def rewrite(self, body, per_request, proposer, gamma, content_class, schedule=None, hybrid_rule=None):
        if per_request:  # always ours (validated, clamped): the client's field never passes as is
            spec = {"proposer": proposer, "num_speculative_tokens": gamma, "content_class": content_class}
            if schedule:
                spec["schedule"] = schedule
            if hybrid_rule and proposer == "hybrid":
                spec["hybrid_rule"] = hybrid_rule
            return {"speculation": spec}, ()
        if "speculation" in body:
            return {}, ("speculation",)  # a fixed-speculation worker would honour it: not the client's call
        return {}, ()

    def ingest(self, table, tracker, worker, samples, proposer, gamma):
        return ingest_vllm(table, tracker, worker, samples, proposer)


class VllmEngine(Engine):
    name = "vllm"
    per_request = scan = scraped = True
    # /v1/embeddings only answers for a pooling model (`--runner pooling`); others 404 upstream, relayed as is
    passthrough = frozenset({EMBEDDINGS, RESPONSES, TOKENIZE, DETOKENIZE})

    def rewrite(self, body, per_request, proposer, gamma, content_class, schedule=None, hybrid_rule=None):
        if not per_request:
            return {}, ()
        xargs = body.get("vllm_xargs") or {}
        if not isinstance(xargs, dict):
            raise RequestError("Invalid value for 'vllm_xargs': expected an object.", status=422,
                               code="invalid_type", param="vllm_xargs")
        xargs = {**xargs, "adaptspec_num_spec_tokens": gamma, "adaptspec_proposer": proposer,
                 "adaptspec_content_class": content_class}
        if schedule:  # vllm_xargs values are scalars: "max_running_batch:cap,..." (vllm_plugin.py)
            xargs["adaptspec_schedule"] = ",".join(f"{b}:{c}" for b, c in schedule)
        return {"vllm_xargs": xargs}, ()

    def ingest(self, table, tracker, worker, samples, proposer, gamma):
        return ingest_vllm(table, tracker, worker, samples, proposer)


class SglangEngine(Engine):
    name = "sglang"
    scan = scraped = True
    passthrough = frozenset({EMBEDDINGS, RESPONSES, TOKENIZE, DETOKENIZE})  # its native /tokenize, /detokenize

    def ingest(self, table, tracker, worker, samples, proposer, gamma):
        return ingest_sglang(table, tracker, worker, samples, proposer, gamma)


ADAPTERS: dict[str, Engine] = {e.name: e for e in (AdaptspecEngine(), VllmEngine(), SglangEngine(), Engine())}


def adapter(engine: str) -> Engine:
    """The adapter of `engine`; a ConfigError naming the value for an unknown one."""
    try:
        return ADAPTERS[engine]
    except KeyError:
        raise ConfigError(f"unknown engine; expected one of {', '.join(ENGINES)}", key="engine",
                          value=engine) from None
