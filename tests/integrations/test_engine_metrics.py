"""The proxy's engine-metric mapping (adaptspec.proxy.scrape + control.estimators) on real and documented
/metrics text: a capture of vLLM 0.32.0 (CPU) serving the tiny model with n-gram speculation and the
adaptspec plugin, and SGLang's documented exposition format."""

from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adaptspec.control.estimators import AlphaTable, CounterTracker, ingest_sglang, ingest_vllm
from adaptspec.proxy.scrape import parse_metrics

FIXTURES = Path(__file__).parent / "fixtures"
VLLM_TEXT = (FIXTURES / "vllm_0.32.0_ngram_metrics.txt").read_text()
SGLANG_TEXT = (FIXTURES / "sglang_metrics.txt").read_text()


def reference_sums(text: str) -> dict[tuple[str, tuple], float]:
    """Independent reading with prometheus_client's parser: sample name + selected labels -> summed value."""
    out: dict[tuple[str, tuple], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items()
                                        if k in ("content_class", "proposer", "position"))))
            out[key] = out.get(key, 0.0) + s.value
    return out


def zeroed(text: str) -> str:
    """The same exposition with every sample value 0 (a freshly started engine)."""
    lines = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            line = line.rsplit(" ", 1)[0] + " 0"
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_vllm_occupancy_and_spec_families_match_prometheus_parser():
    ref = reference_sums(VLLM_TEXT)
    sample = parse_metrics(VLLM_TEXT)
    assert sample.running == ref[("vllm:num_requests_running", ())]
    assert sample.waiting == ref[("vllm:num_requests_waiting", ())]
    assert sample.kv_usage == ref[("vllm:kv_cache_usage_perc", ())]
    got: dict[tuple[str, tuple], float] = {}
    for name, labels, value in sample.spec:
        key = (name, tuple(sorted((k, v) for k, v in labels.items()
                                  if k in ("content_class", "proposer", "position"))))
        got[key] = got.get(key, 0.0) + value
    wanted = {k: v for k, v in ref.items() if k[0].startswith(("vllm:spec_decode_num", "adaptspec:"))
              and k[0].endswith("_total")}
    assert got == wanted
    # the plugin's per-class families are there, and add up to the engine-wide counters
    by_class = {k: v for k, v in got.items() if k[0].startswith("adaptspec:")}
    assert (("adaptspec:spec_decode_num_drafts_by_class_total",
             (("content_class", "code"), ("proposer", "ngram")))) in by_class
    for fam, engine in (("drafts", "drafts"), ("draft_tokens", "draft_tokens"),
                        ("accepted_tokens", "accepted_tokens")):
        per_class = sum(v for k, v in by_class.items() if k[0] == f"adaptspec:spec_decode_num_{fam}_by_class_total")
        assert per_class == got[(f"vllm:spec_decode_num_{engine}_total", ())]


def test_vllm_counters_feed_the_alpha_table_per_class():
    table, tracker = AlphaTable(), CounterTracker()
    assert ingest_vllm(table, tracker, "v0", parse_metrics(zeroed(VLLM_TEXT)).spec, "ngram", now=0.0) == 0
    updated = ingest_vllm(table, tracker, "v0", parse_metrics(VLLM_TEXT).spec, "ngram", now=1.0)
    ref = reference_sums(VLLM_TEXT)
    classes = {dict(k[1])["content_class"] for k in ref if k[0] == "adaptspec:spec_decode_num_drafts_by_class_total"}
    assert updated == 1 + len(classes)  # engine-wide key + one per class seen
    prior = AlphaTable().get("v0", "ngram", "code")
    est = table.get("v0", "ngram", "code")
    lab = (("content_class", "code"), ("proposer", "ngram"))
    observed = (ref[("adaptspec:spec_decode_num_accepted_tokens_by_class_total", lab)]
                / ref[("adaptspec:spec_decode_num_draft_tokens_by_class_total", lab)])
    assert est.n > prior.n
    assert abs(est.mean - observed) < abs(prior.mean - observed)


def test_sglang_occupancy():
    sample = parse_metrics(SGLANG_TEXT)
    assert sample.running == 7 + 5
    assert sample.waiting == 2 + 1
    assert sample.kv_usage == pytest.approx((0.3 + 0.5) / 2)


def test_sglang_accept_length_gives_closed_form_alpha():
    gamma, length = 3, 2.44
    # E[tokens per verify step] = 1 + a + a^2 + a^3 = length  ->  the real root in (0, 1)
    roots = np.roots([1.0, 1.0, 1.0, 1.0 - length])
    alpha = next(r.real for r in roots if abs(r.imag) < 1e-12 and 0 < r.real < 1)
    table, tracker = AlphaTable(prior_strength=2.0), CounterTracker()
    assert ingest_sglang(table, tracker, "s0", parse_metrics(zeroed(SGLANG_TEXT)).spec, "eagle", gamma, now=0.0) == 0
    assert ingest_sglang(table, tracker, "s0", parse_metrics(SGLANG_TEXT).spec, "eagle", gamma, now=1.0) == 1
    est = table.get("s0", "eagle", "chat")
    assert est.mean == pytest.approx(alpha, abs=0.01)
