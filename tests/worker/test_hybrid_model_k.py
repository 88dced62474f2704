"""The hybrid's model part drafts only as far as it pays (`HybridProposer.model_cost`): its draft length follows
the estimated survival of the model's drafts, learned per request (pooled over requests as the prior) from the
engine's verdicts, in closed form; lookup drafts keep their k; greedy output through the engine is
byte-identical whatever the cost, and the sampled law (6 sigma per bin) holds with the draft length varying."""

from __future__ import annotations

import pytest
import torch
from engine_requests import chat_ids, greedy_request
from test_eagle import random_head, random_target
from test_hybrid import ASSETS, COPY_PROMPT, OPEN_PROMPT, run_hybrid_law

from adaptspec.worker.engine import HYBRID_CALL_COST, HYBRID_MODEL_COST, Engine
from adaptspec.worker.proposers import (
    EagleProposer,
    HybridProposer,
    NgramProposer,
    ProposeInput,
    SamplingParams,
)

NEW = [1, 2, 3, 4, 5, 6, 7]  # no repeated bigram: lookup finds nothing
HID = torch.randn(32, generator=torch.Generator().manual_seed(0))


def _hybrid(cost: float) -> HybridProposer:
    target = random_target()
    # lookup first (min_match 0): a request whose n-gram repeats is never the model's turn here
    return HybridProposer(NgramProposer(2, 4), EagleProposer(random_head(target), target), cost, min_match=0)


def _survival(stats: list[tuple[int, int]], pooled: list[tuple[int, int]], k: int, weight: float = 4.0
              ) -> list[float]:
    """Closed form: P(positions 1..j all survive), j = 1..k, from per-request and pooled (tried, accepted)."""
    out, p = [], 1.0
    for j in range(k):
        gt, ga = pooled[j] if j < len(pooled) else (0, 0)
        t, a = stats[j] if j < len(stats) else (0, 0)
        p *= (a + weight * (ga + 1) / (gt + 2)) / (t + weight)
        out.append(p)
    return out


def test_model_length_follows_the_survival_estimate():
    with pytest.raises(ValueError, match="model_cost"):
        _hybrid(1.0)
    assert _hybrid(0.0).model_k("r", 5) == 5  # free: the full k
    assert _hybrid(0.3).model_k("r", 5) == 1  # no evidence: 1/2 per position, 0.25 < 0.3 at the second
    assert _hybrid(0.6).model_k("r", 5) == 0  # not even the first is worth it
    hybrid = _hybrid(0.6)
    copy, new = hybrid.propose([ProposeInput("copy", [1, 2, 3, 4, 5, 1, 2], 3, SamplingParams(0.0), HID),
                                ProposeInput("new", NEW, 3, SamplingParams(0.0), HID)])
    assert copy.token_ids == [3, 4, 5] and new.token_ids == []  # lookup keeps its k; the model declines
    assert hybrid.model_declined == 1 and hybrid.tokens_by_source == {"ngram": 3, "eagle": 0}
    # no lock-out: after explore_every (8) declines in a row the model drafts one token, then declines again
    lengths = [len(hybrid.propose([ProposeInput("new", NEW, 3, SamplingParams(0.0), HID)])[0].token_ids)
               for _ in range(9)]
    assert lengths == [0] * 7 + [1, 0] and hybrid.model_declined == 9  # 8 in a row (one above), then 1
    with pytest.raises(ValueError, match="explore_every"):
        HybridProposer(NgramProposer(2, 4), hybrid.model, 0.5, explore_every=0)


def test_short_requests_explore_too_once_the_pooled_estimate_is_low():
    # requests shorter than explore_every misses: each one declines at most 2 in a row, so only the count over
    # all requests can make the model draft again (the pooled estimate is every new request's prior)
    hybrid = _hybrid(0.6)
    lengths = []
    for r in range(6):
        rid = f"short{r}"
        hybrid.add(rid)
        for _ in range(2):
            lengths.append(len(hybrid.propose([ProposeInput(rid, NEW, 3, SamplingParams(0.0), HID)])[0].token_ids))
        hybrid.remove(rid)
    assert lengths == [0] * 8 + [1] + [0] * 3  # the 9th miss overall drafts one token, then the count restarts


@pytest.mark.parametrize("cost,call,want", [
    (0.2, 0.0, 3),  # survival 0.8, 0.48, 0.24, 0.12: the longest j with S_j >= 0.2
    (0.2, 0.88, 3),  # worth (0.6 + 0.28 + 0.04) = 0.92 >= 0.88
    (0.2, 0.95, 0),  # 0.92 < 0.95: the step is not worth a draft at all
    (0.5, 0.29, 1),  # only S_1 pays 0.5: worth 0.3
    (0.5, 0.31, 0),
])
def test_model_length_weighs_the_price_of_drafting_at_all(cost, call, want):
    hybrid = HybridProposer(NgramProposer(2, 4), _hybrid(0.0).model, cost, prior_weight=1e-9, call_cost=call)
    hybrid._pooled = [[998, 799], [798, 479], [478, 239], [238, 59]]  # (a + 1) / (t + 2): 0.8, 0.6, 0.5, 0.25
    assert hybrid.model_k("r", 4) == want
    with pytest.raises(ValueError, match="call_cost"):
        HybridProposer(NgramProposer(2, 4), hybrid.model, 0.2, call_cost=-0.1)
    # before the model's first verdict the call price is not weighed: the prior (1/2 per position) drafts 2
    fresh = HybridProposer(NgramProposer(2, 4), hybrid.model, 0.2, call_cost=call)
    assert fresh.model_k("r", 4) == 2


def test_survival_is_learned_from_the_engines_verdicts():
    hybrid = _hybrid(0.2)
    hybrid.add("r")
    d = hybrid.propose([ProposeInput("r", NEW, 4, SamplingParams(0.0), HID)])[0]
    assert len(d.token_ids) == 2  # prior 1/2 per position: 0.5, 0.25 >= 0.2 > 0.125
    hybrid.observe("r", "eagle", 2, 2)  # both accepted: positions 1 and 2 tried and accepted
    own = pooled = [(1, 1), (1, 1)]
    assert hybrid._stats["r"] == [list(x) for x in own] and hybrid._pooled == [list(x) for x in pooled]
    d2 = hybrid.propose([ProposeInput("r", NEW, 4, SamplingParams(0.0), HID)])[0]
    assert len(d2.token_ids) == sum(1 for p in _survival(own, pooled, 4) if p >= 0.2) == 3
    hybrid.observe("r", "eagle", 3, 0)  # the first rejected: position 1 tried, 2 and 3 never reached
    own = pooled = [(2, 1), (1, 1), (0, 0)]
    assert hybrid._stats["r"] == [list(x) for x in own] and hybrid._pooled == [list(x) for x in pooled]
    d3 = hybrid.propose([ProposeInput("r", NEW, 4, SamplingParams(0.0), HID)])[0]
    assert len(d3.token_ids) == sum(1 for p in _survival(own, pooled, 4) if p >= 0.2)
    hybrid.observe("r", "ngram", 4, 0)  # a lookup draft's verdict is not the model's
    hybrid.observe("r", "eagle", 0, 0)
    assert hybrid._stats["r"] == [list(x) for x in own] and hybrid._pooled == [list(x) for x in pooled]
    # a finished request leaves the pooled counts behind; a new one starts from them
    hybrid.remove("r")
    assert "r" not in hybrid._stats and hybrid._pooled == [list(x) for x in pooled]
    hybrid.observe("r", "eagle", 1, 1)  # a late verdict for a removed request: pooled only
    assert "r" not in hybrid._stats and hybrid._pooled[0] == [3, 2]
    hybrid.add("s")
    fresh = hybrid.propose([ProposeInput("s", NEW, 4, SamplingParams(0.0), HID)])[0]
    assert len(fresh.token_ids) == sum(1 for p in _survival([], [(3, 2), (1, 1)], 4) if p >= 0.2)


@pytest.mark.parametrize("model", ["eagle", "draft"])
def test_greedy_output_is_identical_whatever_the_model_cost(model):
    eagle = ASSETS / "tiny-eagle" if model == "eagle" else None
    runs = {}
    for cost in (0.0, 0.3, 0.6):
        engine = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", eagle, max_batch=4,
                                  max_model_len=512, hybrid_model_cost=cost)
        hybrid = engine._proposers["hybrid"]
        assert hybrid.model.name == model
        with engine:
            ids = [chat_ids(engine, p) for p in (COPY_PROMPT, OPEN_PROMPT)]
            base = engine.generate_sync([greedy_request(f"n{i}", x, max_tokens=40) for i, x in enumerate(ids)])
            out = engine.generate_sync([greedy_request(f"h{i}", x, "hybrid", 4, max_tokens=40)
                                        for i, x in enumerate(ids)])
        for i in range(len(ids)):
            assert out[f"h{i}"] == base[f"n{i}"], (cost, i)
        runs[cost] = (dict(hybrid.drafts_by_source), dict(hybrid.tokens_by_source), hybrid.model_declined)
    (d0, t0, n0), (d3, t3, _), (_, t6, n6) = runs[0.0], runs[0.3], runs[0.6]
    assert n0 == 0 and t0[model] >= 4 * d0[model] - 4  # free: k model tokens at every miss (capped at the end)
    assert t3[model] < 4 * d3[model] - 4  # priced: shorter model drafts
    assert t6[model] < t0[model] and n6 > 0  # dearer: fewer model tokens, some misses declined
    # the engine reported every model draft's verdict: each tried position 1 exactly once
    assert hybrid._pooled[0][0] == runs[0.6][0][model] and hybrid._stats == {}


@pytest.mark.slow
def test_sampled_output_follows_the_target_with_a_priced_hybrid():
    # as test_hybrid's law test, with the head's draft length chosen from what earlier drafts achieved
    engine = run_hybrid_law(0.3)
    hybrid = engine._proposers["hybrid"]
    drafted = hybrid.drafts_by_source["eagle"]
    assert drafted > 1000 and hybrid.drafts_by_source["ngram"] > 1000
    assert hybrid.model_shortened > 1000  # the head drafted fewer tokens than k at many misses


def test_worker_cli_sets_the_hybrid_model_cost_and_refuses_a_bad_one(capsys):
    from adaptspec.cli import build_parser
    from adaptspec.cli._worker import build_engine

    parser = build_parser()
    engine, _ = build_engine(parser.parse_args(["worker", "--max-batch", "1", "--hybrid-model-cost", "0.3",
                                                "--hybrid-call-cost", "1.5"]))
    assert (engine._proposers["hybrid"].model_cost, engine._proposers["hybrid"].call_cost) == (0.3, 1.5)
    engine, _ = build_engine(parser.parse_args(["worker", "--max-batch", "1"]))
    hybrid = engine._proposers["hybrid"]
    assert (hybrid.model_cost, hybrid.call_cost) == (HYBRID_MODEL_COST, HYBRID_CALL_COST)
    for flag, top, bad in [("--hybrid-model-cost", "[0, 1)", b) for b in ("1", "-0.1", "nan", "cheap")] + \
            [("--hybrid-call-cost", "[0, 4)", b) for b in ("4", "-1", "inf")]:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["worker", flag, bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert flag in err and top in err and repr(bad) in err
    help_text = parser._subparsers._group_actions[0].choices["worker"].format_help()
    assert "--hybrid-model-cost" in help_text and "--hybrid-call-cost" in help_text
