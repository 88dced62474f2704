"""Engine hardening: thread defaults, per-request isolation of bad inputs, the greedy fast path."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from adaptspec.worker.engine import Engine, GenRequest

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"


@pytest.fixture(scope="module")
def engine():
    e = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=8, max_model_len=512)
    e.start()
    yield e
    e.stop()


def _ids(engine: Engine, text: str) -> list[int]:
    return engine.encode(engine.apply_chat_template([{"role": "user", "content": text}]))


def _threads_seen_by_step_thread(engine: Engine) -> int:
    """torch.get_num_threads() as seen by the engine's step thread (the sink runs on it)."""
    seen: list[int] = []
    done = threading.Event()

    def sink(item):
        seen.append(torch.get_num_threads())
        if isinstance(item, BaseException) or item.finished:
            done.set()

    engine.submit(GenRequest("threads", _ids(engine, "Hi"), max_tokens=2, temperature=0.0, ignore_eos=True), sink)
    assert done.wait(60)
    return seen[0]


def test_default_is_one_torch_thread(engine):
    assert engine.num_threads == 1
    assert _threads_seen_by_step_thread(engine) == 1


def test_explicit_thread_override_and_bad_values():
    model_dir = ASSETS / "tiny-target"
    e = Engine.from_dirs(model_dir, None, max_batch=2, max_model_len=128, num_threads=2)
    try:
        assert e.num_threads == 2
        assert _threads_seen_by_step_thread(e) == 2
    finally:
        e.stop()
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_threads"):
            Engine.from_dirs(model_dir, None, max_batch=2, max_model_len=128, num_threads=bad)
