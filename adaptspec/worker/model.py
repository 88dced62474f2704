"""A tiny Llama decoder in plain torch that reads Hugging Face `LlamaForCausalLM` directories.

What it is: RMSNorm, rotary position embeddings (the HF "rotate half" layout), SwiGLU MLP, optional GQA and
tied embeddings — the same math as `transformers.LlamaForCausalLM`, written directly (the projections are
kept fused: one `wqkv` and one `w13` matmul per layer; loading and saving split/join the HF tensors).

Two forwards:
- `forward_dense(input_ids[B, T])` — causal LM over full sequences (training, tests).
- `forward(token_ids_per_request, slots, start_positions, cache)` — the serving forward over a *ragged*
  batch: request i feeds `token_ids_per_request[i]` at positions `start_positions[i]...` into KV slot
  `slots[i]`; the tokens of all requests are flattened into one `[N, hidden]` matrix for every matmul and
  attention runs as one padded SDPA call with a boolean mask. Returns logits `[sum(len_i), vocab]`
  (or only the rows in `logit_rows`). Rolling back rejected tokens needs nothing here: the caller just keeps
  the request's length and the stale cache entries are overwritten by the next write.

    model = TinyLlama.from_pretrained("adaptspec/assets/tiny-target")
    cache = model.new_cache(max_slots=8, max_len=1024)
    logits = model.forward([[1, 2, 3], [7]], slots=[0, 1], start_positions=[0, 12], cache=cache)
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from adaptspec.errors import ModelLoadError

__all__ = ["KVCache", "LlamaConfig", "TinyLlama"]


@dataclass
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    max_position_embeddings: int = 1024
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, d: dict) -> LlamaConfig:
        if d.get("rope_scaling"):
            raise ModelLoadError(f"rope_scaling {d['rope_scaling']!r} is not supported by the tiny Llama")
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        rope_theta = d.get("rope_theta", (d.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        kw = {k: d[k] for k in known if k in d and d[k] is not None}
        kw["rope_theta"] = float(rope_theta)
        return cls(**kw, extra={k: v for k, v in d.items() if k not in known})

    def to_hf(self, torch_dtype: str = "float16") -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "extra"}
        d.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                  "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
                  "initializer_range": 0.02, "rope_scaling": None, "use_cache": True,
                  "torch_dtype": torch_dtype})
        return d

    @property
    def num_params(self) -> int:
        h, i, hd = self.hidden_size, self.intermediate_size, self.head_dim
        qkv = (self.num_attention_heads + 2 * self.num_key_value_heads) * hd * h
        per_layer = qkv + self.num_attention_heads * hd * h + 3 * h * i + 2 * h
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return per_layer * self.num_hidden_layers + emb + h


class KVCache:
    """Per-layer K and V tensors `[max_slots, kv_heads, max_len, head_dim]`; a slot holds one request."""

    def __init__(self, cfg: LlamaConfig, max_slots: int, max_len: int, dtype=torch.float32, device="cpu"):
        shape = (max_slots, cfg.num_key_value_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.max_slots, self.max_len = max_slots, max_len


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h = cfg.hidden_size
        self.attn_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.wqkv = nn.Linear(h, (self.nh + 2 * self.nkv) * self.hd, bias=False)
        self.wo = nn.Linear(self.nh * self.hd, h, bias=False)
        self.mlp_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.w13 = nn.Linear(h, 2 * cfg.intermediate_size, bias=False)
        self.w2 = nn.Linear(cfg.intermediate_size, h, bias=False)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        # x [..., h] -> q [..., nh, hd], k/v [..., nkv, hd] with rotary applied to q and k
        qkv = self.wqkv(self.attn_norm(x))
        q, k, v = qkv.split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        q = q.unflatten(-1, (self.nh, self.hd))
        k = k.unflatten(-1, (self.nkv, self.hd))
        v = v.unflatten(-1, (self.nkv, self.hd))
        return _rope(q, cos, sin), _rope(k, cos, sin), v

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(gate) * up)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # cos/sin broadcast as [..., 1, hd]; HF layout: rotate the two halves of head_dim
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class TinyLlama(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
        t = torch.arange(cfg.max_position_embeddings, dtype=torch.float64)
        ang = torch.outer(t, inv_freq)
        ang = torch.cat((ang, ang), dim=-1)  # [max_pos, hd]
        self.register_buffer("rope_cos", ang.cos().float(), persistent=False)
        self.register_buffer("rope_sin", ang.sin().float(), persistent=False)

    # ---------------------------------------------------------------- construction / IO
    def init_weights(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, std, generator=g)
                    if name.endswith(("wo.weight", "w2.weight")):
                        p.mul_(1.0 / math.sqrt(2 * self.cfg.num_hidden_layers))

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> TinyLlama:
        from safetensors.torch import load_file

        path = Path(path)
        try:
            hf = json.loads((path / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ModelLoadError(f"cannot read {path / 'config.json'}: {e}") from e
        if hf.get("model_type") != "llama":
            raise ModelLoadError(f"{path / 'config.json'}: model_type {hf.get('model_type')!r} is not 'llama'")
        cfg = LlamaConfig.from_hf(hf)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ModelLoadError(f"no *.safetensors in {path}")
        sd: dict[str, torch.Tensor] = {}
        for f in files:
            sd.update(load_file(str(f)))
        model = cls(cfg)
        model.load_hf_state_dict(sd)
        return model.to(dtype).eval()

    def load_hf_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        def take(name: str) -> torch.Tensor:
            if name not in sd:
                raise ModelLoadError(f"missing tensor {name!r}")
            return sd[name].float()

        own: dict[str, torch.Tensor] = {"embed.weight": take("model.embed_tokens.weight"),
                                        "norm.weight": take("model.norm.weight")}
        for i in range(self.cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            own[f"blocks.{i}.attn_norm.weight"] = take(p + "input_layernorm.weight")
            own[f"blocks.{i}.mlp_norm.weight"] = take(p + "post_attention_layernorm.weight")
            own[f"blocks.{i}.wqkv.weight"] = torch.cat(
                [take(p + f"self_attn.{n}_proj.weight") for n in "qkv"], dim=0)
            own[f"blocks.{i}.wo.weight"] = take(p + "self_attn.o_proj.weight")
            own[f"blocks.{i}.w13.weight"] = torch.cat(
                [take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")], dim=0)
            own[f"blocks.{i}.w2.weight"] = take(p + "mlp.down_proj.weight")
        if not self.cfg.tie_word_embeddings:
            own["lm_head.weight"] = take("lm_head.weight")
        else:
            own["lm_head.weight"] = own["embed.weight"]
        missing, unexpected = self.load_state_dict(own, strict=False)
        if unexpected or [m for m in missing if not m.startswith("rope_")]:
            raise ModelLoadError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")

    def hf_state_dict(self, dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
        c = self.cfg
        out = {"model.embed_tokens.weight": self.embed.weight, "model.norm.weight": self.norm.weight}
        for i, b in enumerate(self.blocks):
            p = f"model.layers.{i}."
            q, k, v = b.wqkv.weight.split([c.num_attention_heads * c.head_dim,
                                           c.num_key_value_heads * c.head_dim,
                                           c.num_key_value_heads * c.head_dim], dim=0)
            gate, up = b.w13.weight.chunk(2, dim=0)
            out.update({p + "input_layernorm.weight": b.attn_norm.weight,
                        p + "post_attention_layernorm.weight": b.mlp_norm.weight,
                        p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                        p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": b.wo.weight,
                        p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                        p + "mlp.down_proj.weight": b.w2.weight})
        if not c.tie_word_embeddings:
            out["lm_head.weight"] = self.lm_head.weight
        return {k: t.detach().to(dtype).contiguous().clone() for k, t in out.items()}

    def save_pretrained(self, path: str | Path, dtype: torch.dtype = torch.float16) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file(self.hf_state_dict(dtype), str(path / "model.safetensors"), metadata={"format": "pt"})
        dname = str(dtype).removeprefix("torch.")
        (path / "config.json").write_text(json.dumps(self.cfg.to_hf(dname), indent=2) + "\n")

    def new_cache(self, max_slots: int, max_len: int) -> KVCache:
        if max_len > self.cfg.max_position_embeddings:
            raise ValueError(f"max_len {max_len} exceeds max_position_embeddings "
                             f"{self.cfg.max_position_embeddings}")
        return KVCache(self.cfg, max_slots, max_len, dtype=self.embed.weight.dtype,
                       device=self.embed.weight.device)

    # ---------------------------------------------------------------- forwards
    def forward_dense(self, input_ids: torch.Tensor, return_hidden: bool = False) -> torch.Tensor:
        """Causal LM over full sequences: input_ids [B, T] -> logits [B, T, V] (or final hidden [B, T, h])."""
        T = input_ids.shape[1]
        x = self.embed(input_ids)  # [B, T, h]
        cos, sin = self.rope_cos[:T, None, :], self.rope_sin[:T, None, :]
        for b in self.blocks:
            q, k, v = b.qkv(x, cos, sin)  # [B, T, heads, hd]
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True, enable_gqa=b.nkv != b.nh)
            x = x + b.wo(o.transpose(1, 2).flatten(2))
            x = b.mlp(x)
        x = self.norm(x)
        return x if return_hidden else self.lm_head(x)

    def forward(self, token_ids: list[list[int]], slots: list[int], start_positions: list[int],
                cache: KVCache, logit_rows: torch.Tensor | list[int] | None = None,
                return_hidden: bool = False):
        """Ragged batched forward with the KV cache; see the module docstring.

        Returns logits `[len(logit_rows) or sum(len_i), V]`, and the final hidden states `[same rows, h]`
        too when `return_hidden`.
        """
        lens = [len(t) for t in token_ids]
        B = len(lens)
        if B == 0 or min(lens) == 0:
            raise ValueError("every request in a forward needs at least one token")
        ends = [s + n for s, n in zip(start_positions, lens, strict=True)]
        Lq, Lk = max(lens), max(ends)
        if Lk > cache.max_len:
            raise ValueError(f"position {Lk} exceeds the cache length {cache.max_len}")
        flat = torch.tensor([t for ts in token_ids for t in ts], dtype=torch.long)
        lens_t = torch.tensor(lens)
        starts_t = torch.tensor(start_positions)
        slots_t = torch.tensor(slots)
        req_of_tok = torch.repeat_interleave(torch.arange(B), lens_t)  # [N]
        offs = torch.arange(flat.numel()) - torch.repeat_interleave(torch.cumsum(lens_t, 0) - lens_t, lens_t)
        pos = starts_t[req_of_tok] + offs  # [N] absolute position of each token
        slot_tok = slots_t[req_of_tok]
        # Attention batch: when the slots are compact, attend over the cache slice [lo, hi) in place (a view,
        # no copy; rows of slots not in this forward get dummy queries); else gather the slots' K/V.
        lo, hi = min(slots), max(slots) + 1
        in_place = hi - lo <= 2 * B
        if in_place:
            rows_b = hi - lo
            row_of_req = slots_t - lo
            row_start = torch.zeros(rows_b, dtype=torch.long).index_put_((row_of_req,), starts_t)
        else:
            rows_b, row_of_req, row_start = B, torch.arange(B), starts_t
        # padded-query layout: token n sits at [row_of_req[req_of_tok[n]], offs[n]]
        pad_index = row_of_req[req_of_tok] * Lq + offs
        qpos = row_start[:, None] + torch.arange(Lq)[None, :]  # [rows, Lq]
        mask = (torch.arange(Lk)[None, None, :] <= qpos[:, :, None])[:, None]  # [rows, 1, Lq, Lk]; key 0 visible
        cos, sin = self.rope_cos[pos][:, None, :], self.rope_sin[pos][:, None, :]

        x = self.embed(flat)  # [N, h]
        for li, b in enumerate(self.blocks):
            q, k, v = b.qkv(x, cos, sin)  # q [N, nh, hd], k/v [N, nkv, hd]
            ck, cv = cache.k[li], cache.v[li]
            ck[slot_tok, :, pos] = k
            cv[slot_tok, :, pos] = v
            if in_place:
                keys, vals = ck[lo:hi, :, :Lk], cv[lo:hi, :, :Lk]  # [rows, nkv, Lk, hd] views
            else:
                keys = ck[:, :, :Lk].index_select(0, slots_t)
                vals = cv[:, :, :Lk].index_select(0, slots_t)
            qp = q.new_zeros(rows_b * Lq, b.nh, b.hd)
            qp[pad_index] = q
            qp = qp.view(rows_b, Lq, b.nh, b.hd).transpose(1, 2)  # [rows, nh, Lq, hd]
            o = F.scaled_dot_product_attention(qp, keys, vals, attn_mask=mask, enable_gqa=b.nkv != b.nh)
            o = o.transpose(1, 2).reshape(rows_b * Lq, b.nh * b.hd)[pad_index]  # [N, nh*hd]
            x = x + b.wo(o)
            x = b.mlp(x)
        if logit_rows is not None:
            x = x[torch.as_tensor(logit_rows, dtype=torch.long)]
        h = self.norm(x)
        logits = self.lm_head(h)
        return (logits, h) if return_hidden else logits
