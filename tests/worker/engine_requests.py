"""Request helpers shared by the engine tests (this folder is on sys.path under pytest's default import mode)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from adaptspec.worker.engine import Engine, GenRequest
from adaptspec.worker.model import LlamaConfig, TinyLlama

ASSETS = Path(os.environ.get("ADAPTSPEC_ASSETS", Path(__file__).resolve().parents[2] / "adaptspec" / "assets"))
V_SMALL = 12  # vocabulary of the random models the exact-distribution tests use
# A code prompt whose answer copies code (n-gram lookup accepts long runs on it). Its greedy continuation by the
# shipped tiny target has no near-tie in its first 160 tokens (see `greedy_min_margin`), so texts compared for
# identity across batch compositions cannot flip on float32 rounding. (Ending the prompt one line earlier puts a
# top-2 logit gap of 9e-7 at token 26: the text then differs by batch, as any engine's would.)
COPY_CODE_PROMPT = ("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
                    "# the same function again, unchanged:\ndef fibonacci(n):\n    if")


def random_model(seed: int = 1, scale: float = 3.0) -> TinyLlama:
    """A one-layer random TinyLlama over V_SMALL tokens; `scale` on the tied embedding makes its next-token
    distributions peaky (closed-form laws for the distribution tests are computed from it)."""
    cfg = LlamaConfig(vocab_size=V_SMALL, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=1, head_dim=32, max_position_embeddings=16)
    m = TinyLlama(cfg)
    m.init_weights(seed)
    with torch.no_grad():
        m.embed.weight.mul_(scale)  # tied with lm_head: peaky next-token distributions
    return m.eval()


def greedy_min_margin(model_dir: Path, ids: list[int], n: int) -> tuple[float, int]:
    """Smallest gap between the top two logits over the first `n` greedy tokens after `ids`, and where it is,
    computed in float64 with the dense (cache-free) forward. Float32 forwards of different batch shapes differ
    by ~1e-5 in the logits of the shipped pair, so a greedy text is batch-invariant only when this gap is
    well above that."""
    model = TinyLlama.from_pretrained(model_dir).double().eval()
    out: list[int] = []
    gaps: list[float] = []
    with torch.no_grad():
        for _ in range(n):
            top = torch.topk(model.forward_dense(torch.tensor([ids + out]))[0, -1], 2)
            out.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
    i = min(range(n), key=gaps.__getitem__)
    return gaps[i], i


def chat_ids(engine: Engine, text: str) -> list[int]:
    """Token ids of `text` as one user turn in the engine's chat template."""
    return engine.encode(engine.apply_chat_template([{"role": "user", "content": text}]))


def greedy_request(rid: str, ids: list[int], proposer: str = "none", k: int = 0, **kw) -> GenRequest:
    """A temperature-0 request that ignores EOS (fixed length), with the given proposer and k."""
    kw.setdefault("temperature", 0.0)
    kw.setdefault("ignore_eos", True)
    return GenRequest(rid, ids, proposer=proposer, num_speculative_tokens=k, **kw)


@contextmanager
def served_tiny(max_batch: int) -> Iterator[tuple[str, Engine]]:
    """The repo's tiny target/draft pair behind a real worker HTTP server on loopback; yields (url, engine)."""
    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    engine = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=max_batch, max_model_len=512,
                              num_threads=1)
    engine.start()
    server = ServerThread(build_app(engine, WorkerSettings(served_model_name="tiny", max_model_len=512))).start()
    try:
        yield server.url, engine
    finally:
        server.stop()
        engine.stop()
