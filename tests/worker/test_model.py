"""The plain-torch tiny Llama against transformers' LlamaForCausalLM, and its ragged KV-cache forward."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from adaptspec.errors import ModelLoadError
from adaptspec.worker.model import LlamaConfig, TinyLlama

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory) -> Path:
    """A random GQA model with untied embeddings, saved in HF format (exercises the paths the pair doesn't)."""
    cfg = LlamaConfig(vocab_size=301, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                      tie_word_embeddings=False, rope_theta=500.0)
    m = TinyLlama(cfg)
    m.init_weights(seed=3)
    d = tmp_path_factory.mktemp("rand")
    m.save_pretrained(d, dtype=torch.float32)
    return d


@pytest.mark.parametrize("name", ["tiny-target", "tiny-draft", "random"])
def test_logits_match_transformers(name, random_dir):
    from transformers import LlamaForCausalLM

    path = random_dir if name == "random" else ASSETS / name
    ours = TinyLlama.from_pretrained(path)
    ref = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(0, ours.cfg.vocab_size, (2, 45), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected = ref(ids).logits
        dense = ours.forward_dense(ids)
        cache = ours.new_cache(4, 64)
        ragged = ours.forward([ids[0].tolist(), ids[1, :30].tolist()], [3, 1], [0, 0], cache)
    torch.testing.assert_close(dense, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ragged[:45], expected[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ragged[45:], expected[1, :30], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("slots", [[4, 0, 2], [11, 0, 5]], ids=["compact-slots", "scattered-slots"])
def test_ragged_cached_forward_equals_dense_and_rolls_back(slots):
    m = TinyLlama.from_pretrained(ASSETS / "tiny-target")
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, m.cfg.vocab_size, (n,), generator=g).tolist() for n in (20, 7, 33)]
    with torch.inference_mode():
        full = [m.forward_dense(torch.tensor([s]))[0] for s in seqs]
        cache = m.new_cache(12, 64)
        # prefill different prefixes in one batch
        cut = [12, 1, 30]
        m.forward([s[:c] for s, c in zip(seqs, cut, strict=True)], slots, [0, 0, 0], cache)
        # feed garbage ("rejected drafts") at the next positions, then roll back by re-feeding from `cut`
        junk = [[5, 6, 7], [8], [9, 10]]
        m.forward(junk, slots, cut, cache)
        out = m.forward([s[c:] for s, c in zip(seqs, cut, strict=True)], slots, cut, cache)
        rows = torch.tensor([len(s) - c for s, c in zip(seqs, cut, strict=True)]).cumsum(0) - 1
        last = m.forward([s[c:] for s, c in zip(seqs, cut, strict=True)], slots, cut, cache, logit_rows=rows)
    offs = 0
    for s, c, f in zip(seqs, cut, full, strict=True):
        n = len(s) - c
        torch.testing.assert_close(out[offs:offs + n], f[c:], atol=1e-4, rtol=1e-4)
        offs += n
    torch.testing.assert_close(last, torch.stack([f[-1] for f in full]), atol=1e-4, rtol=1e-4)


def test_bad_inputs_raise_clearly(tmp_path):
    m = TinyLlama.from_pretrained(ASSETS / "tiny-draft")
    with pytest.raises(ModelLoadError, match="config.json"):
        TinyLlama.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        m.new_cache(1, m.cfg.max_position_embeddings + 1)
    cache = m.new_cache(1, 8)
    with pytest.raises(ValueError, match="cache length"):
        m.forward([[1, 2, 3]], [0], [6], cache)
    with pytest.raises(ValueError, match="at least one token"):
        m.forward([[]], [0], [0], cache)


def test_config_and_param_count():
    m = TinyLlama.from_pretrained(ASSETS / "tiny-target")
    assert m.cfg.head_dim in (32, 64, 80, 96, 112, 128)
    assert sum(p.numel() for p in m.parameters()) == m.cfg.num_params
    d = TinyLlama.from_pretrained(ASSETS / "tiny-draft")
    assert d.cfg.vocab_size == m.cfg.vocab_size and d.cfg.head_dim in (32, 64, 80, 96, 112, 128)
    size = sum(f.stat().st_size for f in ASSETS.rglob("*") if f.is_file())
    assert size <= 30 * 2**20
