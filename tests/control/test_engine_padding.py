"""A padded verify (`Profile.padded_verify`) is the reference engine's: it pads every row's query to the batch's
longest draft. vLLM and SGLang verify each request's own draft tokens, flattened (`WorkerState.flat_verify`), so
a worker of theirs priced with a padded profile (the tiny pair's cpu-tiny, which `bench compare --engine vllm` uses) is priced without the
padding: a lookup that finds a draft on 40% of steps costs 1 + 0.4 * gamma verified tokens a request, not
1 + gamma."""

from __future__ import annotations

import pytest

from adaptspec.control import costmodel
from adaptspec.control.config import parse_config
from adaptspec.control.policy import build_policy
from adaptspec.control.types import AlphaEstimate, WorkerState


class Lookup:
    """N-gram lookup accepting 0.8 a token, drafting on 40% of steps, plenty of evidence."""

    def get(self, worker, proposer, content_class):
        return AlphaEstimate(0.8, 0.0, 1e6, propose_rate=0.4)


@pytest.mark.parametrize("flat", [False, True])
def test_a_worker_that_verifies_flat_is_priced_without_the_profiles_padding(flat):
    """`flat_verify`: what the proxy's engine adapter says of vLLM and SGLang (tests/proxy/test_engines.py)."""
    pol = build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)
    w = WorkerState("w", proposers=("ngram",), max_gamma=4, profile="cpu-tiny", running=63, flat_verify=flat)
    prof = pol.worker_profile(w)
    padded = not flat
    assert prof.padded_verify is padded and pol.profile("cpu-tiny").padded_verify
    assert prof.shared_gamma("ngram") is padded  # unpadded, a lookup's draft lengthens its own row only
    # the price: a step verifies 64 * (1 + drafting * gamma) tokens, drafting 1 - 0.6^64 padded, else 0.4
    plan = costmodel.evaluate(prof, "ngram", 0.8, 2, 64.0, propose_rate=0.4)
    rows = 64.0 * (1.0 + (1.0 - 0.6**64 if padded else 0.4) * 2)
    verify = costmodel.step_time_with_prefill(prof.target, rows, 64.0 * prof.context_tokens, 0.0, 0.0)
    assert plan.verify_time_s == pytest.approx(verify)
    # and the decision: lookup pays on the engines that do not pad (x1.07 at gamma 2), not on the one that does
    d = pol.decide("code", [w], Lookup())
    assert (d.proposer, d.gamma > 0) == (("none", False) if padded else ("ngram", True))
