"""Fast checks of the proxy's pure parts with real objects (no processes)."""

from __future__ import annotations

import json

import pytest

from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.errors import ConfigError, RequestError, UpstreamError
from adaptspec.proxy.configfile import expand_env, load_config_file
from adaptspec.proxy.feedback import Feedback, position_stats, prompt_tokens, spec_stats
from adaptspec.proxy.handlers import _SseScan, _take_usage
from adaptspec.proxy.metrics import ProxyMetrics
from adaptspec.proxy.request import parse_generation
from adaptspec.proxy.scrape import parse_metrics
from adaptspec.proxy.state import MemoryState, redact_url
from adaptspec.proxy.upstream import Pools, Worker, workers_from_config


def test_expand_env():
    env = {"A": "x", "EMPTY": ""}
    assert expand_env("u: ${A}/v1 ${B:-dflt} ${EMPTY:-d2} $$HOME", "f.yaml", env) == "u: x/v1 dflt d2 $HOME"
    with pytest.raises(ConfigError) as exc:
        expand_env("a: 1\nurl: ${NOPE}\n", "f.yaml", env)
    assert "f.yaml" in str(exc.value) and "${NOPE}" in str(exc.value) and "line 2" in str(exc.value)


def test_config_file_with_env_vars_gets_the_same_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTSPEC_TEST_URL", "http://127.0.0.1:9")
    pools = "pools:\n  - {name: p, engine: openai, workers: [{name: w, url: \"${ADAPTSPEC_TEST_URL}\"}]}\n"
    ok = tmp_path / "ok.yaml"
    ok.write_text(pools)
    assert str(load_config_file(ok).pools[0].workers[0].url).startswith("http://127.0.0.1:9")
    dup = tmp_path / "dup.yaml"
    dup.write_text("state: {backend: memory}\n" + pools + "state: {backend: memory}\n")
    with pytest.raises(ConfigError, match="dup.yaml"):
        load_config_file(dup)


@pytest.mark.parametrize(("body", "status", "param"), [
    (b"{", 400, None), (b'"s"', 400, None), (b"{}", 400, "model"), (b'{"model": 3}', 400, "model"),
    (b'{"model": "m"}', 400, "messages"), (b'{"model": "m", "messages": []}', 422, "messages"),
    (b'{"model": "m", "messages": [{}], "stream": 1}', 422, "stream"),
    (b'{"model": "m", "messages": [{}], "max_tokens": true}', 422, "max_tokens"),
])
def test_parse_rejects(body, status, param):
    with pytest.raises(RequestError) as exc:
        parse_generation(body, "chat")
    assert (exc.value.status, exc.value.param) == (status, param)


def test_parse_accepts():
    req = parse_generation(b'{"model": "m", "prompt": ["a"], "stream": true}', "completions")
    assert (req.model, req.stream, req.body["prompt"]) == ("m", True, ["a"])


def test_sse_scan_gives_the_same_bytes_and_outcome_however_the_stream_is_cut():
    import random
    from types import SimpleNamespace

    events = [b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i for i in range(5)]
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5}}\n\n'
    stream = b"".join(events) + usage + b"data: [DONE]\n\n"
    rng = random.Random(0)
    for strip in (False, True):
        whole = _SseScan(SimpleNamespace(scan=True, strip_usage=strip))
        want = whole.feed(stream) + (whole.tail if strip else b"")
        assert want == (stream.replace(usage, b"") if strip else stream)
        for _ in range(50):
            cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 12)))
            sse = _SseScan(SimpleNamespace(scan=True, strip_usage=strip))
            got = b"".join(sse.feed(stream[a:b]) for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True))
            assert got + (sse.tail if strip else b"") == want
            out = sse.outcome()
            assert (out.tokens, out.prompt) == (5.0, 7.0)


def test_take_usage_strips_only_what_the_proxy_added():
    usage = {"completion_tokens": 3, "speculative": {"draft_tokens": 8, "accepted_tokens": 6, "steps": 2}}
    content = b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'
    only_usage = b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
    sink: list[dict] = []
    out = _take_usage(content + only_usage + b"data: [DONE]\n\n", sink, strip=True)
    assert out == content + b"data: [DONE]\n\n"
    assert spec_stats(sink[0]) == (8.0, 6.0, 2.0)
    sink.clear()
    assert _take_usage(only_usage, sink, strip=False) == only_usage and len(sink) == 1


def test_spec_stats_reads_both_dialects():
    assert spec_stats({"usage": {"speculative": {"draft_tokens": 4, "accepted_tokens": 9}}}) == (4.0, 4.0, None)
    vllm = {"metrics": {"speculative_decoding": {"num_draft_tokens": 10, "num_accepted_draft_tokens": 7,
                                                 "num_spec_steps": 3, "mean_acceptance_length": 3.3}}}
    assert spec_stats(vllm) == (10.0, 7.0, 3.0)
    assert spec_stats({"usage": {"completion_tokens": 3}}) is None


def test_position_stats_only_when_consistent():
    spec = {"draft_tokens": 11, "accepted_tokens": 7, "steps": 5, "drafts": 4,
            "tried_per_position": [4, 3, 2, 1], "accepted_per_position": [3, 2, 1, 1]}
    assert position_stats({"usage": {"speculative": spec}}) == ([4.0, 3.0, 2.0, 1.0], [3.0, 2.0, 1.0, 1.0])
    bad = [{**spec, "accepted_per_position": [5, 2, 1, 1]},  # more accepted than tried
           {**spec, "tried_per_position": [4, 3, 3, 1]},  # position 2 tried more often than position 1 accepted
           {**spec, "tried_per_position": [4, 3]},  # lengths differ
           {**spec, "tried_per_position": ["x", 3, 2, 1]},
           {k: v for k, v in spec.items() if k != "tried_per_position"}]
    for b in bad:
        assert position_stats({"usage": {"speculative": b}}) is None, b


def test_per_position_feedback_gives_exact_conditional_rates():
    """Drafts of different lengths (n-gram): rates from tried/accepted per position, not from D / gamma."""
    fb = _feedback()
    w = Worker("w0", "http://h:1", "p", engine="adaptspec", per_request=True, proposers=("ngram",))
    tried, acc = [400.0, 300.0, 150.0], [300.0, 150.0, 120.0]
    for _ in range(20):
        fb.on_response(w, "summarize", "ngram", 6, 10, (sum(tried), sum(acc), 500.0), (tried, acc))
    est = fb.state.alphas.get("w0", "ngram", "summarize")
    assert est.per_position is not None and len(est.per_position) == 3
    for rate, want in zip(est.per_position, (0.75, 0.5, 0.8), strict=True):
        assert rate == pytest.approx(want, abs=0.01)
    # the scalar mean pools every tried position: successes / trials
    assert est.mean == pytest.approx(570 / 850, abs=0.01)


def test_prefill_ratio_follows_the_traffic():
    assert prompt_tokens({"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 600}}) == 300.0
    assert prompt_tokens({"prompt_tokens": 50, "prompt_tokens_details": None}) == 50.0
    assert prompt_tokens({"prompt_tokens": 50, "prompt_tokens_details": {"cached_tokens": 80}}) == 50.0
    assert prompt_tokens({"completion_tokens": 5}) is None
    fb = _feedback()
    w = Worker("w0", "http://h:1", "p")
    assert w.state().prefill_ratio == 0.0  # nothing seen: the cost model ignores prefill
    fb.on_response(w, "chat", "none", 0, 100, None, prompt=200.0)
    assert w.state().prefill_ratio == pytest.approx(2.0) and w.state().prompt_tokens == pytest.approx(200.0)
    for _ in range(400):  # the traffic turns RAG-like: long prompts, short replies
        fb.on_response(w, "summarize", "ngram", 4, 50, (8.0, 6.0, 2.0), prompt=2000.0)
    assert w.state().prefill_ratio == pytest.approx(40.0, rel=1e-3)
    fb.on_response(w, "chat", "none", 0, 0, None, prompt=10_000.0)  # no tokens generated: not counted
    assert w.state().prompt_tokens == pytest.approx(2000.0, rel=1e-3)


def _feedback() -> Feedback:
    """Feedback built from real parts, no proxy: a memory state, no workers, no policy."""
    return Feedback(ProxyMetrics(), MemoryState(AlphaTable()), Pools())


COUNTERS = """\
vllm:spec_decode_num_drafts_total {d}
vllm:spec_decode_num_draft_tokens_total {t}
vllm:spec_decode_num_accepted_tokens_total {a}
"""


@pytest.mark.parametrize(("engine", "ingests"), [("vllm", True), ("adaptspec", False)])
def test_counters_feed_alpha_only_without_per_request_stats(engine, ingests):
    fb = _feedback()
    w = Worker("n0", "http://h:1", "p", engine=engine, per_request=False, proposers=("ngram",), gamma=4)
    fb.on_sample(w, parse_metrics(COUNTERS.format(d=10, t=40, a=30)))  # baseline: never a burst
    assert fb.state.alphas.keys() == []
    fb.on_sample(w, parse_metrics(COUNTERS.format(d=110, t=440, a=330)))
    assert (fb.state.alphas.keys() == [("n0", "ngram", "*")]) == ingests
    # once a response carries per-request stats, counters stop counting for this worker
    fb.on_response(w, "code", "ngram", 4, 8, (8.0, 6.0, 2.0))
    before = fb.state.alphas.stats("n0", "ngram", "*")
    fb.on_sample(w, parse_metrics(COUNTERS.format(d=210, t=840, a=630)))
    assert fb.state.alphas.stats("n0", "ngram", "*") == before
    assert fb.state.alphas.stats("n0", "ngram", "code") is not None


SHADOW = """\
adaptspec:shadow_ngram_steps_by_class_total{{content_class="chat",regime="greedy"}} {s}
adaptspec:shadow_ngram_drafts_by_class_total{{content_class="chat",regime="greedy"}} {d}
adaptspec:shadow_ngram_draft_tokens_by_class_total{{content_class="chat",regime="greedy"}} {t}
adaptspec:shadow_ngram_tried_per_pos_by_class_total{{content_class="chat",regime="greedy",position="0"}} {d}
adaptspec:shadow_ngram_tried_per_pos_by_class_total{{content_class="chat",regime="greedy",position="1"}} {a0}
adaptspec:shadow_ngram_accepted_per_pos_by_class_total{{content_class="chat",regime="greedy",position="0"}} {a0}
adaptspec:shadow_ngram_accepted_per_pos_by_class_total{{content_class="chat",regime="greedy",position="1"}} {a1}
"""


@pytest.mark.parametrize(("proposers", "own", "counts"), [(("ngram",), False, True), (("draft",), False, False),
                                                          (("ngram",), True, False)])
def test_shadow_counters_teach_the_ngram_key_in_either_feedback_mode(proposers, own, counts):
    """The vLLM plugin's shadow counters (lookup scored on requests run without it) count into (worker, ngram,
    class) even once the worker's responses carry per-request stats; not for a worker without lookup, nor for
    the adaptspec worker (its shadow comes per response). A class first seen after the baseline counts whole."""
    fb = _feedback()
    w = Worker("n0", "http://h:1", "p", engine="adaptspec" if own else "vllm", per_request=True, proposers=proposers)
    fb.on_sample(w, parse_metrics(COUNTERS.format(d=0, t=0, a=0)))  # the baseline scrape: no shadow series yet
    fb.on_response(w, "code", proposers[0], 4, 8, (8.0, 6.0, 2.0))  # per-request stats from now on
    fb.on_sample(w, parse_metrics(COUNTERS.format(d=0, t=0, a=0) + SHADOW.format(s=40, d=20, t=60, a0=12, a1=5)))
    got = fb.state.alphas.stats("n0", "ngram", "chat")
    drafted = fb.metrics.shadow_draft_tokens.labels("n0", "chat")._value.get()
    if not counts:
        assert got is None and drafted == 0
        return
    assert got is not None and drafted == 60
    assert fb.metrics.shadow_accepted_tokens.labels("n0", "chat")._value.get() == 17
    est = fb.state.alphas.get("n0", "ngram", "chat")
    # per position: 12 of 20 drafts accepted their first token, 5 of the 12 that reached it the second
    assert est.per_position[:2] == pytest.approx([12 / 20, 5 / 12], abs=0.12)
    assert est.propose_rate == pytest.approx(20 / 40, abs=0.1)
    fb.on_sample(w, parse_metrics(COUNTERS.format(d=0, t=0, a=0) + SHADOW.format(s=40, d=20, t=60, a0=12, a1=5)))
    assert fb.metrics.shadow_draft_tokens.labels("n0", "chat")._value.get() == 60  # nothing new: nothing


def test_pools_routing_and_live_state_survive_replace():
    cfg = parse_config({"pools": [
        {"name": "a", "models": ["m1"], "workers": [{"name": "w0", "url": "http://h:1/v1"}]},
        {"name": "b", "engine": "openai", "workers": [{"name": "w1", "url": "http://h:2"}]}]})
    workers = workers_from_config(cfg.pools)
    assert workers[0].url == "http://h:1" and workers[1].per_request is False
    pools = Pools(workers)
    assert [w.name for w in pools.serving("m1")] == ["w0", "w1"]  # w1's models are not known yet
    assert [w.name for w in pools.serving("other")] == ["w1"]
    w1 = pools.workers["w1"]
    w1.models, w1.inflight = frozenset({"m2"}), 3
    pools.models_changed()
    with pytest.raises(RequestError) as exc:
        pools.serving("other")
    assert exc.value.status == 404
    pools.replace(workers_from_config(cfg.pools))
    assert pools.workers["w1"] is w1 and w1.inflight == 3 and w1.models == frozenset({"m2"})
    w1.healthy = False
    with pytest.raises(UpstreamError) as exc:
        Pools.eligible([w1])
    assert exc.value.status == 503


def test_redact_url():
    assert redact_url("redis://user:secret@host:6379/0") == "redis://host:6379/0"


def test_public_api():
    import adaptspec.proxy

    assert adaptspec.proxy.__all__ == ["Proxy", "create_app", "load_config_file"]


def test_access_lines_take_the_handlers_fast_path_or_logging_alike(tmp_path):
    import logging
    import time

    from adaptspec.cli._logging import configure_access_log
    from adaptspec.proxy import accesslog

    path = tmp_path / "access.jsonl"
    seen: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    log = accesslog.access_log
    before = log.handlers[:], log.level, log.propagate
    try:
        configure_access_log(str(path))  # BufferedLineHandler, "%(message)s": the line is added as is
        accesslog._write('{"a":1}')
        extra = Capture()
        accesslog.access_log.addHandler(extra)  # another handler: every line goes through logging
        accesslog._write('{"b":2}')
        accesslog.access_log.removeHandler(extra)
        accesslog.access_log.handlers[0].setFormatter(logging.Formatter("access %(message)s"))
        accesslog._write('{"c":3}')  # a formatter of its own: logging formats the line
    finally:
        configure_access_log("off")  # closes (flushes) the file handler
        log.handlers[:], log.propagate = before[0], before[2]
        log.setLevel(before[1])
    assert path.read_text().splitlines() == ['{"a":1}', '{"b":2}', 'access {"c":3}']
    assert seen == ['{"b":2}']
    for t in (0.0, 1.9995, 1764600000.25, 1764600000.999, 1764600001.0):  # the seconds formatted once a second
        milli = int(t * 1000)
        want = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(milli // 1000)) + f".{milli % 1000:03d}Z"
        assert accesslog._iso(t) == want


def test_fast_metric_updates_give_the_samples_of_the_public_methods():
    from prometheus_client import generate_latest

    from adaptspec.proxy import metrics as mn

    fast, public = ProxyMetrics(), ProxyMetrics()
    values = [0.0, 1e-5, 1.5e-5, 0.005, 0.0050001, 0.3, 1.0, 119.9, 120.0, 1e9, -1.0]  # bounds, between, past all
    for m, observe, inc in ((fast, mn.observe, mn.inc), (public, lambda c, v: c.observe(v), lambda c, a=1.0: c.inc(a))):
        for v in values:
            observe(m.child(m.e2e, "code", "ngram"), v)
            observe(m.overhead, abs(v))
            inc(m.child(m.requests, "code", "ngram", "w0", "200"))
            inc(m.child(m.output_tokens, "w0", "ngram", "code"), 17.0)

    def samples(m: ProxyMetrics) -> list[str]:  # the _created timestamps differ
        return [ln for ln in generate_latest(m.registry).decode().splitlines() if "_created" not in ln]

    assert samples(fast) == samples(public)
    assert any(ln.startswith('adaptspec_e2e_seconds_bucket{content_class="code",le="0.005"') for ln in samples(fast))


def test_access_line_is_what_json_dumps_writes():
    from adaptspec.proxy import accesslog

    records = [{}, {"ts": "2026-12-01T20:00:00.123Z", "request_id": "abc", "method": "POST", "path": "/v1/x",
                    "model": 'm"od\\el\n\u00e9\U0001f600', "class": "code", "proposer": "ngram", "gamma": 4,
                    "worker": "w0", "status": 200, "prompt_tokens": 12, "output_tokens": 3.5, "ttft_ms": 0.1 + 0.2,
                    "total_ms": 1e-7, "retries": 0},
               {"model": ["not", {"a": "str"}], "gamma": True, "ttft_ms": float("nan"), "total_ms": float("inf"),
                "status": -1, "prompt_tokens": 10**30, "output_tokens": -0.0, "worker": None, "extra": "dropped"}]
    for record in records:
        want = json.dumps({k: record.get(k) for k in accesslog.FIELDS}, separators=(",", ":"))
        assert accesslog.line(record) == want
        assert list(json.loads(want)) == list(accesslog.FIELDS)  # every field, in order (NaN: as json reads it)


def test_the_middlewares_line_is_line_of_the_same_record():
    """_fast_line (remembered middles, the id and time unescaped) writes what line() writes, for the records
    the middleware builds (every field, a valid id) with any values the handlers may note."""
    from adaptspec.proxy import accesslog

    base = {**accesslog._BLANK, "request_id": "3f2a9c", "method": "POST", "path": "/v1/chat/completions"}
    notes = [{}, {"model": "m", "class": "code", "proposer": "ngram", "gamma": 4, "worker": "w0", "status": 200,
                  "prompt_tokens": 12, "output_tokens": 30, "ttft_ms": 0.35, "retries": 1},
             {"model": 'm"od\\el\n\u00e9\U0001f600', "status": 499, "prompt_tokens": 12.5, "ttft_ms": None},
             {"model": ["not", {"a": "str"}], "gamma": True, "ttft_ms": float("nan"), "output_tokens": float("inf")},
             {"model": "x" * 600, "status": 404, "retries": 2.0}, {"request_id": "a.b:c/d+e=f@g-h_1"}]
    for started in (1764600000.25, 1764600000.2501, 1764600000.999, 1764600001.0):
        for extra in notes * 2:  # the second time from the remembered middles
            record = {**base, **extra}
            total = 12.345
            want = accesslog.line({**record, "ts": accesslog._iso(started), "total_ms": total})
            assert accesslog._fast_line(record, started, total) == want
    assert len(accesslog._MIDDLES) <= accesslog._MIDDLES_MAX
    assert not any(len(k[2]) > 512 for k in accesslog._MIDDLES if isinstance(k[2], str))  # long models: not kept


def test_worker_state_is_reused_only_while_its_inputs_stay_the_same():
    from adaptspec.control.types import WorkerState

    w = Worker(name="w0", url="http://127.0.0.1:9", pool="p", proposers=("ngram",), max_gamma=6)

    def fresh(other: int = 0) -> WorkerState:
        return WorkerState(name=w.name, engine=w.engine, per_request=w.per_request, proposers=w.proposers,
                           gamma=w.gamma, max_gamma=w.max_gamma, profile=w.profile, running=w.running,
                           waiting=w.waiting, kv_usage=w.kv_usage, inflight=w.inflight + other, healthy=w.healthy,
                           prefill_ratio=w.traffic.prefill_ratio, prompt_tokens=w.traffic.prompt_tokens,
                           step_costs=w.step_costs)

    first = w.state()
    assert first == fresh() and w.state() is first  # nothing changed: the same record
    for change in (lambda: setattr(w, "inflight", 2), lambda: setattr(w, "running", 3.0),
                   lambda: setattr(w, "healthy", False), lambda: w.traffic.note(100.0, 10.0),
                   lambda: setattr(w, "profile", "cpu-tiny")):
        before = w.state()
        change()
        assert w.state() == fresh() and w.state() is not before
    assert w.state(5) == fresh(5) and w.state(5).inflight == w.inflight + 5


def test_a_delta_table_applied_elsewhere_equals_its_observations_made_there():
    """Replicas exchange count deltas (state.DeltaTable) instead of observations: applied with
    AlphaTable.add_stats, a delta over several observations leaves a table exactly where observing them would
    have, forgetting included (history decayed by the delta's tokens, the delta decayed inside itself)."""
    from adaptspec.proxy.state import DeltaTable

    direct, shared = (AlphaTable(half_life_tokens=100.0, half_life_s=None) for _ in range(2))
    for t in (direct, shared):
        t.observe("w0", "ngram", "code", 40, 30, steps=12, gamma=4)
    delta = DeltaTable(shared)
    for draft, accepted in [(20, 15), (32, 10), (8, 8)]:
        for t in (direct, delta):
            t.observe("w0", "ngram", "code", draft, accepted, steps=draft // 4 + 1, gamma=4)
    delta.observe("w0", "draft", "chat", 12, 6, steps=4, gamma=3)
    direct.observe("w0", "draft", "chat", 12, 6, steps=4, gamma=3)
    for w, p, c, st, tokens in delta.payload():
        shared.add_stats(w, p, c, st, tokens)
    for key in (("w0", "ngram", "code"), ("w0", "draft", "chat")):
        a, b = direct.stats(*key), shared.stats(*key)
        for field in ("s", "f", "reports", "steps", "drafts"):
            assert b[field] == pytest.approx(a[field], rel=1e-12), (key, field)
    assert shared.get("w0", "ngram", "code").mean == pytest.approx(direct.get("w0", "ngram", "code").mean, rel=1e-12)


def test_a_request_that_finished_since_the_last_scrape_no_longer_counts_as_running():
    """At one client the worker's last sample still counts the request that just ended (for up to a scrape
    interval): the next request would be planned at batch 2. Requests of this proxy that finished since the
    sample are taken off its running count until the next sample (never below 0; inflight still counts)."""
    w = Worker("w0", "http://h:1", "p", engine="adaptspec", per_request=True, proposers=("ngram",))
    w.apply_sample(parse_metrics("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"))
    assert w.state().load == 1.0
    w.finished += 1  # the relay, when a request it sent ends
    assert w.state().load == 0.0
    w.finished += 1
    assert w.state().running == 0.0
    w.inflight = 1  # the next one is on its way
    assert w.state().load == 1.0
    w.inflight = 0
    w.apply_sample(parse_metrics("vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n"))
    assert w.finished == 0 and w.state().load == 3.0  # a new sample counts afresh
