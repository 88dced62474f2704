"""A loaded worker's batch runs one model's passes. Each pass group (a draft model, a head and the hybrids over it)
is planned against lookup and plain decoding alone, so on a mix where the draft model serves one class and the
head another both groups are worth their passes, and yet a step that holds both kinds of request runs both sets
of passes for every row. The policy keeps the group worth most over the mix; on a padded verify lookup drafts
up to its gamma (every row is that long anyway) and no further."""

from __future__ import annotations

from adaptspec.control.alpha import GREEDY, SAMPLED, AlphaTable
from adaptspec.control.config import parse_config
from adaptspec.control.policy import build_policy
from adaptspec.control.types import AlphaEstimate, WorkerState


class ByClass:
    """Per-token alphas per (proposer, class), plenty of evidence; 0.3 elsewhere."""

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table

    def get(self, worker, proposer, content_class):
        return AlphaEstimate(self.table.get((proposer, content_class), 0.3), 0.0, 1e6)


ALPHAS = ByClass({("draft", "code"): 0.92, ("eagle", "code"): 0.45, ("draft", "chat"): 0.4,
                  ("eagle", "chat"): 0.9, ("ngram", "code"): 0.3, ("ngram", "chat"): 0.2})


def loaded(code: int, chat: int):
    pol = build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)
    w = WorkerState("w", proposers=("ngram", "draft", "eagle"), max_gamma=8, profile="cpu-tiny", running=15)
    for _ in range(code):
        pol._note(w, "code", ALPHAS)
    for _ in range(chat):
        pol._note(w, "chat", ALPHAS)
    return pol, w, pol.worker_profile(w)


def test_two_groups_each_worth_their_passes_alone_run_as_one():
    for code, chat in ((8, 8), (9, 7)):
        pol, w, prof = loaded(code, chat)
        plans = {g: pol._group_plan(w, prof, g, ALPHAS, 16.0, 8) for g in pol._model_groups(w, prof)}
        assert len(plans) == 2 and all(any(p[0].values()) for p in plans.values())  # each kept on its own
        gammas = {p: pol.batch_gamma(w, prof, p, ALPHAS, 16.0, 8) for p in ("draft", "eagle")}
        assert sorted(g > 0 for g in gammas.values()) == [False, True]  # one set of passes
        worth = {g: p[2] for g, p in plans.items()}
        kept = pol.kept_group(w, prof, ALPHAS, 16.0, 8)
        assert worth[kept] == max(worth.values())
        assert gammas[kept[0]] == max(plans[kept][0].values())
        # the decisions of both classes draft with the kept model, lookup or nothing
        for cls in ("code", "chat"):
            assert pol.decide(cls, [w], ALPHAS).proposer in (*kept, "ngram", "none")
        # on the padded verify, lookup drafts as far as the kept model's rows reach
        assert prof.padded_verify
        assert pol.batch_gamma(w, prof, "ngram", ALPHAS, 16.0, 8) == gammas[kept[0]]
        # what a request waits for: the kept group's passes only
        assert set(pol.sunk_passes(w, prof, ALPHAS, 16.0, 8)) <= {kept}


def test_the_mix_decides_which_model_serves_it():
    kept = {}
    for code, chat in ((15, 1), (1, 15)):
        pol, w, prof = loaded(code, chat)
        kept[code > chat] = pol.kept_group(w, prof, ALPHAS, 16.0, 8)
    assert kept[True] == ("draft",) and kept[False] == ("eagle",)


def test_an_idle_worker_is_not_held_to_one_model():
    """At batch 1 nothing is shared: each request takes its own best proposer."""
    pol = build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)
    w = WorkerState("w", proposers=("ngram", "draft", "eagle"), max_gamma=8, profile="cpu-tiny")
    assert pol.decide("code", [w], ALPHAS).proposer == "draft"
    assert pol.decide("chat", [w], ALPHAS).proposer == "eagle"


def test_the_kept_model_follows_the_load_level_not_the_bucket():
    """On an even code / chat mix the head is worth a little more up to batch 23 and the draft model a little more
    from 32 (within the margin either way). A batch that wanders across a bucket's edge keeps the model it has
    (its requests are running); a new load level an octave away takes the best one afresh, whatever the last
    level kept (a ramp from 8 to 45 must not run the head for good because it served the smaller batch)."""
    pol, w, prof = loaded(8, 8)

    def fresh(batch: float) -> tuple[str, ...] | None:
        p, v, f = loaded(8, 8)
        return p.kept_group(v, f, ALPHAS, batch, 8)

    assert (fresh(23.0), fresh(32.0), fresh(45.0)) == (("eagle",), ("draft",), ("draft",))
    assert pol.kept_group(w, prof, ALPHAS, 23.0, 8) == ("eagle",)
    assert pol.kept_group(w, prof, ALPHAS, 32.0, 8) == ("eagle",)  # the next bucket: kept
    assert pol.kept_group(w, prof, ALPHAS, 45.0, 8) == ("draft",)  # an octave from 23: chosen afresh
    assert pol.kept_group(w, prof, ALPHAS, 32.0, 8) == ("draft",)
    assert pol.kept_group(w, prof, ALPHAS, 8.0, 8) == ("eagle",)


class Thin:
    """The head and lookup at `rates` with plenty of evidence; the draft model's keys thin (one request, 30
    tokens) saying 0.2 where the prior says 0.95: a request's own plan takes the prior's hope
    (`GoodputPolicy.hopeful`), so that one unlucky request cannot keep a proposer off a class for good."""

    def __init__(self, rates: dict[tuple[str, str], float]) -> None:
        self.rates = rates

    def get(self, worker, proposer, content_class):
        if proposer == "draft":
            return AlphaEstimate(0.2, 0.1, 30.0, reports=1.0)
        return AlphaEstimate(self.rates.get((proposer, content_class), 0.3), 0.0, 1e6)

    def prior_mean(self, worker, proposer, content_class):
        return 0.95 if proposer == "draft" else 0.3


def test_a_hope_does_not_take_the_batch_from_the_model_the_evidence_backs():
    alphas = Thin({("eagle", "code"): 0.75, ("eagle", "chat"): 0.75, ("ngram", "code"): 0.3,
                   ("ngram", "chat"): 0.2})
    pol, w, prof = loaded(8, 8)
    hoped = {g: pol._group_plan(w, prof, g, alphas, 16.0, 8) for g in pol._model_groups(w, prof)}
    assert all(any(p[0].values()) for p in hoped.values())  # both worth their passes as planned
    assert hoped[("draft",)][2] > hoped[("eagle",)][2]  # and the hope alone would rank the draft model first
    assert pol.kept_group(w, prof, alphas, 16.0, 8) == ("eagle",)
    assert pol.batch_gamma(w, prof, "draft", alphas, 16.0, 8) == 0
    assert pol.batch_gamma(w, prof, "eagle", alphas, 16.0, 8) > 0


def test_a_hope_alone_does_not_buy_a_batch_the_models_passes():
    """One model on the worker (lookup and the draft model): the draft model's thin keys hope for 0.95 where their
    one request said 0.2. Planned at the hope the draft model would be worth its passes for the whole batch; at the
    evidence it is not, so the batch runs without them (lookup or plain) and no request's plan buys them. At
    batch 1 nothing is shared: the request still takes the hope (one request can try the key)."""
    alphas = Thin({("ngram", "code"): 0.3, ("ngram", "chat"): 0.2})
    pol = build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)
    w = WorkerState("w", proposers=("ngram", "draft"), max_gamma=8, profile="cpu-tiny", running=15)
    for cls in ("code", "chat") * 8:
        pol._note(w, cls, alphas)
    prof = pol.worker_profile(w)
    assert any(pol._group_plan(w, prof, ("draft",), alphas, 16.0, 8)[0].values())  # the hope's plan
    assert not any(pol._group_plan(w, prof, ("draft",), alphas, 16.0, 8, hope=False)[0].values())
    assert pol.batch_gamma(w, prof, "draft", alphas, 16.0, 8) == 0
    for cls in ("code", "chat"):
        assert pol.decide(cls, [w], alphas).proposer in ("ngram", "none")
    idle = WorkerState("w", proposers=("ngram", "draft"), max_gamma=8, profile="cpu-tiny")
    assert pol.decide("code", [idle], alphas).proposer == "draft"


def _regimes_table():
    """Two classes; greedy lookup copies (0.8 a token, a draft on 60% of steps), sampled lookup does not (0.2); the
    head accepts 0.7 in both regimes. Plenty of evidence (no forgetting)."""
    table = AlphaTable(half_life_tokens=None)
    for cls in ("code", "chat"):
        for regime, lookup in ((GREEDY, 0.8), (SAMPLED, 0.2)):
            table.observe("w", "ngram", cls, 4000, 4000 * lookup, steps=1000, num_drafts=600, gamma=8, regime=regime)
            table.observe("w", "eagle", cls, 4000, 2800, steps=1000, num_drafts=1000, gamma=4, regime=regime)
    return table


def _noted(table, regimes):
    """A policy and a loaded worker whose recent requests alternate the two classes, in the given regimes."""
    pol = build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)
    w = WorkerState("w", proposers=("ngram", "eagle"), max_gamma=8, profile="cpu-tiny", running=15)
    for i, regime in enumerate(regimes):
        pol._note(w, ("code", "chat")[i % 2], table if regime == GREEDY else table.view(regime))
    return pol, w, pol.worker_profile(w)


def test_the_batch_plan_values_each_request_at_its_own_sampling_regime():
    """Greedy and sampled requests share one batch and one set of head passes. Alone, the greedy half would run
    without the head's passes (its lookup copies) and the sampled half with them; the batch's plan, memoised per
    worker, must value each request at its own regime whichever request asks first (valued at the asker's regime
    alone, the first request after each refresh decided for the whole batch, and the kept model flipped)."""
    table = _regimes_table()
    views = {GREEDY: table, SAMPLED: table.view(SAMPLED)}
    alone = {}
    for regime in (GREEDY, SAMPLED):
        pol, w, prof = _noted(table, [regime] * 32)
        alone[regime] = pol.kept_group(w, prof, views[regime], 16.0, 8)
    assert alone == {GREEDY: None, SAMPLED: ("eagle",)}  # the halves disagree: the order would matter
    mixed = [(GREEDY, SAMPLED)[(i // 2) % 2] for i in range(32)]
    asked = []
    for order in ((GREEDY, SAMPLED), (SAMPLED, GREEDY)):
        pol, w, prof = _noted(table, mixed)
        asked.append([(pol.kept_group(w, prof, views[r], 16.0, 8),
                       pol._group_plan(w, prof, ("eagle",), views[r], 16.0, 8)) for r in order])
    assert asked[0] == asked[1][::-1] and asked[0][0] == asked[0][1]
    # the mixed batch's worth lies between the halves' (each request counted once, at its own regime)
    worth = {r: _noted(table, [r] * 32) for r in (GREEDY, SAMPLED)}
    halves = {r: pol._group_plan(w, prof, ("eagle",), views[r], 16.0, 8)[2] for r, (pol, w, prof) in worth.items()}
    assert min(halves.values()) < asked[0][0][1][2] < max(halves.values())
