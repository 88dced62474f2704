"""A deterministic corpus of malformed requests (bodies and headers) and a raw-socket client to send them.

    cases = corpus(seed=0)                      # >= 300 `Case`s, the same for the same seed
    mix = hostile(2000)                         # the corpus + distinct client strings (label / header bait)
    status, headers, body = await send(host, port, case.raw, timeout=10)

Every case is a complete HTTP/1.1 request as bytes, sent on its own connection with `Connection: close`,
so the answer is whatever arrives until the server closes. Bodies keep `max_tokens` invalid or tiny: a
valid-looking case is served (a few tokens), never a long generation. `slow` cases announce more body than
they send (the server must time them out); `protocol` cases are malformed at the HTTP level, answered by the
server's parser rather than the application.
"""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from dataclasses import dataclass

CHAT = [{"role": "user", "content": "Say something short."}]
BASE = {"model": "tiny", "messages": CHAT, "max_tokens": 2}


@dataclass(frozen=True)
class Case:
    name: str
    raw: bytes
    slow: bool = False  # sends less body than announced
    protocol: bool = False  # malformed request line / headers


def request(body: bytes, *, path: str = "/v1/chat/completions", method: str = "POST",
            headers: dict[str, str] | None = None, content_length: str | None = None) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
            "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    head.append(f"Content-Length: {len(body) if content_length is None else content_length}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _body(**fields) -> bytes:
    return json.dumps({**BASE, **fields}).encode()


def _gzip(data: bytes) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return z.compress(data) + z.flush()


def _bomb(size: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [z.compress(b'{"model": "tiny", "messages": [{"role": "user", "content": "')]
    block = b"A" * (1 << 20)
    parts += [z.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + z.compress(b'"}]}') + z.flush()


BAD_VALUES = [None, True, -1, 0, 1.5, "", "x" * 5000, "a\r\nb", "\x00", [], {}, [[]], {"a": {"b": {}}},
              "\ud800", 10**30, -(10**30), "1e999"]
FIELDS = ["model", "messages", "max_tokens", "temperature", "top_p", "stream", "stop", "n", "seed",
          "speculation", "stream_options", "user", "max_completion_tokens", "logprobs", "tools",
          "response_format"]


def _field_cases(rng: random.Random) -> list[Case]:
    out = []
    for field in FIELDS:
        for i, value in enumerate(BAD_VALUES):
            if field in ("max_tokens", "max_completion_tokens") and isinstance(value, int) and value > 8:
                continue  # valid and long: not a malformed request, just an expensive one
            body = json.dumps({**BASE, field: value}, ensure_ascii=False).encode("utf-8", "surrogatepass")
            out.append(Case(f"field-{field}-{i}", request(body)))
    for i, value in enumerate(BAD_VALUES):  # inside a message
        msg = {"role": value, "content": "hi"} if i % 2 else {"role": "user", "content": value}
        body = json.dumps({**BASE, "messages": [msg]}, ensure_ascii=False).encode("utf-8", "surrogatepass")
        out.append(Case(f"message-{i}", request(body)))
    for i, spec in enumerate([{"proposer": "x" * 1000}, {"proposer": "ngram", "num_speculative_tokens": 10**6},
                              {"proposer": ["ngram"]}, {"proposer": "ngram\r\nx-evil: 1"},
                              {"num_speculative_tokens": -5}, {"schedule": [[1, 2]] * 1000},
                              {"content_class": "\x00" * 10}, "ngram", [1, 2], 7]):
        out.append(Case(f"speculation-{i}", request(_body(speculation=spec))))
    rng.shuffle(out)
    return out


def _structure_cases(rng: random.Random) -> list[Case]:
    valid = _body()
    out = [Case(f"truncated-{i}", request(valid[:cut]))
           for i, cut in enumerate(sorted(rng.sample(range(len(valid)), 40)))]
    out += [Case(f"garbage-{i}", request(rng.randbytes(rng.randrange(0, 300)))) for i in range(20)]
    out += [Case(f"not-an-object-{i}", request(raw)) for i, raw in enumerate(
        [b"[]", b"null", b"1", b'"s"', b"true", b"", b" ", b"{}", b'{"model": "tiny"}', b"{,}", b'{"a":1,}',
         b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00", b'{"model": "tiny", "model": "tiny"}'])]
    for depth in (65, 100, 1000, 100_000):
        for wrap in (b"[]", b"{}"):
            nest = wrap[:1] * depth + wrap[1:] * depth if wrap == b"[]" else b'{"a":' * depth + b"1" + b"}" * depth
            out.append(Case(f"deep-{wrap.decode()}-{depth}", request(b'{"model": "tiny", "x": ' + nest + b"}")))
    for digits in (101, 4301, 5000, 50_000):
        out.append(Case(f"int-{digits}", request(b'{"model": "tiny", "messages": [], "max_tokens": '
                                                 + b"9" * digits + b"}")))
        out.append(Case(f"float-{digits}", request(b'{"model": "tiny", "temperature": 0.' + b"1" * digits + b"}")))
    for i, lit in enumerate([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b"1e-999"]):
        out.append(Case(f"constant-{i}", request(b'{"model": "tiny", "messages": [], "temperature": ' + lit + b"}")))
    for i, raw in enumerate([b'{"model": "tiny\xff\xfe", "messages": []}', b'{"model": "\\ud800"}',
                             b'{"model": "\x00\x01\x02"}', b'{"model": "tiny", "messages": [{"role": "user", '
                             b'"content": "\\u0000\\r\\n\\u001b[31m"}], "max_tokens": 2}',
                             b'{"model\x00": 1}', "{\"model\": \"t\u2028\u2029\"}".encode()]):
        out.append(Case(f"bytes-{i}", request(raw)))
    return out


def _encoding_cases(rng: random.Random) -> list[Case]:
    valid = _body()
    cases = [("gzip", b"not gzip at all"), ("gzip", _gzip(valid)[:-10]), ("gzip", _gzip(valid) + b"trailing"),
             ("deflate", valid), ("deflate", zlib.compress(valid)[:5]), ("br", valid), ("zstd", valid),
             ("gzip, gzip", _gzip(_gzip(valid))), ("compress", valid), ("identity, gzip", valid),
             ("x" * 300, valid), ("gzip", b""), ("gzip", rng.randbytes(200)),
             ("gzip", _gzip(b"[" * 200_000 + b"]" * 200_000)), ("gzip", _gzip(b"{" * 10))]
    out = [Case(f"encoding-{i}", request(body, headers={"Content-Encoding": enc})) for i, (enc, body) in enumerate(cases)]
    out += [Case(f"bomb-{mb}mb", request(_bomb(mb << 20), headers={"Content-Encoding": "gzip"}))
            for mb in (8, 64, 200)]
    return out


def _header_cases(rng: random.Random) -> list[Case]:
    valid = _body()
    out = []
    for size in (8191, 8300, 16_000, 64_000):
        out.append(Case(f"header-{size}", request(valid, headers={"X-Big": "a" * size}), protocol=True))
        out.append(Case(f"header-name-{size}", request(valid, headers={"X" * size: "1"}), protocol=True))
    for count in (100, 129, 200, 1000):
        out.append(Case(f"headers-{count}", request(valid, headers={f"X-H{i}": "1" for i in range(count)}),
                        protocol=True))
    for i, cl in enumerate(["-1", "abc", "1e3", "99999999999999999999999", " 5", "0x10", ""]):
        out.append(Case(f"content-length-{i}", request(valid, content_length=cl), protocol=True))
    out.append(Case("content-length-short", request(valid, content_length=str(len(valid) + 50)), slow=True))
    out.append(Case("content-length-long", request(valid + b"garbage", content_length=str(len(valid)))))
    dup = request(valid).replace(b"Content-Type:", f"Content-Length: {len(valid) + 1}\r\nContent-Type:".encode())
    out.append(Case("content-length-twice", dup, protocol=True))
    for i, te in enumerate(["chunked, gzip", "gzip", "x", "chunked\r\nTransfer-Encoding: chunked"]):
        raw = request(valid, headers={"Transfer-Encoding": te})
        out.append(Case(f"transfer-encoding-{i}", raw, protocol=True))
    bad_chunks = [b"zz\r\n{}\r\n0\r\n\r\n", b"5\r\n{}\r\n0\r\n\r\n", b"-1\r\n\r\n", b"ffffffffffffffffff\r\n"]
    for i, chunked in enumerate(bad_chunks):
        head = request(b"", headers={"Transfer-Encoding": "chunked"}).replace(b"Content-Length: 0\r\n", b"")
        out.append(Case(f"chunked-{i}", head + chunked, protocol=True))
    for i, line in enumerate([b"GET", b"POST  HTTP/1.1", b"POST /v1/chat/completions HTTP/9.9",
                              b"P\x00ST /v1/chat/completions HTTP/1.1", b"POST /v1/chat/completions\x00 HTTP/1.1",
                              b"POST /" + b"a" * 9000 + b" HTTP/1.1", b"POST http://evil/v1/chat/completions HTTP/1.1",
                              b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"BREW /pot HTCPCP/1.0",
                              b"POST /v1/chat/completions?" + b"q=1&" * 1000 + b" HTTP/1.1",
                              b"POST /v1/../../etc/passwd HTTP/1.1", b"POST /%00%ff HTTP/1.1"]):
        out.append(Case(f"request-line-{i}", line + b"\r\nHost: x\r\nConnection: close\r\nContent-Length: "
                        + str(len(valid)).encode() + b"\r\n\r\n" + valid, protocol=True))
    for i, raw in enumerate([b"X-Bad\x00: 1", b"X-Bad: \x00\x01", b"X Bad: 1", b": empty-name", b"X-Bad:\xff\xfe",
                             b"X-Bad: a\rb", b"X-Bad: a\nInjected: 1", b" X-Folded: 1", b"Host: a\r\nHost: b",
                             b"Authorization: Bearer " + b"k" * 7000, b"Authorization: Basic \xff\xff",
                             b"X-Request-Id: " + b"r" * 5000, b"Content-Type: text/plain",
                             b"Content-Type: application/json; charset=utf-16"]):
        out.append(Case(f"header-bytes-{i}", request(valid).replace(b"Connection: close\r\n",
                                                                      b"Connection: close\r\n" + raw + b"\r\n"),
                        protocol=True))
    for i, (method, path) in enumerate([("GET", "/v1/chat/completions"), ("PUT", "/v1/completions"),
                                        ("DELETE", "/v1/models"), ("POST", "/v1/models"), ("POST", "/health"),
                                        ("POST", "/v1/nowhere"), ("OPTIONS", "*"), ("POST", "/v1/completions")]):
        out.append(Case(f"route-{i}", request(valid, method=method, path=path)))
    rng.shuffle(out)
    return out


def corpus(seed: int = 0) -> list[Case]:
    rng = random.Random(seed)
    return _field_cases(rng) + _structure_cases(rng) + _encoding_cases(rng) + _header_cases(rng)


async def send(host: str, port: int, raw: bytes, timeout: float = 10.0) -> tuple[int | None, bytes, bytes]:
    """Send one raw request -> (status or None when the server closed without answering, head, body)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        async with asyncio.timeout(timeout):
            try:
                writer.write(raw)
                await writer.drain()
            except ConnectionError:
                pass  # the server may answer (413, 431) and close before reading everything we send
            data = b""
            try:
                while chunk := await reader.read(65536):
                    data += chunk
            except ConnectionError:
                pass
    finally:
        writer.close()
    if not data:
        return None, b"", b""
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def hostile(n: int, seed: int = 1) -> list[Case]:
    """`n` hostile requests: the corpus, plus distinct client strings where labels could grow."""
    rng = random.Random(seed)
    base = [c for c in corpus(seed) if not c.slow]
    out = []
    for i in range(n):
        if i % 2:
            out.append(base[i % len(base)])
        else:
            spec = {"proposer": f"p{i}-" + "x" * rng.randrange(10, 1000), "num_speculative_tokens": 10_000 + i}
            body = json.dumps({**BASE, "model": f"m{i}" if i % 4 == 0 else "tiny", "speculation": spec,
                               "user": "u" * rng.randrange(1, 500)}).encode()
            out.append(Case(f"distinct-{i}", request(body, headers={"X-Request-Id": f"r{i}-{'q' * 100}"})))
    return out
