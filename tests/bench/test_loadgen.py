"""The load generator against a real HTTP server on loopback (a small streaming OpenAI-compatible one)."""

from __future__ import annotations

import itertools
import json

import pytest
from _fake_openai import FakeOpenAI

from adaptspec.bench.loadgen import LoadConfig, run_sweep
from adaptspec.bench.prompts import PromptItem, default_prompts, load_prompts, weighted_cycle
from adaptspec.cli import main
from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ConfigError


def _prompts(fail_every: int = 0):
    items = [PromptItem("summarize", "Summarize this: a b c"), PromptItem("chat", "Hello there")]
    for i, it in enumerate(itertools.cycle(items)):
        yield PromptItem("chat", "please FAIL") if fail_every and i % fail_every == fail_every - 1 else it


def test_closed_loop_measures_tokens_latency_and_decision_mix():
    with FakeOpenAI(delay_s=0.002) as srv:
        cfg = LoadConfig(url=srv.url, concurrency=1, requests=12, max_tokens=10, warmup_requests=2)
        rows = run_sweep(cfg, [("concurrency", 1), ("concurrency", 4)], _prompts(), progress=False)
        assert srv.max_inflight == 4  # the 4-client point really ran 4 requests at once
        assert {r["model"] for r in srv.requests} == {"fake-model"}  # discovered from /v1/models
        assert all(r["stream"] and r["max_tokens"] == 10 for r in srv.requests)
        assert len(srv.requests) == 2 * (12 + 2)  # warm-up requests are sent, not measured
    for row in rows:
        assert row["requests"] == 12 and row["errors"] == 0
        assert row["output_tokens"] == 12 * 10  # from the usage chunk
        # 10 chunks 2 ms apart: TPOT ~2 ms, TTFT >= 2 ms, e2e >= 20 ms
        assert 1.5 <= row["tpot_ms_p50"] <= 50
        assert row["ttft_ms_p50"] >= 1.5 and row["e2e_s_p50"] >= 0.02
        assert row["output_tokens_per_s"] == pytest.approx(row["output_tokens"] / row["window_s"])
        assert row["proposer_mix"] == {"ngram": 0.5, "none": 0.5}  # alternate prompts -> alternate headers
        assert row["mean_gamma"] == pytest.approx(2.0) and row["speculation_share"] == pytest.approx(0.5)
    # (that 4 clients ran at once is `max_inflight` above; a throughput ratio between the points is a timing
    # claim, and failed on a loaded box: 1.2x)


def test_open_loop_poisson_and_errors_are_counted():
    with FakeOpenAI(delay_s=0.001) as srv:
        cfg = LoadConfig(url=srv.url, rate=1.0, requests=16, max_tokens=4)
        (row,) = run_sweep(cfg, [("rate", 200.0)], _prompts(fail_every=4), progress=False)
    assert row["rate"] == 200.0 and row["requests"] == 16
    assert row["errors"] == 4 and row["error_kinds"] == {"HTTP 500": 4}
    assert row["output_tokens"] == 12 * 4


def test_unreachable_server_is_a_clear_error(capsys):
    from adaptspec.bench.loadgen import free_port

    rc = main(["bench", "--url", f"http://127.0.0.1:{free_port()}", "--concurrency", "1", "--requests", "1",
               "--no-progress"])
    assert rc == 1
    assert "/v1/models failed" in capsys.readouterr().err


def test_cli_writes_json_markdown_and_plot(tmp_path, capsys):
    with FakeOpenAI(delay_s=0.001) as srv:
        rc = main(["bench", "--url", srv.url, "--concurrency", "1,2", "--requests", "6", "--max-tokens", "5",
                   "--mix", "code=1,summarize=1", "--no-progress", "--json", str(tmp_path / "o.json"),
                   "--md", str(tmp_path / "o.md"), "--plot", str(tmp_path / "o.png")])
        cats = {r["messages"][0]["content"][:40] for r in srv.requests}
    assert rc == 0
    rows = json.loads((tmp_path / "o.json").read_text())
    assert [r["concurrency"] for r in rows] == [1, 2]
    assert all(set(r["class_mix"]) <= {"code", "summarize"} for r in rows)
    assert len(cats) > 2  # real prompts of the shipped set
    assert "| concurrency |" in (tmp_path / "o.md").read_text()
    assert (tmp_path / "o.png").read_bytes()[:4] == b"\x89PNG"


def test_default_prompt_set_covers_every_class():
    items = default_prompts()
    assert {i.category for i in items} == set(CONTENT_CLASSES)
    stream = weighted_cycle(items, {"code": 1.0, "translate": 3.0}, seed=1)
    draws = [next(stream).category for _ in range(4000)]
    # class drawn with probability 1/4 vs 3/4: within 6 sigma of n*p
    n, p = 4000, 0.25
    assert abs(draws.count("code") - n * p) <= 6 * (n * p * (1 - p)) ** 0.5 + 5
    assert set(draws) == {"code", "translate"}


def test_prompt_file_errors_name_file_and_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"category": "code", "prompt": "x"}\n{"category": "poetry", "prompt": "y"}\n')
    with pytest.raises(ConfigError, match=r"p.jsonl:2.*category.*poetry"):
        load_prompts(f)
    f.write_text('{"class": "summarization", "prompt": "x"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"p.jsonl:2"):
        load_prompts(f)
    f.write_text('{"label": "translation", "messages": [{"role": "user", "content": "hi"}]}\n')
    (item,) = load_prompts(f)
    assert item.category == "translate" and item.chat_messages() == [{"role": "user", "content": "hi"}]


def test_duration_mode_with_warmup_seconds():
    with FakeOpenAI(delay_s=0.002) as srv:
        cfg = LoadConfig(url=srv.url, concurrency=2, duration_s=0.6, warmup_s=0.2, max_tokens=5)
        (row,) = run_sweep(cfg, [("concurrency", 2)], _prompts(), progress=False)
        sent = len(srv.requests)
    assert row["errors"] == 0 and row["requests"] > 4
    assert sent > row["requests"]  # warm-up requests were sent and not counted
    assert 0.4 <= row["window_s"] <= 1.5


def test_temperature_mix_alternates_and_a_prompt_file_temperature_wins(tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text('{"category": "code", "prompt": "a"}\n{"category": "chat", "prompt": "b", "temperature": 1.3}\n')
    with FakeOpenAI(delay_s=0.001) as srv:
        rc = main(["bench", "--url", srv.url, "--concurrency", "1", "--requests", "40", "--max-tokens", "2",
                   "--workload", str(f), "--temperature", "0,0.7", "--no-progress"])
        sent = [(r["messages"][0]["content"], r["temperature"]) for r in srv.requests]
    assert rc == 0 and len(sent) == 40
    # request i takes 0 / 0.7 by its index, except the prompt that carries its own
    assert all(t == (1.3 if p == "b" else (0.0, 0.7)[i % 2]) for i, (p, t) in enumerate(sent))
    assert {t for p, t in sent if p == "a"} == {0.0, 0.7}
    assert main(["bench", "--url", srv.url, "--concurrency", "1", "--temperature", "0,3"]) == 2
    assert "--temperature" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ['"hot"', "-0.5", "2.5", "true"])
def test_prompt_file_temperature_is_checked(tmp_path, bad):
    f = tmp_path / "p.jsonl"
    f.write_text(f'{{"category": "code", "prompt": "a", "temperature": {bad}}}\n')
    with pytest.raises(ConfigError, match=r"p.jsonl:1.*temperature"):
        load_prompts(f)
