"""OpenAI-compatible request models, validation and error bodies of the reference worker.

Bodies are parsed by hand (not by FastAPI's dependency injection) so that every client mistake becomes
an OpenAI-style 400 with a message naming the field, never a 422 with a pydantic dump or a 500.
Unknown fields are ignored, as OpenAI and vLLM do; fields whose meaning we cannot honour (n > 1,
logprobs, echo, suffix, best_of) are refused clearly instead of being silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from adaptspec.control.hybrid_rule import rule_error
from adaptspec.control.schedule import Schedule, parse_schedule
from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import RequestError
from adaptspec.errors import error_body as _error_body
from adaptspec.jsonlimits import loads_limited


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lenient):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class Speculation(BaseModel):
    """The per-request speculation field (adaptspec extension; see docs/INTERFACES.md)."""

    model_config = ConfigDict(extra="forbid")

    proposer: str | None = None
    num_speculative_tokens: StrictInt | None = None
    content_class: str | None = None
    schedule: Any = None  # [[max_running_batch, cap], ...], checked by resolve_speculation (a clear 400)
    hybrid_rule: Any = None  # a per-step hybrid's rule by name (control/hybrid_rule.py RULES), checked there too


class _SamplingRequest(_Lenient):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**64)  # what torch.Generator.manual_seed takes
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    speculation: Speculation | None = None
    ignore_eos: bool = False  # vLLM extension: keep generating past EOS (fixed-length benchmarks)
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else list(value)
        if any(s == "" for s in stops):
            raise ValueError("stop strings must be non-empty")
        return stops or None


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = None
    best_of: int | None = None


class ChatMessage(_Lenient):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(
                    f"Only text content parts are supported; got a part of type {part.get('type')!r}.",
                    param="messages",
                )
            parts.append(part["text"])
        return "".join(parts)


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = None


def parse_body(raw: bytes, model: type[BaseModel]) -> Any:
    """Bytes -> validated request model, or a RequestError (400) naming the offending field."""
    data = loads_limited(raw)  # depth and number limits: 400, never a RecursionError / ValueError 500
    if not isinstance(data, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"]) or None
        # pydantic reports every member of a union; the field name and the first reason are what help.
        raise RequestError(f"Invalid value for '{loc}': {err['msg']}", param=loc, code="invalid_value") from None


def check_unsupported(req: _SamplingRequest) -> None:
    if req.n != 1:
        raise RequestError(f"Only n=1 is supported by this worker; got n={req.n}.", param="n",
                           code="unsupported_value")
    if isinstance(req, CompletionRequest):
        if req.echo:
            raise RequestError("echo=true is not supported by this worker.", param="echo",
                               code="unsupported_value")
        if req.suffix:
            raise RequestError("suffix is not supported by this worker.", param="suffix",
                               code="unsupported_value")
        if req.logprobs:
            raise RequestError("logprobs are not supported by this worker.", param="logprobs",
                               code="unsupported_value")
        if req.best_of not in (None, 1):
            raise RequestError("best_of > 1 is not supported by this worker.", param="best_of",
                               code="unsupported_value")
    if isinstance(req, ChatCompletionRequest) and (req.logprobs or req.top_logprobs):
        raise RequestError("logprobs are not supported by this worker.", param="logprobs",
                           code="unsupported_value")


@dataclass(frozen=True, slots=True)
class SpecChoice:
    proposer: str  # "none" when speculation is off
    k: int  # 0 when speculation is off
    content_class: str | None
    schedule: Schedule | None = None  # caps on k by the running batch (control/schedule.py)
    hybrid_rule: str | None = None  # the per-step hybrid's rule for this request (None: the worker's own)


def resolve_speculation(spec: Speculation | None, *, default_proposer: str, default_k: int,
                        proposers: tuple[str, ...], max_k: int) -> SpecChoice:
    """The request's speculation field, validated against what this worker offers.

    Absent field or absent proposer -> the worker's default; absent k -> the worker's default k.
    Proposer "none" or k == 0 means speculation off for this request.
    """
    if spec is None:
        spec = Speculation()
    proposer = spec.proposer if spec.proposer is not None else default_proposer
    offered = ("none", *proposers)
    if proposer not in offered:
        raise RequestError(
            f"Unknown speculation.proposer {proposer!r}; this worker offers {', '.join(offered)}.",
            param="speculation.proposer", code="invalid_value")
    k = spec.num_speculative_tokens if spec.num_speculative_tokens is not None else default_k
    if k < 0 or k > max_k:
        raise RequestError(
            f"speculation.num_speculative_tokens must be between 0 and {max_k}; got {k}.",
            param="speculation.num_speculative_tokens", code="invalid_value")
    cls = spec.content_class
    if cls is not None and cls not in CONTENT_CLASSES:
        raise RequestError(
            f"Unknown speculation.content_class {cls!r}; expected one of {', '.join(CONTENT_CLASSES)}.",
            param="speculation.content_class", code="invalid_value")
    schedule = None
    if spec.schedule is not None:
        try:
            schedule = parse_schedule(spec.schedule, max_k)
        except ValueError as e:
            raise RequestError(f"speculation.schedule {e}.", param="speculation.schedule",
                               code="invalid_value") from None
    rule = spec.hybrid_rule
    why = rule_error(rule, proposer)
    if why is not None:
        raise RequestError(why + ".", param="speculation.hybrid_rule", code="invalid_value")
    if proposer == "none" or k == 0:
        return SpecChoice("none", 0, cls)
    return SpecChoice(proposer, k, cls, schedule, rule)


def error_body(status: int, message: str, *, type: str | None = None, code: str | None = None,
               param: str | None = None) -> dict:
    """The shared OpenAI error body (adaptspec.errors), with the worker's defaults: code = the status,
    type "service_unavailable" for 503."""
    return _error_body(status, message, type=type or ("service_unavailable" if status == 503 else None),
                       code=code if code is not None else status, param=param)
