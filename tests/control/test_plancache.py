"""`PlanCache.goodputs` is the batch plan's inner loop: it must give exactly `at(...).goodput` at every gamma (it skips
only the plans' scalar alpha summary), and must not leave summary-less plans behind for `at`."""

from __future__ import annotations

import pytest

from adaptspec.control.plancache import PlanCache
from adaptspec.control.profiles import implied_hybrid, load_profile

CASES = [  # proposer, alpha, batch, rate, prefill, head
    ("eagle", 0.73, 1.0, 1.0, (0.0, 0.0), None),
    ("draft", (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2), 16.0, 1.0, (4.0, 300.0), None),
    ("ngram", (0.8, 0.9, 0.9, 0.85), 64.0, 0.35, (2.0, 150.0), None),
    ("hybrid", (0.7, 0.8, 0.8), 8.0, 0.3, (0.0, 0.0), 0.75),
]


@pytest.mark.parametrize("proposer,alpha,batch,rate,prefill,head", CASES)
def test_goodputs_are_the_plans_goodputs(proposer, alpha, batch, rate, prefill, head):
    prof = load_profile("cpu-tiny")
    if not prof.offers(proposer):
        prof = implied_hybrid(prof, "eagle", stepwise=True)
    first, second = PlanCache(), PlanCache()
    got = first.goodputs(prof, proposer, alpha, batch, 8, rate, prefill, head)
    want = tuple(second.at(prof, proposer, alpha, batch, g, rate, prefill, head).goodput for g in range(1, 9))
    assert got == want and len(got) == 8
    # the plans `at` returns after it still carry their alpha summary
    assert first.at(prof, proposer, alpha, batch, 3, rate, prefill, head) == \
        second.at(prof, proposer, alpha, batch, 3, rate, prefill, head)
    assert first.at(prof, proposer, alpha, batch, 3, rate, prefill, head).alpha > 0.0
