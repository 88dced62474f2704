"""Per-request acceptance prediction in trace replays: the simulator decides each traced request on its own
predicted alphas and teaches the predictor from what it served (bench/trace_predict.py)."""

from __future__ import annotations

from adaptspec.bench.simulator import ProfileCost, SimConfig, parse_policy, simulate, sweep
from adaptspec.bench.trace_predict import TracePredictor
from adaptspec.bench.traces import TraceRequest, TraceWorkload
from adaptspec.control.config import GoodputPolicy
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.profiles import load_profile

CODE = "def add(a, b):\n    total = a + b\n    return total\n\nclass Box:\n    size = 3\n"
N_OUT = 64


def _trace(n: int = 40) -> list[TraceRequest]:
    """Code requests, alternately an edit whose answer copies the given code (every n-gram draft accepted)
    and a question with nothing to copy (every draft rejected)."""
    out = []
    for i in range(n):
        edit = i % 2 == 0
        prompt = (f"Fix the formatting of this code and return it whole:\n```python\n{CODE.replace('add', f'f{i}')}```"
                  if edit else f"What is the difference between a list and a tuple in Python? Case {i}.")
        runs = tuple(min(9, N_OUT - j) for j in range(N_OUT)) if edit else (1,) * N_OUT
        out.append(TraceRequest(f"r{i}-{'edit' if edit else 'question'}", "code", 60, N_OUT, 8, {"ngram": runs},
                                prompt=prompt))
    return out


def _decisions(predictor: TracePredictor | None) -> dict[str, list[tuple[str, int]]]:
    cost = ProfileCost(load_profile("cpu-tiny"))
    worker = cost.worker(profile="cpu-tiny")
    wl = TraceWorkload(_trace())
    got: dict[str, list[tuple[str, int]]] = {"edit": [], "question": []}

    def done(d, rid, now, n, tpot):
        if rid >= 80:  # after 80 finished requests: what has been learnt by then
            got[wl.request(rid).id.split("-")[1]].append((d.proposer, d.gamma))

    simulate(build_policy(GoodputPolicy(kind="goodput", default_profile="cpu-tiny")), cost, wl,
             SimConfig(concurrency=1, requests=40, warmup=80), alphas=AlphaTable(),
             worker=worker, on_finish=done, predictor=predictor)
    return got


def test_predictor_learns_online_to_split_a_class():
    """Class-level: edits and questions share one estimate, so they get the same plan. Predicted: every
    edit drafts n-gram at a long gamma and every question runs off, after 80 requests of feedback."""
    flat = _decisions(None)
    assert {d for d in flat["edit"]} == {d for d in flat["question"]}  # one class, one plan
    tp = TracePredictor()
    split = _decisions(tp)
    assert split["edit"] and all(p == "ngram" and g >= 6 for p, g in split["edit"])
    assert split["question"] and all(p == "none" for p, _ in split["question"])
    # it learnt only from what it served: n-gram feedback, nothing for proposers it did not run
    assert tp.predictor.to_dict()["alpha"].keys() == {"ngram"}


def test_trace_without_prompts_replays_exactly_as_class_level():
    reqs = [TraceRequest(r.id, r.content_class, r.prompt_tokens, r.output_tokens, r.max_k, r.accept_runs)
            for r in _trace(12)]
    specs = [parse_policy("adaptive-class", "cpu-tiny"), parse_policy("adaptive+predict", "cpu-tiny")]
    rows = sweep(specs, "cpu-tiny", TraceWorkload(reqs), [("concurrency", 1), ("concurrency", 8)],
                 requests=16, warmup=8, progress=False)
    by = {(r["policy"], r["concurrency"]): r for r in rows}
    for c in (1, 8):
        a, b = by[("adaptive-class", c)], by[("adaptive+predict", c)]
        assert {k: v for k, v in a.items() if k != "policy"} == {k: v for k, v in b.items() if k != "policy"}


def test_policy_names():
    assert parse_policy("adaptive+predict", "cpu-tiny").predicting()
    assert not parse_policy("adaptive-class", "cpu-tiny").predicting()
    assert parse_policy("adaptive", "cpu-tiny").predicting()  # estimator.predict defaults on


def test_requests_of_two_files_with_the_same_id_keep_their_own_features():
    a, b = _trace(2)
    twin = TraceRequest(a.id, "code", 60, N_OUT, 8, b.accept_runs, prompt=b.prompt)  # same id, other prompt
    tp = TracePredictor()
    fa, fb = tp.features(a), tp.features(twin)
    assert fa is not None and fb is not None and not (fa.x == fb.x).all()
    assert tp.features(a) is fa and tp.features(TraceRequest(a.id, "code", 60, N_OUT, 8, a.accept_runs)) is None
