"""Shared fixtures of the worker tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from adaptspec.worker.engine import Engine

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"


@pytest.fixture(scope="module")
def engine():
    """The tiny target + draft pair in a running engine (8 slots, 512 tokens, 1 thread), one per module."""
    e = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=8, max_model_len=512,
                         num_threads=1)
    e.start()
    yield e
    e.stop()
