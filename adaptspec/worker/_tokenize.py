"""The reference worker's non-generating endpoints: POST /tokenize, /detokenize (vLLM's shapes) and
/v1/embeddings (OpenAI's shape).

    POST /tokenize    {"model"?, "prompt": str, "add_special_tokens"?: true, "return_token_strs"?: false}
                   or {"model"?, "messages": [...], "add_generation_prompt"?: true, "return_token_strs"?}
                   -> {"count", "max_model_len", "tokens": [int], "token_strs": [str] | null}
    POST /detokenize  {"model"?, "tokens": [int]} -> {"prompt": str}

The ids are exactly what /v1/completions (prompt) and /v1/chat/completions (messages, the chat template with
the generation prompt) feed the model. The shipped tokenizers add no special tokens (`add_bos_token` false,
a byte-level post-processor), so `add_special_tokens` is accepted for vLLM's shape and changes nothing.
`/detokenize` decodes as generated text is decoded (special tokens skipped).

    POST /v1/embeddings  {"model"?, "input": str | [str] | [int] | [[int]], "encoding_format"?: "float" | "base64"}

An embedding is the target model's final hidden state (after the last norm), mean-pooled over the input's
tokens and L2-normalised: [hidden_size] floats per input (256 for the tiny target). A language model's pooled
state, not a trained embedding model: good for plumbing and similarity smoke tests, not for retrieval
quality. It runs in the worker's CPU pool, beside (not inside) the engine's batches. `base64` is the
little-endian float32 bytes, as the `openai` client decodes them (its default).
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import torch
import torch.nn.functional as F
from fastapi import FastAPI, Request
from pydantic import Field, StrictInt

from adaptspec.errors import RequestError
from adaptspec.jsonlimits import loads_limited
from adaptspec.worker._openai import ChatMessage, _Lenient, parse_body

MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit on inputs per request


class TokenizeCompletion(_Lenient):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChat(_Lenient):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    return_token_strs: bool | None = False


class Detokenize(_Lenient):
    model: str | None = None
    tokens: list[StrictInt]


class Embeddings(_Lenient):
    model: str | None = None
    input: str | list[str] | list[StrictInt] | list[list[StrictInt]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


def add_routes(app: FastAPI, worker: Any, respond) -> None:
    """Register the endpoints on `app`; `worker` is server._Worker, `respond(obj, status)` its JSON response."""
    model = getattr(worker.engine, "model", None)

    @app.post("/tokenize")
    async def tokenize(request: Request):
        raw = await request.body()
        req = await worker.off_loop(len(raw), _parse_tokenize, raw)
        worker.check_model(req.model)
        ids = await worker.off_loop(len(raw), _token_ids, worker, req)
        strs = None
        if req.return_token_strs:
            to_token = worker.engine.tokenizer.id_to_token
            strs = [to_token(i) or "" for i in ids]
        return respond({"count": len(ids), "max_model_len": worker.max_model_len, "tokens": ids,
                        "token_strs": strs})

    @app.post("/detokenize")
    async def detokenize(request: Request):
        raw = await request.body()
        req = await worker.off_loop(len(raw), parse_body, raw, Detokenize)
        worker.check_model(req.model)
        _check_ids(req.tokens, worker, "tokens")
        return respond({"prompt": await worker.off_loop(len(raw), worker.decode, req.tokens)})

    if model is None:  # an engine without a model to pool (test doubles): no embeddings
        return

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        raw = await request.body()
        req = await worker.off_loop(len(raw), parse_body, raw, Embeddings)
        worker.check_model(req.model)
        hidden = int(model.cfg.hidden_size)
        if req.dimensions is not None and req.dimensions != hidden:
            raise RequestError(f"This model's embeddings have {hidden} dimensions; 'dimensions' cannot change "
                               "that.", param="dimensions", code="unsupported_value")
        inputs = _inputs(req.input, worker)
        vectors = await worker.run_cpu(_embed, model, inputs)  # [n, hidden]
        data = [{"object": "embedding", "index": i, "embedding": _encode(v, req.encoding_format)}
                for i, v in enumerate(vectors)]
        n_tokens = sum(len(ids) for ids in inputs)
        return respond({"object": "list", "data": data, "model": worker.settings.served_model_name,
                        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


def _parse_tokenize(raw: bytes) -> TokenizeCompletion | TokenizeChat:
    """vLLM's two forms, told apart by the `messages` field."""
    data = loads_limited(raw)
    chat = isinstance(data, dict) and "messages" in data
    return parse_body(raw, TokenizeChat if chat else TokenizeCompletion)


def _token_ids(worker: Any, req: TokenizeCompletion | TokenizeChat) -> list[int]:
    if isinstance(req, TokenizeCompletion):
        return worker.encode(req.prompt)
    if req.continue_final_message and req.add_generation_prompt:
        raise RequestError("Cannot set both `continue_final_message` and `add_generation_prompt` to true.",
                           param="continue_final_message", code="invalid_value")
    if req.continue_final_message:
        raise RequestError("continue_final_message is not supported by this worker.",
                           param="continue_final_message", code="unsupported_value")
    messages = [{"role": m.role, "content": m.text()} for m in req.messages]
    render = getattr(worker.engine, "apply_chat_template", None)
    if render is None or not getattr(worker.engine, "chat_template", None):
        raise RequestError("This model has no chat template; tokenize a prompt instead.", code="no_chat_template")
    try:
        text = render(messages, add_generation_prompt=req.add_generation_prompt)
    except ValueError as exc:  # the template's raise_exception(): e.g. roles out of order
        raise RequestError(f"Cannot apply the chat template to these messages: {exc}", param="messages") from None
    return worker.encode(text)


def _check_ids(ids: list[int], worker: Any, param: str) -> None:
    vocab = int(getattr(worker.engine, "vocab_size", 0) or 0)
    if vocab and any(not 0 <= t < vocab for t in ids):
        raise RequestError(f"Token ids must be in [0, {vocab}).", param=param, code="invalid_value")


def _inputs(value: str | list, worker: Any) -> list[list[int]]:
    """The request's `input` -> one token-id list per embedding, each non-empty and within the context."""
    if isinstance(value, str):
        items: list = [value]
    elif value and all(isinstance(v, int) for v in value):
        items = [value]  # one pre-tokenised input
    else:
        items = list(value)
    if not items:
        raise RequestError("'input' must not be empty.", param="input", code="invalid_value")
    if len(items) > MAX_EMBEDDING_INPUTS:
        raise RequestError(f"'input' holds {len(items)} items; at most {MAX_EMBEDDING_INPUTS} per request.",
                           param="input", code="invalid_value")
    out = []
    for item in items:
        ids = worker.encode(item) if isinstance(item, str) else list(item)
        if not ids:
            raise RequestError("An input is empty (no tokens).", param="input", code="invalid_value")
        if len(ids) > worker.max_model_len:
            raise RequestError(f"This model's maximum context length is {worker.max_model_len} tokens; an input "
                               f"has {len(ids)}.", param="input", code="context_length_exceeded")
        _check_ids(ids, worker, "input")
        out.append(ids)
    return out


@torch.inference_mode()
def _embed(model: Any, inputs: list[list[int]]) -> torch.Tensor:
    """Mean-pooled, L2-normalised final hidden states: [n, hidden]."""
    device = model.embed.weight.device
    rows = []
    for ids in inputs:
        h = model.forward_dense(torch.tensor([ids], device=device), return_hidden=True)  # [1, T, hidden]
        rows.append(h[0].float().mean(dim=0))  # [hidden]
    return F.normalize(torch.stack(rows), dim=-1).cpu()  # [n, hidden]


def _encode(vector: torch.Tensor, fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(vector.numpy().astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()
