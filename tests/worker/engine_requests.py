"""Request helpers shared by the engine tests (this folder is on sys.path under pytest's default import mode)."""

from __future__ import annotations

from adaptspec.worker.engine import Engine, GenRequest


def chat_ids(engine: Engine, text: str) -> list[int]:
    """Token ids of `text` as one user turn in the engine's chat template."""
    return engine.encode(engine.apply_chat_template([{"role": "user", "content": text}]))


def greedy_request(rid: str, ids: list[int], proposer: str = "none", k: int = 0, **kw) -> GenRequest:
    """A temperature-0 request that ignores EOS (fixed length), with the given proposer and k."""
    kw.setdefault("temperature", 0.0)
    kw.setdefault("ignore_eos", True)
    return GenRequest(rid, ids, proposer=proposer, num_speculative_tokens=k, **kw)
