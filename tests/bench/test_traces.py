"""Trace format: good lines load, every kind of bad line is rejected naming file, line, key and value."""

from __future__ import annotations

import json

import pytest

from adaptspec.bench.traces import TraceRequest, dump, load_traces, synthesize, validate
from adaptspec.bench.workloads import get_workload
from adaptspec.errors import ConfigError

GOOD = {"id": "a", "class": "code", "prompt_tokens": 10, "output_tokens": 4, "max_k": 3,
        "accept_runs": {"ngram": [1, 4, 2, 1], "eagle": [2, 3, 1, 1]}}
GOOD_LINE = json.dumps(GOOD)


def write(tmp_path, *objs, raw: str | None = None):
    p = tmp_path / "t.jsonl"
    p.write_text(raw if raw is not None else "\n".join(json.dumps(o) for o in objs) + "\n")
    return p


def test_good_line_loads_and_round_trips(tmp_path):
    second = {**GOOD, "id": "b", "temperature": 0.7, "prompt": "def f(): pass",
              "accept_runs": {"draft": [1, 1, 1, 1]}}
    path = write(tmp_path, GOOD, second)
    reqs = load_traces(path)
    assert [r.id for r in reqs] == ["a", "b"]
    a, b = reqs
    assert a.content_class == "code" and a.temperature == 0.0 and a.prompt is None
    assert a.accept_runs == {"ngram": (1, 4, 2, 1), "eagle": (2, 3, 1, 1)}
    assert b.temperature == 0.7 and set(b.accept_runs) == {"draft"}
    out = dump(reqs, tmp_path / "again.jsonl")
    assert load_traces(out) == reqs
    assert json.loads(out.read_text().splitlines()[0]) == GOOD


def test_emitted_is_min_of_run_and_gamma_plus_one():
    r = validate(GOOD)
    assert [r.emitted("ngram", 1, g) for g in range(5)] == [1, 2, 3, 4, 4]
    assert r.emitted("eagle", 0, 1) == 2 and r.emitted("eagle", 2, 3) == 1


def test_classifier_decides_when_class_is_absent():
    obj = {k: v for k, v in GOOD.items() if k != "class"}
    r = validate({**obj, "prompt": "Translate into French: the cat sleeps on the mat."})
    assert r.content_class == "translate" and not r.class_given
    assert "class" not in r.to_dict()


BAD = [
    ("[1, 2]", None, "JSON object"),
    ({**GOOD, "extra": 1}, "extra", "unknown key"),
    ({k: v for k, v in GOOD.items() if k != "max_k"}, "max_k", "missing"),
    ({k: v for k, v in GOOD.items() if k != "class"}, "class", "prompt"),
    ({**GOOD, "id": ""}, "id", "non-empty"),
    ({**GOOD, "class": "poetry"}, "class", "content class"),
    ({**GOOD, "prompt_tokens": 0}, "prompt_tokens", ">= 1"),
    ({**GOOD, "output_tokens": 2.5}, "output_tokens", "integer"),
    ({**GOOD, "max_k": True}, "max_k", "integer"),
    ({**GOOD, "temperature": -1}, "temperature", ">= 0"),
    ({**GOOD, "prompt": 3}, "prompt", "string"),
    ({**GOOD, "accept_runs": {}}, "accept_runs", "non-empty"),
    ({**GOOD, "accept_runs": {"medusa": [1, 1, 1, 1]}}, "accept_runs", "unknown proposer"),
    ({**GOOD, "accept_runs": {"ngram": [1, 1, 1]}}, "accept_runs.ngram", "output_tokens = 4"),
    ({**GOOD, "accept_runs": {"ngram": [1, 5, 1, 1]}}, "accept_runs.ngram[1]", "1..4"),
    ({**GOOD, "accept_runs": {"ngram": [1, 0, 1, 1]}}, "accept_runs.ngram[1]", "1..4"),
]


@pytest.mark.parametrize(("obj", "key", "words"), BAD)
def test_bad_line_names_file_line_key_value(tmp_path, obj, key, words):
    raw = GOOD_LINE + "\n" + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n"
    path = write(tmp_path, raw=raw)
    with pytest.raises(ConfigError) as err:
        load_traces(path)
    e = err.value
    assert e.file == str(path) and "line 2" in str(e) and words in str(e)
    assert e.key == key


def test_not_json_duplicate_and_empty(tmp_path):
    with pytest.raises(ConfigError, match=r"line 2: not valid JSON"):
        load_traces(write(tmp_path, raw=GOOD_LINE + "\n{oops\n"))
    with pytest.raises(ConfigError, match=r"line 3: duplicate id \(first on line 1\)"):
        load_traces(write(tmp_path, raw=GOOD_LINE + "\n\n" + GOOD_LINE + "\n"))
    with pytest.raises(ConfigError, match="no requests"):
        load_traces(write(tmp_path, raw="\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_traces(tmp_path / "missing.jsonl")


def test_synthetic_trace_is_valid_and_matches_the_class_rates(tmp_path):
    reqs = synthesize(get_workload("summarize"), 200, seed=3, max_k=4, proposers=("ngram", "eagle"))
    back = load_traces(dump(reqs, tmp_path / "s.jsonl"))  # passes the validator
    assert back == reqs
    assert all(isinstance(r, TraceRequest) and len(r.accept_runs["ngram"]) == r.output_tokens for r in reqs)
    # mean first-position acceptance over requests ~ the class's rate (ngram summarize 0.70, eagle 0.64):
    # per request P(run >= 2) = a_r, E[a_r] = class rate; 200 requests x ~200 positions
    for p, rate in (("ngram", 0.70), ("eagle", 0.64)):
        firsts = [sum(x >= 2 for x in r.accept_runs[p][:-4]) / (r.output_tokens - 4) for r in reqs]
        assert sum(firsts) / len(firsts) == pytest.approx(rate, abs=0.05)
