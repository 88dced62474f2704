"""Stand-in trace families (benchmarks/standin_traces.py): the fleet family hits issue 31's bands, every family loads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from adaptspec.bench.traces import dump, load_traces

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "standin_traces.py"
_spec = importlib.util.spec_from_file_location("standin_traces", _PATH)
standin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standin)


def test_fleet_statistics_fall_in_the_issue_bands():
    s = standin.stats(standin.make("fleet", 600, 0))
    ng2, ng10 = s["ngram share run>=2 / run>=10"]
    ea2, ea10 = s["eagle share run>=2 / run>=10"]
    ng_mean, _, ng_p90 = s["ngram gamma-8 tokens/step mean-of-requests / pooled / p90"]
    ea_mean, _, ea_p90 = s["eagle gamma-8 tokens/step mean-of-requests / pooled / p90"]
    assert 0.33 <= ng2 <= 0.47 and 0.13 <= ng10 <= 0.23
    assert 0.63 <= ea2 <= 0.77 and 0.03 <= ea10 <= 0.08
    assert 1.45 <= ng_mean <= 1.95 and 2.4 <= ng_p90 <= 3.4
    assert 2.6 <= ea_mean <= 3.4 and 3.5 <= ea_p90 <= 4.5
    p50, _, p99, mx = s["output_tokens p50/p90/p99/max"]
    assert 160 <= p50 <= 240 and 1200 <= p99 <= 2800 and mx <= 8192
    q50, q90 = s["prompt_tokens p50/p90"]
    assert 110 <= q50 <= 200 and 600 <= q90 <= 1300


def test_fleet_acceptance_varies_within_class_and_request():
    reqs = standin.make("fleet", 300, 1)
    code = [r for r in reqs if r.content_class == "code"]
    rates = [sum(x >= 2 for x in r.accept_runs["ngram"]) / r.output_tokens for r in code]
    assert min(rates) < 0.3 and max(rates) > 0.7  # some code requests copy, some do not
    mixed = [r for r in code if r.output_tokens >= 100 and 0.3 < rates[code.index(r)] < 0.9]
    assert mixed  # copied stretches alternate with novel text inside one request
    assert all(1 in r.accept_runs["ngram"] for r in mixed)


@pytest.mark.parametrize("family", sorted(standin.FAMILIES))
def test_every_family_loads_and_respects_the_format(tmp_path, family):
    reqs = standin.make(family, 60, 3)
    loaded = load_traces(dump(reqs, tmp_path / f"{family}.jsonl"))
    assert loaded == reqs and len({r.id for r in loaded}) == 60
    for r in loaded:
        assert set(r.accept_runs) == {"ngram", "eagle"} and r.prompt
        for runs in r.accept_runs.values():
            assert len(runs) == r.output_tokens
            assert all(1 <= x <= min(r.max_k + 1, r.output_tokens - i) for i, x in enumerate(runs))


def test_families_are_seeded_and_distinct():
    assert standin.make("nocopy", 20, 5) == standin.make("nocopy", 20, 5)
    assert standin.make("nocopy", 20, 5) != standin.make("nocopy", 20, 6)
    best = {f: standin.stats(standin.make(f, 200, 0))["batch-1 speedup vs off, best 4 statics (eagle-heavy prices)"][0][1]
            for f in ("copyheavy", "nocopy", "weakhead")}
    assert best["copyheavy"].startswith("ngram") and best["weakhead"].startswith("ngram")
    assert best["nocopy"].startswith("eagle")
