"""Gamma schedules: parsing (errors name the row), the cap lookup, compression, and the worker's body check."""

from __future__ import annotations

import pytest

from adaptspec.control.schedule import ANY_BATCH, cap_at, compress, gamma_at, levels, max_cap, parse_schedule
from adaptspec.errors import RequestError
from adaptspec.worker._openai import Speculation, resolve_speculation

SCHED = ((8, 6), (32, 4), (96, 2), (100000, 0))


@pytest.mark.parametrize("running, cap", [(1, 6), (8, 6), (9, 4), (32, 4), (33, 2), (96, 2), (97, 0),
                                          (100000, 0), (100001, 0)])
def test_cap_is_the_first_row_covering_the_batch(running, cap):
    assert cap_at(SCHED, running) == cap


def test_gamma_is_min_of_k_and_cap_and_k_without_schedule():
    assert gamma_at(3, SCHED, 1) == 3
    assert gamma_at(8, SCHED, 20) == 4
    assert gamma_at(5, ((4, 2),), 5) == 0  # above the last row: off
    assert gamma_at(5, None, 500) == 5
    assert max_cap(SCHED) == 6


def test_parse_accepts_lists_and_returns_tuples():
    assert parse_schedule([[8, 6], [32, 4]], max_k=8) == ((8, 6), (32, 4))


@pytest.mark.parametrize("value, words", [
    (None, "must be a list"), ([], "at least one"), ([[1, 2, 3]], "row 0"), ([[4, 1], [2, 1]], "row 1"),
    ([[4, -1]], "cap must be between 0 and 8"), ([[4, 9]], "got 9"), ([[4.0, 2]], "pair of integers"),
    ([[1, i % 3] for i in range(1, 70)], "at most 64"),
])
def test_parse_errors_name_the_row(value, words):
    with pytest.raises(ValueError, match=words):
        parse_schedule(value, max_k=8)


def test_compress_merges_equal_neighbours_and_levels_grow():
    assert compress([(1, 5), (2, 5), (4, 3), (8, 3), (ANY_BATCH, 0)]) == ((2, 5), (8, 3), (ANY_BATCH, 0))
    lv = levels(64)
    assert lv[:8] == tuple(range(1, 9)) and list(lv) == sorted(set(lv)) and lv[-1] == 64


def test_worker_resolves_a_schedule_and_refuses_a_bad_one_with_a_400():
    offer = dict(default_proposer="none", default_k=4, proposers=("ngram", "draft"), max_k=8)
    ok = resolve_speculation(Speculation(proposer="ngram", num_speculative_tokens=4, schedule=[[4, 4], [16, 1]]),
                             **offer)
    assert ok.schedule == ((4, 4), (16, 1)) and ok.k == 4
    with pytest.raises(RequestError) as e:
        resolve_speculation(Speculation(proposer="ngram", schedule=[[4, 12]]), **offer)
    assert e.value.status == 400 and e.value.param == "speculation.schedule" and "between 0 and 8" in e.value.message
