"""The vLLM plugin with draft-model speculation, which vLLM runs with its async scheduler (a different
seam from n-gram's): per-request lengths 0 / 1 / 3 / max, same greedy output, per-class counters.
Its own module so that its vLLM server starts after the n-gram one has stopped (2 CPU cores)."""

from __future__ import annotations

import pytest

from ._vllm import MAX_GAMMA, complete, counters, delta, start_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def vllm_draft_server(tmp_path_factory):
    """Draft-model speculation: vLLM's async scheduler (AsyncScheduler._update_after_schedule seam)."""
    yield from start_vllm(tmp_path_factory, "draft")


def test_draft_model_per_request_length(vllm_draft_server):
    url = vllm_draft_server["url"]
    before = counters(url)
    results = {k: complete(url, k, proposer="draft", content_class="chat") for k in (0, 1, 3, MAX_GAMMA)}
    after = counters(url)
    assert len({r["choices"][0]["text"] for r in results.values()}) == 1
    spec = {k: r["metrics"]["speculative_decoding"] for k, r in results.items()}
    assert spec[0]["num_draft_tokens"] == 0 and spec[0]["num_spec_steps"] == 0
    for k in (1, 3, MAX_GAMMA):
        # a draft model proposes on every decode step: exactly k tokens per verify step
        assert spec[k]["num_spec_steps"] > 0
        assert set(spec[k]["per_step_drafted"]) == {k}
    lab = (("content_class", "chat"), ("proposer", "draft"))
    assert (delta(after, before, "adaptspec:spec_decode_num_draft_tokens_by_class_total", lab)
            == sum(s["num_draft_tokens"] for s in spec.values()))
