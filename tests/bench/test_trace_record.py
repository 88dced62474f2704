"""Trace recording: the run arithmetic, and recorded runs against what the real engine emits step by step."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from adaptspec.bench.prompts import PromptItem, default_prompts
from adaptspec.bench.trace_record import (
    RecordOptions,
    greedy_outputs,
    ngram_runs,
    record_endpoint,
    record_tiny,
    streak_runs,
    teacher_forced_predictions,
)
from adaptspec.cli import main
from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import RequestError
from adaptspec.worker.engine import Engine, GenRequest
from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers import ngram_lookup

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"
MAX_K = 6
MAX_TOKENS = 40


def one_per_class() -> list[PromptItem]:
    items = default_prompts()
    return [next(it for it in items if it.category == c) for c in CONTENT_CLASSES]


@pytest.fixture(scope="module")
def draft() -> TinyLlama:
    return TinyLlama.from_pretrained(ASSETS / "tiny-draft")


@pytest.fixture(scope="module")
def engine(draft):
    from adaptspec.worker.tokenizer import Tokenizer

    e = Engine(TinyLlama.from_pretrained(ASSETS / "tiny-target"), Tokenizer.from_dir(ASSETS / "tiny-target"),
               draft, max_batch=8, max_model_len=1024, num_threads=1)
    e.start()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def recorded(engine, draft) -> list[tuple[PromptItem, dict]]:
    items = one_per_class()
    recs = list(record_tiny(items, engine, draft, RecordOptions(max_k=MAX_K, max_tokens=MAX_TOKENS, batch=4)))
    by_id = {r["id"]: r for r in recs}
    return [(it, by_id[f"p{n:04d}-{it.category}"]) for n, it in enumerate(items)
            if f"p{n:04d}-{it.category}" in by_id]


def steps_emitted(engine: Engine, rid: str, ids: list[int], proposer: str, k: int) -> list[int]:
    """Tokens the real engine emits in each step of one greedy request (streamed per step). A request that
    stops at EOS may end with a step that emits only the (unreturned) EOS: that empty step is dropped."""
    steps: list[int] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def sink(out) -> None:
        if isinstance(out, BaseException):
            errors.append(out)
            done.set()
            return
        steps.append(len(out.new_token_ids))
        if out.finished:
            done.set()

    engine.submit(GenRequest(rid, ids, max_tokens=MAX_TOKENS, temperature=0.0, proposer=proposer,
                             num_speculative_tokens=k), sink)
    assert done.wait(120), "engine did not finish"
    assert not errors, errors
    assert all(steps[:-1])
    return steps[:-1] if steps and steps[-1] == 0 else steps


# ------------------------------------------------------------------------ the arithmetic

def test_streak_runs_closed_form():
    # hits at 0,1,2 then a miss, then hits to the end: streaks 3,2,1,0,3,2,1
    match = [1, 1, 1, 0, 1, 1, 1]
    assert streak_runs(match, max_k=8) == [4, 3, 2, 1, 3, 2, 1]
    # max_k caps, and so does the room left (a step at i drafts at most n - i - 1 tokens)
    assert streak_runs(match, max_k=2) == [3, 3, 2, 1, 3, 2, 1]
    assert streak_runs([1, 1, 1, 1], max_k=8) == [4, 3, 2, 1]
    assert streak_runs([0, 0], max_k=3) == [1, 1]


def test_ngram_runs_on_a_copied_span():
    prompt = [10, 11, 12, 13, 14, 15, 16, 17, 99]
    output = [12, 13, 14, 15, 16, 50, 51]  # copies 12..16 from the prompt, then new text
    runs = ngram_runs(prompt, output, max_k=8, min_n=2, max_n=4)
    # position 0: last bigram (17, 99) never seen -> nothing drafted; position 1: suffix (99, 12) unseen,
    # (12)? min_n=2 -> the suffix bigram (99,12) has no earlier match -> 1
    assert runs[0] == 1 and runs[1] == 1
    # position 2: context ends (12, 13) -> drafts 14, 15, 16, 17 ...: 14, 15, 16 match, 17 != 50
    assert runs[2] == 1 + 3
    assert runs[-1] == 1 and len(runs) == len(output)
    # each run agrees with the lookup done by hand
    seq = np.array(prompt + output)
    for i, r in enumerate(runs):
        k = max(0, min(8, len(output) - i - 1))
        d = ngram_lookup(seq[: len(prompt) + i], k, 2, 4) if k else seq[:0]
        a = 0
        while a < len(d) and d[a] == output[i + a]:
            a += 1
        assert r == 1 + a


def test_records_are_well_formed(recorded):
    assert len(recorded) >= 5  # a translation prompt may stop early, but not be empty for most classes
    for item, r in recorded:
        assert r["class"] == item.category and r["prompt"] == item.prompt
        assert r["max_k"] == MAX_K and r["temperature"] == 0.0
        n = r["output_tokens"]
        assert 1 <= n <= MAX_TOKENS and r["prompt_tokens"] > 0
        assert set(r["accept_runs"]) == {"ngram", "draft"}
        for runs in r["accept_runs"].values():
            assert len(runs) == n
            assert all(1 <= x <= min(MAX_K + 1, n - i) for i, x in enumerate(runs))


# ------------------------------------------------------------------------ against the real engine

def test_output_is_the_targets_greedy_output(engine, recorded):
    """The recorded output is what the engine returns with speculation off, and it is the target's own
    greedy continuation (checked by an independent, cache-free teacher-forced forward of the target)."""
    items = [it for it, _ in recorded]
    ids = [engine.encode(engine.apply_chat_template(it.chat_messages())) for it in items]
    outs = greedy_outputs(engine, ids, MAX_TOKENS, prefix="check")
    assert [len(o) for o in outs] == [r["output_tokens"] for _, r in recorded]
    for (_, r), p, o in zip(recorded, ids, outs, strict=True):
        assert len(p) == r["prompt_tokens"]
        assert teacher_forced_predictions(engine.model, [(p, o)])[0] == o
        # stopped early only at EOS
        if len(o) < MAX_TOKENS:
            assert teacher_forced_predictions(engine.model, [(p, o + [0])])[0][-1] in engine.tokenizer.eos_token_ids


@pytest.mark.parametrize("proposer", ["ngram", "draft"])
def test_every_engine_step_emits_the_recorded_run(engine, recorded, proposer):
    """With gamma = max_k, every step of the real engine (not only the first) emits exactly run[position]."""
    checked = 0
    for item, r in recorded:
        ids = engine.encode(engine.apply_chat_template(item.chat_messages()))
        runs = r["accept_runs"][proposer]
        pos = 0
        for emitted in steps_emitted(engine, f"full-{proposer}-{r['id']}", ids, proposer, MAX_K):
            assert emitted == runs[pos], (r["id"], pos)
            pos += emitted
            checked += 1
        assert pos == r["output_tokens"]
    assert checked >= 40


@pytest.mark.parametrize("proposer", ["ngram", "draft"])
def test_smaller_gamma_emits_min_run_gamma_plus_one(engine, recorded, proposer):
    """The replay rule: a step with gamma <= max_k emits min(run, gamma + 1)."""
    gamma = 2
    for item, r in recorded[:3]:
        ids = engine.encode(engine.apply_chat_template(item.chat_messages()))
        runs = r["accept_runs"][proposer]
        pos = 0
        for emitted in steps_emitted(engine, f"g{gamma}-{proposer}-{r['id']}", ids, proposer, gamma):
            assert emitted == min(runs[pos], gamma + 1), (r["id"], pos)
            pos += emitted


def test_prompts_that_do_not_fit_are_skipped(engine, draft, caplog):
    """A prompt longer than the context is skipped with a warning (a chunk of only such prompts too)."""
    long_item = PromptItem("summarize", "word " * 1200)
    short = one_per_class()[4]
    opts = RecordOptions(max_k=4, max_tokens=8, batch=1)
    recs = list(record_tiny([long_item, short], engine, draft, opts))
    assert [r["id"] for r in recs] == ["p0001-math"]
    assert "exceed the context" in caplog.text


# ------------------------------------------------------------------------ the CLI

def test_cli_writes_a_trace(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"category": c, "prompt": f"Say something about {c}."})
                                 for c in ("chat", "code")) + "\n")
    out = tmp_path / "t.jsonl"
    rc = main(["trace", "record", "--prompts", str(prompts), "--out", str(out), "--max-k", "4",
               "--max-tokens", "12", "--no-progress"])
    assert rc == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["class"] for r in recs] == ["chat", "code"][: len(recs)] and recs
    assert all(r["max_k"] == 4 and len(r["accept_runs"]["draft"]) == r["output_tokens"] for r in recs)
    assert "requests written" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "needle"), [
    (["--max-k", "0"], "--max-k must be >= 1"),
    (["--limit", "0"], "--limit must be >= 1"),
    (["--prompts", "/nonexistent/p.jsonl"], "prompt file not found"),
    (["--url", "http://127.0.0.1:9", "--draft", "x"], "cannot be combined with --url"),
])
def test_cli_errors(tmp_path, capsys, argv, needle):
    rc = main(["trace", "record", "--out", str(tmp_path / "t.jsonl"), "--no-progress", *argv])
    assert rc == 2
    assert needle in capsys.readouterr().err


def test_cli_unreachable_endpoint_is_a_clear_error(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(["trace", "record", "--url", f"http://127.0.0.1:{port}", "--limit", "1",
               "--out", str(tmp_path / "t.jsonl"), "--no-progress"])
    assert rc == 2
    assert "cannot reach" in capsys.readouterr().err


# ------------------------------------------------------------------------ any OpenAI endpoint

@pytest.mark.integration
def test_endpoint_recording_against_a_real_worker(engine, recorded):
    """The reference worker over HTTP (speculation off) as the endpoint. Its greedy text is the engine's
    greedy output decoded, so the endpoint records must equal n-gram runs computed on that text re-tokenised;
    where the tokens round-trip (the tiny model often emits "\n" "\n" where the tokenizer would write "\n\n")
    they equal the in-process recording."""
    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    items = [it for it, _ in recorded]
    tok = engine.tokenizer
    with ServerThread(build_app(engine, WorkerSettings(served_model_name="tiny"))) as srv:
        recs = list(record_endpoint(items, srv.url + "/v1/", "tiny", tok,
                                    RecordOptions(max_k=MAX_K, max_tokens=MAX_TOKENS), concurrency=2))
        with pytest.raises(RequestError, match="answered 404.*model_not_found"):
            list(record_endpoint(items[:1], srv.url, "no-such-model", tok, RecordOptions(max_tokens=4)))
    ids = [tok.encode(tok.apply_chat_template(it.chat_messages())) for it in items]
    outs = greedy_outputs(engine, ids, MAX_TOKENS, prefix="endpoint")
    assert len(recs) == len(recorded)
    round_trips = 0
    for (item, local), remote, p, out in zip(recorded, recs, ids, outs, strict=True):
        assert remote["class"] == item.category and set(remote["accept_runs"]) == {"ngram"}
        assert remote["prompt_tokens"] == local["prompt_tokens"]  # the worker's usage.prompt_tokens
        retok = tok.encode(tok.decode(out))
        assert remote["output_tokens"] == len(retok)
        assert remote["accept_runs"]["ngram"] == ngram_runs(p, retok, MAX_K)
        if retok == out:
            assert remote["accept_runs"]["ngram"] == local["accept_runs"]["ngram"]
            round_trips += 1
    assert round_trips >= 1
