"""decide() latency (run with `--benchmark-enable` for figures; target <= 100 us for a few workers)."""

import numpy as np
import pytest

from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.types import WorkerState


@pytest.fixture(scope="module")
def table():
    t = AlphaTable()
    rng = np.random.default_rng(0)
    for i in range(4):
        for cls in ("code", "chat", "summarize"):
            for proposer, alpha in (("ngram", 0.5), ("draft", 0.75)):
                acc = (np.cumprod(rng.random((50, 4)) < alpha, axis=1)).sum()
                t.observe(f"w{i}", proposer, cls, 200, int(acc), [10.0, 8.0, 6.0, 4.0], num_drafts=50)
    return t


WORKERS = [WorkerState(f"w{i}", proposers=("ngram", "draft"), profile="h200-llama3-70b", running=3 * i,
                       waiting=i % 2) for i in range(4)]


@pytest.mark.parametrize("kind", ["static", "threshold", "goodput", "bandit"])
def test_decide_latency(benchmark, table, kind):
    extra = {"static": {"proposer": "draft", "gamma": 4}, "threshold": {"table": [{"max_load": 8, "gamma": 3}]}}
    pol = build_policy(parse_config({"policy": {"kind": kind, **extra.get(kind, {})}}).policy)
    for _ in range(200):  # warm the plan cache as a running proxy would
        pol.decide("code", WORKERS, table)
    d = benchmark(pol.decide, "code", WORKERS, table)
    assert d.worker in {w.name for w in WORKERS} and d.policy == kind
