"""The EAGLE-style proposer: head IO, batched drafting with the request's distribution, and the engine's
losslessness with it (greedy byte-identity on the shipped tiny target + head; the sampled law of the first
three tokens on a small random target/head pair, 6 sigma per bin, closed form from the target)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engine_requests import V_SMALL, chat_ids, greedy_request, random_model

from adaptspec.errors import ModelLoadError
from adaptspec.worker.engine import Engine, GenRequest
from adaptspec.worker.model import LlamaConfig, TinyLlama
from adaptspec.worker.proposers import EagleConfig, EagleHead, EagleProposer, ProposeInput, SamplingParams
from adaptspec.worker.sampling import logits_to_probs
from adaptspec.worker.tokenizer import Tokenizer

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"
V = V_SMALL
N = 65_536


def random_target(seed: int = 1, scale: float = 3.0) -> TinyLlama:
    return random_model(seed, scale)


def random_head(target: TinyLlama, seed: int = 2) -> EagleHead:
    head = EagleHead(EagleConfig(target.cfg.hidden_size, target.cfg.vocab_size, intermediate_size=48))
    head.init_weights(seed)
    with torch.no_grad():
        head.out_norm.weight.mul_(1.5)  # differ from the target so that drafts are often rejected
    return head.eval()


class NoTokenizer(Tokenizer):
    def __init__(self):
        self.chat_template = None
        self.eos_token_ids = []


def test_head_save_load_roundtrip_and_checks(tmp_path):
    target = random_target()
    head = random_head(target)
    head.save_pretrained(tmp_path, dtype=torch.float32)
    loaded = EagleHead.from_pretrained(tmp_path)
    f, e = torch.randn(5, 32), torch.randn(5, 32)
    assert torch.equal(head(f, e), loaded(f, e))
    other = TinyLlama(LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=1, head_dim=64))
    with pytest.raises(ModelLoadError, match="does not fit the target"):
        EagleProposer(loaded, other)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelLoadError, match="model_type"):
        EagleHead.from_pretrained(tmp_path)


def test_shipped_head_is_small_and_fits_the_tiny_target():
    head = EagleHead.from_pretrained(ASSETS / "tiny-eagle")
    assert head.num_params <= 1_000_000
    target = TinyLlama.from_pretrained(ASSETS / "tiny-target")
    EagleProposer(head, target)  # raises if it does not fit
    assert sum(f.stat().st_size for f in (ASSETS / "tiny-eagle").iterdir()) < 5 * 2**20


@torch.inference_mode()
def test_drafts_follow_the_head_autoregressively_with_the_requests_distribution():
    target = random_target()
    head = random_head(target)
    prop = EagleProposer(head, target)
    hid = torch.randn(3, 32)
    g = torch.Generator().manual_seed(0)
    batch = [ProposeInput("a", [1, 2, 5], 3, SamplingParams(0.0), hid[0]),
             ProposeInput("b", [4], 2, SamplingParams(0.7, 0.9, g), hid[1]),
             ProposeInput("c", [1, 6], 2, SamplingParams(0.0), None)]  # before its first forward
    drafts = prop.propose(batch)
    assert drafts[2].token_ids == [] and drafts[2].probs is None
    assert [len(d.token_ids) for d in drafts[:2]] == [3, 2]
    for item, d in zip(batch[:2], drafts[:2], strict=True):
        f, tok = item.hidden[None], torch.tensor([item.token_ids[-1]])
        for j, t in enumerate(d.token_ids):  # the closed form: head, lm_head, temperature/top_p
            f = head(f, target.embed(tok))
            p = logits_to_probs(target.lm_head(f), item.sampling.temperature, item.sampling.top_p).probs[0]
            assert torch.allclose(d.probs[j], p, atol=1e-6)
            assert p[t] > 0
            if item.sampling.temperature == 0:
                assert t == int(p.argmax())
            tok = torch.tensor([t])
    # batched greedy drafting equals drafting each request alone
    alone = prop.propose([batch[0]])[0]
    assert alone.token_ids == drafts[0].token_ids


def test_greedy_output_is_identical_with_and_without_eagle_for_several_gammas():
    engine = Engine.tiny(max_batch=4, max_model_len=512)
    assert "eagle" in engine.proposers
    prompts = ["Complete this Python function.\n\ndef add(a, b):\n    return a + b\n",
               "Translate to English:\nLe chat est sur la table.",
               "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."]
    with engine:
        ids = [chat_ids(engine, p) for p in prompts]
        base = engine.generate_sync([greedy_request(f"n{i}", x, max_tokens=40) for i, x in enumerate(ids)])
        for k in (1, 3, 6):
            before = engine.metrics()
            out = engine.generate_sync([greedy_request(f"e{k}-{i}", x, "eagle", k, max_tokens=40)
                                        for i, x in enumerate(ids)])
            after = engine.metrics()
            for i in range(len(ids)):
                assert out[f"e{k}-{i}"] == base[f"n{i}"], (k, i)
            drafted = after.spec_num_draft_tokens - before.spec_num_draft_tokens
            accepted = after.spec_num_accepted_tokens - before.spec_num_accepted_tokens
            assert drafted > 0 and 0 < accepted <= drafted  # the trained head's drafts are accepted


async def test_per_position_stats_are_reported():
    engine = Engine.tiny(max_batch=2, max_model_len=256)
    with engine:
        ids = chat_ids(engine, "Complete this Python function.\n\ndef mul(a, b):\n    return a * b\n")
        last = None
        async for out in engine.generate(greedy_request("s", ids, "eagle", 4, max_tokens=32)):
            last = out
    assert last.drafts > 0 and len(last.tried_per_position) == 4
    assert last.tried_per_position[0] == last.drafts  # position 0 is tried by every draft
    assert sum(last.accepted_per_position) == last.accepted_tokens
    assert all(a <= t for a, t in zip(last.accepted_per_position, last.tried_per_position, strict=True))


def first_three_tokens_law(target: TinyLlama, prompt: list[int], temperature: float, top_p: float) -> torch.Tensor:
    """Closed form: P(x1, x2, x3) = p(x1) p(x2 | x1) p(x3 | x1 x2) under the target, flattened [V^3]."""
    with torch.inference_mode():
        p1 = logits_to_probs(target.forward_dense(torch.tensor([prompt]))[0, -1:], temperature, top_p).probs[0]
        ctx2 = torch.tensor([prompt + [a] for a in range(V)])
        p2 = logits_to_probs(target.forward_dense(ctx2)[:, -1], temperature, top_p).probs  # [V, V]
        ctx3 = torch.tensor([prompt + [a, b] for a in range(V) for b in range(V)])
        p3 = logits_to_probs(target.forward_dense(ctx3)[:, -1], temperature, top_p).probs  # [V*V, V]
    return (p1[:, None, None] * p2[:, :, None] * p3.view(V, V, V)).double().flatten()


def assert_engine_follows(engine: Engine, prompt: list[int], proposer: str, temperature: float, top_p: float,
                          expected: torch.Tensor) -> None:
    """N requests of 4 tokens through the engine; every (x1, x2, x3) bin within 6 sigma + 5 of N p."""
    torch.manual_seed(0)
    with engine:
        reqs = [GenRequest(f"r{i}", prompt, max_tokens=4, temperature=temperature, top_p=top_p,
                           proposer=proposer, num_speculative_tokens=3) for i in range(N)]
        out = engine.generate_sync(reqs, timeout=1200)
        m = engine.metrics()
    counts = torch.zeros(V ** 3, dtype=torch.float64)
    for toks in out.values():
        assert len(toks) == 4
        counts[(toks[0] * V + toks[1]) * V + toks[2]] += 1
    assert 0 < m.spec_num_accepted_tokens < m.spec_num_draft_tokens  # accept and reject both exercised
    mean = N * expected
    bound = 6 * torch.sqrt(N * expected * (1 - expected)) + 5
    assert torch.all(counts[expected == 0] == 0)
    bad = (counts - mean).abs() > bound
    assert not bad.any(), [(int(i), counts[i].item(), mean[i].item()) for i in bad.nonzero().flatten()]


@pytest.mark.slow
@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.8, 0.9)])
def test_sampled_output_follows_the_target_with_eagle(temperature, top_p):
    # step 1 (prefill) has no hidden state to draft from; step 2 drafts 2 tokens with the head (max_tokens 4):
    # x2 and x3 come from draft positions 0 and 1 (or their corrections)
    target = random_target()
    prompt = [3, 7, 3, 7]
    expected = first_three_tokens_law(target, prompt, temperature, top_p)
    assert expected.max() < 0.5 and (expected > 0).sum() > 20  # a non-trivial law
    engine = Engine(target, NoTokenizer(), None, max_batch=512, max_model_len=8, eagle_head=random_head(target))
    assert_engine_follows(engine, prompt, "eagle", temperature, top_p, expected)


@pytest.mark.integration
def test_worker_server_offers_eagle_and_hybrid_with_identical_greedy_text():
    import httpx

    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    engine = Engine.tiny(max_batch=4, max_model_len=512, num_threads=1)
    server = ServerThread(build_app(engine, WorkerSettings(served_model_name="tiny", max_model_len=512))).start()
    try:
        texts, usage = {}, {}
        for proposer in ("none", "eagle", "hybrid"):
            body = {"model": "tiny", "prompt": "def fibonacci(n):\n    if n < 2:\n        return n\n",
                    "max_tokens": 32, "temperature": 0,
                    "speculation": {"proposer": proposer, "num_speculative_tokens": 3, "content_class": "code"}}
            r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text
            texts[proposer] = r.json()["choices"][0]["text"]
            usage[proposer] = r.json()["usage"]["speculative"]
    finally:
        server.stop()
        engine.stop()
    assert texts["eagle"] == texts["none"] and texts["hybrid"] == texts["none"]
    for p in ("eagle", "hybrid"):
        assert usage[p]["draft_tokens"] > 0 and 0 < usage[p]["accepted_tokens"] <= usage[p]["draft_tokens"]


def test_worker_cli_loads_the_shipped_head_by_default_and_checks_eagle_dirs(tmp_path):
    from adaptspec.cli import build_parser
    from adaptspec.cli._worker import build_engine

    engine, _ = build_engine(build_parser().parse_args(["worker", "--max-batch", "2"]))
    assert {"eagle", "hybrid"} <= set(engine.proposers)
    args = build_parser().parse_args(["worker", "--eagle", str(tmp_path / "missing")])
    with pytest.raises(ModelLoadError, match="--eagle"):
        build_engine(args)
    # a custom target gets no built-in head (it was trained for the built-in target only)
    args = build_parser().parse_args(["worker", "--model", str(ASSETS / "tiny-target"), "--max-batch", "2"])
    assert "eagle" not in build_engine(args)[0].proposers
