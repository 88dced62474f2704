"""Engine adapters (proxy/engines.py): body rewrites, feedback sources, scraping and ingestion per engine,
and the rule that no other module compares engine names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adaptspec.control.estimators import (
    VLLM_ACCEPTED,
    VLLM_DRAFT_TOKENS,
    VLLM_DRAFTS,
    AlphaTable,
    CounterTracker,
)
from adaptspec.control.types import ENGINES
from adaptspec.errors import ConfigError, RequestError
from adaptspec.proxy.engines import ADAPTERS, adapter
from adaptspec.proxy.upstream import Worker

PKG = Path(__file__).resolve().parents[2] / "adaptspec"
# the adapters, and the integrations (each builds or patches one engine by design, integrations/launch.py's
# table picks one per engine name); everything else asks them
_EXEMPT = {PKG / "proxy" / "engines.py"}
_NAMES = "|".join(ENGINES)
_COMPARES = [re.compile(r"\bengine\s*(==|!=|\bin\b|\bnot in\b)"),
             re.compile(rf"""(==|!=|\bin\b)\s*[({{\[]?\s*["']({_NAMES})["']"""),
             re.compile(rf"""["']({_NAMES})["']\s*(==|!=)""")]


def test_every_engine_has_one_adapter():
    assert set(ADAPTERS) == set(ENGINES)
    assert all(ADAPTERS[name].name == name for name in ENGINES)
    with pytest.raises(ConfigError, match="'tgi'"):
        adapter("tgi")


def _checked_files() -> list[Path]:
    return [p for p in sorted(PKG.rglob("*.py")) if p not in _EXEMPT and "integrations" not in p.parts]


def test_the_check_reads_the_cli_and_the_benches():
    checked = _checked_files()
    for folder in ("cli", "bench", "proxy", "control", "worker"):
        assert any(p.parent == PKG / folder for p in checked), folder
    assert PKG / "cli" / "_launch.py" in checked and PKG / "bench" / "compare.py" in checked


def test_no_engine_name_compare_outside_the_adapters():
    offenders = []
    for path in _checked_files():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if any(p.search(code) for p in _COMPARES):
                offenders.append(f"{path.relative_to(PKG)}:{n}: {line.strip()}")
    assert offenders == []


def test_the_checker_catches_a_compare():
    assert any(p.search('if worker.engine == "vllm":') for p in _COMPARES)
    assert any(p.search('per = engine in ("adaptspec", "vllm")') for p in _COMPARES)
    assert not any(p.search('name = "vllm"') for p in _COMPARES)


def test_adaptspec_rewrites_speculation_and_drops_the_clients_on_fixed_workers():
    eng = adapter("adaptspec")
    body = {"model": "m", "speculation": {"proposer": "eagle", "num_speculative_tokens": 9}}
    assert eng.client_speculation(body) == body["speculation"]
    assert eng.rewrite(body, True, "ngram", 3, "code") == (
        {"speculation": {"proposer": "ngram", "num_speculative_tokens": 3, "content_class": "code"}}, ())
    assert eng.rewrite(body, False, "ngram", 3, "code") == ({}, ("speculation",))
    assert eng.rewrite({"model": "m"}, False, "none", 0, "code") == ({}, ())


def test_vllm_merges_xargs_and_rejects_a_non_object():
    eng = adapter("vllm")
    set_, drop = eng.rewrite({"vllm_xargs": {"mine": 1}}, True, "draft", 2, "chat")
    assert drop == () and set_ == {"vllm_xargs": {"mine": 1, "adaptspec_num_spec_tokens": 2,
                                                  "adaptspec_proposer": "draft", "adaptspec_content_class": "chat"}}
    assert eng.rewrite({"vllm_xargs": {"mine": 1}}, False, "draft", 2, "chat") == ({}, ())
    assert eng.client_speculation({"speculation": {}}) is None
    with pytest.raises(RequestError) as exc:
        eng.rewrite({"vllm_xargs": [1]}, True, "draft", 2, "chat")
    assert exc.value.status == 422 and exc.value.param == "vllm_xargs"


@pytest.mark.parametrize("engine", ["sglang", "openai"])
def test_engines_without_per_request_control_leave_the_body(engine):
    eng = adapter(engine)
    assert not eng.per_request
    assert eng.rewrite({"speculation": {"proposer": "ngram"}}, True, "ngram", 3, "chat") == ({}, ())
    assert Worker(name="w", url="http://h", pool="p", engine=engine, per_request=True).per_request is False


def test_feedback_and_scrape_flags():
    flags = {e: (a.scan, a.own_feedback, a.scraped) for e, a in ADAPTERS.items()}
    assert flags == {"adaptspec": (True, True, True), "vllm": (True, False, True),
                     "sglang": (True, False, True), "openai": (False, False, False)}


def test_vllm_ingest_counts_the_counter_deltas():
    table, tracker = AlphaTable(), CounterTracker()
    eng = adapter("vllm")
    first = [(VLLM_DRAFTS, {}, 100.0), (VLLM_DRAFT_TOKENS, {}, 400.0), (VLLM_ACCEPTED, {}, 300.0)]
    assert eng.ingest(table, tracker, "w", first, "ngram", 4) == 0  # baseline
    second = [(VLLM_DRAFTS, {}, 200.0), (VLLM_DRAFT_TOKENS, {}, 800.0), (VLLM_ACCEPTED, {}, 600.0)]
    assert eng.ingest(table, tracker, "w", second, "ngram", 4) == 1
    assert adapter("openai").ingest(table, tracker, "w", second, "ngram", 4) == 0


def test_only_the_reference_worker_pads_its_verify():
    """`flat_verify` reaches the policy through the worker's state: a profile's padded verify prices only the
    reference engine's steps (tests/control/test_engine_padding.py)."""
    assert {name: ADAPTERS[name].flat_verify for name in ENGINES} == \
        {name: name != "adaptspec" for name in ENGINES}
    for engine in ENGINES:
        w = Worker(name="w", url="http://127.0.0.1:1", pool="p", engine=engine, profile="cpu-tiny")
        assert w.state().flat_verify is (engine != "adaptspec")
