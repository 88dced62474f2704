"""A small but real OpenAI-compatible upstream for the proxy tests (run as its own process).

    python tests/proxy/upstream_app.py --port P [--name w0] [--model m] [--engine adaptspec|openai]
                                       [--alpha 0.75] [--chunks 8] [--delay-ms 0]

Answers /v1/chat/completions and /v1/completions (stream and non-stream); echoes the pass-through
endpoints' bodies (/v1/embeddings, /v1/responses, /tokenize, /detokenize; `"stream": true`: three SSE events). --engine vllm: fixed n-gram
speculation at --fixed-gamma, counters on /metrics only (no per-request stats). With --engine adaptspec it
behaves like the reference worker's protocol: it honours the body's `speculation` field, reports
`usage.speculative` with accepted = round(alpha * draft_tokens) (a body's `test_alpha` overrides --alpha), and exposes vLLM-named /metrics with
its live running count (plus a `running_offset` set via POST /_debug/set to simulate load). The debug
endpoints expose what it received (`GET /_debug/requests`) and how many requests were abandoned by
their client (`GET /_debug/state`). `--step-model O,C,K` adds step telemetry (control/telemetry.py): every
/metrics read advances the cumulative counters by one window of 50-200 steps at a batch that cycles through
1..48 requests (context 100-400 each), whose seconds follow O + C * batched + K * kv exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web


def build(name: str, model: str, engine: str, alpha: float, chunks: int, delay_ms: float,
          fixed_gamma: int = 0, step_model: tuple[float, float, float] | None = None,
          max_model_len: int = 2048) -> web.Application:
    app = web.Application()
    st = {"running": 0, "running_offset": 0.0, "waiting": 0.0, "kv": 0.0, "cancelled": 0, "completed": 0,
          "requests": [], "draft": 0, "accepted": 0, "drafts": 0, "by_class": {}}
    steps = {"i": 0, "steps": 0.0, "seconds": 0.0, "batched": 0.0, "kv": 0.0}

    def step_lines() -> list[str]:
        if step_model is None:
            return []
        o, c, k = step_model
        i = steps["i"] = steps["i"] + 1
        n, batch, ctx = 50 + (i * 37) % 150, 1 + (i * 11) % 48, 100 + (i * 13) % 300
        steps["steps"] += n
        steps["batched"] += n * batch
        steps["kv"] += n * batch * ctx
        steps["requests"] = steps.get("requests", 0) + n * batch
        steps["seconds"] += n * (o + c * batch + k * batch * ctx)
        lab = f'model_name="{model}"'
        return [f"adaptspec:engine_steps_total{{{lab}}} {steps['steps']}",
                f"adaptspec:engine_step_seconds_total{{{lab}}} {steps['seconds']!r}",
                f"adaptspec:engine_batched_tokens_total{{{lab}}} {steps['batched']}",
                f"adaptspec:engine_kv_tokens_total{{{lab}}} {steps['kv']}",
                f"adaptspec:engine_step_requests_total{{{lab}}} {steps['requests']}",
                f'adaptspec:engine_drafted_tokens_total{{{lab},proposer="draft"}} 0',
                f'adaptspec:engine_draft_passes_total{{{lab},proposer="draft"}} 0']

    def spec_of(body: dict) -> tuple[str, int, str]:
        if engine == "vllm":  # launched with fixed n-gram speculation; no per-request control or stats
            return ("ngram", fixed_gamma, "*") if fixed_gamma else ("none", 0, "*")
        spec = body.get("speculation") or {}
        proposer = spec.get("proposer") or "none"
        k = int(spec.get("num_speculative_tokens") or 0) if proposer != "none" else 0
        return proposer, k, spec.get("content_class") or "chat"

    async def generate(request: web.Request, kind: str) -> web.StreamResponse:
        body = await request.json()
        st["requests"].append({"path": request.path, "body": body,
                               "authorization": request.headers.get("Authorization"),
                               **{h: request.headers.get(h) for h in ("x-request-id", "traceparent", "tracestate")}})
        n = int(body.get("max_tokens") or chunks)
        delay = float(body.get("delay_ms", delay_ms)) / 1000
        proposer, k, cls = spec_of(body)
        steps = -(-n // (k + 1)) if k else n
        draft = steps * k
        a = float(body.get("test_alpha", alpha))  # a body may set its own acceptance (per-request prediction)
        accepted = min(round(a * draft), max(0, n - steps))
        usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
        if engine == "adaptspec":
            usage["speculative"] = {"draft_tokens": draft, "accepted_tokens": accepted, "steps": steps}
        base = {"id": f"{name}-{len(st['requests'])}", "created": int(time.time()), "model": body.get("model")}
        st["running"] += 1
        try:
            if not body.get("stream"):
                if delay:
                    await asyncio.sleep(delay * n)
                text = " ".join(["tok"] * n)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                          if kind == "chat" else {"index": 0, "text": text, "finish_reason": "length"})
                obj = "chat.completion" if kind == "chat" else "text_completion"
                _account(proposer, k, cls, draft, accepted, steps)
                st["completed"] += 1
                return web.json_response({**base, "object": obj, "choices": [choice], "usage": usage},
                                         headers={"x-upstream-worker": name})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "x-upstream-worker": name})
            await resp.prepare(request)
            obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
            for i in range(n):
                if delay:
                    await asyncio.sleep(delay)
                choice = ({"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": None} if kind == "chat"
                          else {"index": 0, "text": f" t{i}", "finish_reason": None})
                await resp.write(b"data: " + json.dumps({**base, "object": obj, "choices": [choice]}).encode()
                                 + b"\n\n")
            fin = ({"index": 0, "delta": {}, "finish_reason": "length"} if kind == "chat"
                   else {"index": 0, "text": "", "finish_reason": "length"})
            await resp.write(b"data: " + json.dumps({**base, "object": obj, "choices": [fin]}).encode() + b"\n\n")
            if (body.get("stream_options") or {}).get("include_usage"):
                await resp.write(b"data: " + json.dumps({**base, "object": obj, "choices": [], "usage": usage})
                                 .encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            _account(proposer, k, cls, draft, accepted, steps)
            st["completed"] += 1
            return resp
        except (asyncio.CancelledError, ConnectionResetError):
            st["cancelled"] += 1
            raise
        finally:
            st["running"] -= 1

    def _account(proposer: str, k: int, cls: str, draft: int, accepted: int, steps: int) -> None:
        if not k:
            return
        st["draft"] += draft
        st["accepted"] += accepted
        st["drafts"] += steps
        c = st["by_class"].setdefault((cls, proposer), [0, 0, 0])
        c[0] += steps
        c[1] += draft
        c[2] += accepted

    async def chat(request):
        return await generate(request, "chat")

    async def completions(request):
        return await generate(request, "completions")

    async def models(request):
        card = {"id": model, "object": "model", "created": 1700000000, "owned_by": name, "root": f"/models/{model}",
                "parent": None, "max_model_len": max_model_len}
        return web.json_response({"object": "list", "data": [card]})

    async def passthrough(request):
        """/v1/embeddings, /v1/responses, /tokenize, /detokenize: echo what came, as JSON or (stream) 3 SSE events."""
        body = await request.json()
        st["requests"].append({"path": request.path, "body": body,
                               "authorization": request.headers.get("Authorization"),
                               **{h: request.headers.get(h) for h in ("x-request-id", "traceparent", "tracestate")}})
        if not body.get("stream"):
            return web.json_response({"worker": name, "path": request.path, "echo": body},
                                     headers={"x-upstream-worker": name})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            await resp.write(f"event: response.output_text.delta\ndata: {json.dumps({'delta': f't{i}'})}\n\n"
                             .encode())
        await resp.write_eof()
        return resp

    async def health(request):
        return web.json_response({"status": "ok"})

    async def metrics(request):
        if engine == "openai":
            raise web.HTTPNotFound()
        lines = [
            f'vllm:num_requests_running{{model_name="{model}"}} {st["running"] + st["running_offset"]}',
            f'vllm:num_requests_waiting{{model_name="{model}"}} {st["waiting"]}',
            f'vllm:kv_cache_usage_perc{{model_name="{model}"}} {st["kv"]}',
            f'vllm:spec_decode_num_drafts_total{{model_name="{model}"}} {st["drafts"]}',
            f'vllm:spec_decode_num_draft_tokens_total{{model_name="{model}"}} {st["draft"]}',
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{model}"}} {st["accepted"]}',
        ]
        for (cls, p), (d, dt, a) in st["by_class"].items() if engine == "adaptspec" else ():
            lab = f'content_class="{cls}",proposer="{p}"'
            lines += [f"adaptspec:spec_decode_num_drafts_by_class_total{{{lab}}} {d}",
                      f"adaptspec:spec_decode_num_draft_tokens_by_class_total{{{lab}}} {dt}",
                      f"adaptspec:spec_decode_num_accepted_tokens_by_class_total{{{lab}}} {a}"]
        lines += step_lines()
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def dbg_set(request):
        body = await request.json()
        for key in ("running_offset", "waiting", "kv"):
            if key in body:
                st[key] = float(body[key])
        return web.json_response({"ok": True})

    async def dbg_state(request):
        return web.json_response({k: st[k] for k in ("running", "cancelled", "completed", "draft", "accepted")})

    async def dbg_requests(request):
        return web.json_response(st["requests"])

    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    for path in ("/v1/embeddings", "/v1/responses", "/tokenize", "/detokenize"):
        app.router.add_post(path, passthrough)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/_debug/set", dbg_set)
    app.router.add_get("/_debug/state", dbg_state)
    app.router.add_get("/_debug/requests", dbg_requests)
    return app


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="w0")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--engine", default="adaptspec", choices=("adaptspec", "vllm", "openai"))
    ap.add_argument("--fixed-gamma", type=int, default=0, help="engine vllm: launch gamma (n-gram)")
    ap.add_argument("--alpha", type=float, default=0.75)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--step-model", default=None, help="O,C,K: export step telemetry of this linear model")
    a = ap.parse_args()
    step_model = tuple(float(x) for x in a.step_model.split(",")) if a.step_model else None
    app = build(a.name, a.model, a.engine, a.alpha, a.chunks, a.delay_ms, a.fixed_gamma, step_model)
    web.run_app(app, host="127.0.0.1", port=a.port, access_log=None, print=None, handler_cancellation=True)


if __name__ == "__main__":
    main()
