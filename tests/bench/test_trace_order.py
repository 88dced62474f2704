"""Replay order of acceptance traces: `shuffle` (the CLI's default: one permutation per seed, files mixed) or
`file` (the files' order). A recorded file in class blocks must not decide which classes a load point sees."""

from __future__ import annotations

import json
import math

import pytest

from adaptspec.bench.traces import TraceRequest, TraceWorkload, dump
from adaptspec.cli import main
from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ConfigError

PER_CLASS = 10


def _blocked() -> list[TraceRequest]:
    """A trace in class blocks, as the shipped recordings are: 10 requests of each class in turn."""
    return [TraceRequest(f"{c}-{i}", c, 20, 6, 2, {"ngram": (1 + j % 3,) * 4 + (2, 1)})
            for j, c in enumerate(CONTENT_CLASSES) for i in range(PER_CLASS)]


def test_file_order_is_kept_and_shuffle_is_a_seeded_permutation():
    reqs = _blocked()
    assert [r.id for r in TraceWorkload(reqs, order="file").requests] == [r.id for r in reqs]
    a, b, c = (TraceWorkload(reqs, order="shuffle", seed=s) for s in (0, 0, 1))
    assert sorted(r.id for r in a.requests) == sorted(r.id for r in reqs)
    assert [r.id for r in a.requests] == [r.id for r in b.requests]  # deterministic under the seed
    assert [r.id for r in a.requests] != [r.id for r in c.requests]
    # the workload surface follows the replay order
    cls_idx, _, _ = a.sample(None, len(reqs))
    assert [CONTENT_CLASSES[i] for i in cls_idx] == [r.content_class for r in a.requests]
    with pytest.raises(ConfigError, match="trace order"):
        TraceWorkload(reqs, order="random")


def test_shuffled_replay_opens_on_every_class_alike():
    """Over seeds, the first request's class is uniform (p = 1/6 each): bins within 6 sd + 5 of n p."""
    reqs = _blocked()
    n = 3000
    counts = dict.fromkeys(CONTENT_CLASSES, 0)
    for seed in range(n):
        counts[TraceWorkload(reqs, order="shuffle", seed=seed).requests[0].content_class] += 1
    p = 1.0 / len(CONTENT_CLASSES)
    for c, k in counts.items():
        assert abs(k - n * p) <= 6.0 * math.sqrt(n * p * (1.0 - p)) + 5, (c, counts)


def test_cli_trace_order_default_shuffle_and_file(tmp_path):
    path = dump(_blocked(), tmp_path / "blocked.jsonl")
    rows = {}
    for order in ("shuffle", "file"):
        out = tmp_path / f"{order}.json"
        args = ["simulate", "--trace", str(path), "--profile", "cpu-tiny", "--proposers", "ngram",
                "--policies", "static:ngram:2", "--concurrency", "1", "--requests", "12", "--warmup", "0",
                "--seed", "5", "--json", str(out), "--no-progress"]
        assert main(args if order == "shuffle" else [*args, "--trace-order", "file"]) == 0
        rows[order] = json.loads(out.read_text())[0]
    # file order: the 12 measured requests are the first class's 10 (runs of 1: no draft accepted) and 2 of
    # the next; shuffled, they mix classes whose lookups hit: more accepted, a different replay
    assert rows["file"]["acceptance_rate"] < rows["shuffle"]["acceptance_rate"]
    with pytest.raises(SystemExit) as bad:  # argparse: usage and the choices on stderr
        main(["simulate", "--trace", str(path), "--trace-order", "sideways", "--no-progress"])
    assert bad.value.code == 2
