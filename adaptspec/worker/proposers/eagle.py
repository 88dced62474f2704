"""EAGLE-style proposer: a small head on the target's own final hidden states (Li et al. 2024, "EAGLE").

The head predicts the target's next final hidden state from the current one and the embedding of the
token that follows it:

    g_{t+1} = head(f_t, embed(x_{t+1}))          f_t: target hidden at position t   [N, h]
    p_draft(x_{t+2}) = softmax(lm_head(g_{t+1}) / T)   (the target's own embedding and lm_head, frozen)

and drafts autoregressively by feeding its own prediction back: g_{t+2} = head(g_{t+1}, embed(d_0)), ...
The network is the attention-free variant (an input projection of [f; e] and one SwiGLU block, ~0.9M
parameters for the shipped tiny target): f_t already summarises the context, and with no attention the head
keeps no per-request cache — the engine hands it the target hidden state of the request's last committed
position (`ProposeInput.hidden`, `[h]`), and everything else is recomputed each step.

Weights: `EagleHead.from_pretrained(dir)` reads `config.json` + `model.safetensors` (the head's own weights
only; embedding and lm_head come from the target at run time). Trained by scripts/train_eagle_head.py.

    head = EagleHead.from_pretrained("adaptspec/assets/tiny-eagle")
    proposer = EagleProposer(head, target_model)
    proposer.propose([ProposeInput("r1", ids, k=4, hidden=h_last)])   # h_last [h]
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from adaptspec.errors import ModelLoadError
from adaptspec.worker.model import RMSNorm, TinyLlama
from adaptspec.worker.proposers.base import Draft, ProposeInput
from adaptspec.worker.sampling import logits_to_probs, sample_from_probs

__all__ = ["EagleConfig", "EagleHead", "EagleProposer"]

MODEL_TYPE = "adaptspec-eagle-mlp"


@dataclass
class EagleConfig:
    hidden_size: int  # the target's hidden size
    vocab_size: int  # the target's vocabulary (for the compatibility check)
    intermediate_size: int = 1024
    rms_norm_eps: float = 1e-5

    @classmethod
    def from_json(cls, d: dict, where: str) -> EagleConfig:
        if d.get("model_type") != MODEL_TYPE:
            raise ModelLoadError(f"{where}: model_type {d.get('model_type')!r} is not {MODEL_TYPE!r}")
        try:
            return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        except TypeError as e:
            raise ModelLoadError(f"{where}: {e}") from e

    def to_json(self) -> dict:
        return {"model_type": MODEL_TYPE, **asdict(self)}


class EagleHead(nn.Module):
    """(f_t [N, h], e_{t+1} [N, h]) -> predicted f_{t+1} [N, h]."""

    def __init__(self, cfg: EagleConfig):
        super().__init__()
        self.cfg = cfg
        h, i = cfg.hidden_size, cfg.intermediate_size
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.mlp_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.w13 = nn.Linear(h, 2 * i, bias=False)
        self.w2 = nn.Linear(i, h, bias=False)
        self.out_norm = RMSNorm(h, cfg.rms_norm_eps)  # the target's features are post-norm too

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def init_weights(self, seed: int = 0) -> None:
        """Small random weights, with the input projection starting as 'copy f_t' (the best zero-effort
        guess of the next hidden state), so training starts from a sensible predictor."""
        g = torch.Generator().manual_seed(seed)
        h = self.cfg.hidden_size
        with torch.no_grad():
            for p in (self.fc.weight, self.w13.weight, self.w2.weight):
                p.normal_(0.0, 0.02, generator=g)
            self.fc.weight[:, :h] += torch.eye(h)
            self.mlp_norm.weight.fill_(1.0)
            self.out_norm.weight.fill_(1.0)

    def forward(self, f: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        x = self.fc(torch.cat([f, e], dim=-1))  # [..., h]
        gate, up = self.w13(self.mlp_norm(x)).chunk(2, dim=-1)  # [..., i] each
        x = x + self.w2(F.silu(gate) * up)
        return self.out_norm(x)

    # ---------------------------------------------------------------- IO
    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> EagleHead:
        from safetensors.torch import load_file

        path = Path(path)
        try:
            d = json.loads((path / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ModelLoadError(f"cannot read {path / 'config.json'}: {e}") from e
        head = cls(EagleConfig.from_json(d, str(path / "config.json")))
        try:
            sd = load_file(str(path / "model.safetensors"))
        except OSError as e:
            raise ModelLoadError(f"cannot read {path / 'model.safetensors'}: {e}") from e
        missing, unexpected = head.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
        if missing or unexpected:
            raise ModelLoadError(f"{path / 'model.safetensors'}: missing {missing}, unexpected {unexpected}")
        return head.to(dtype).eval()

    def save_pretrained(self, path: str | Path, dtype: torch.dtype = torch.float16, info: dict | None = None) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        sd = {k: v.detach().to(dtype).contiguous().clone() for k, v in self.state_dict().items()}
        save_file(sd, str(path / "model.safetensors"), metadata={"format": "pt"})
        cfg = {**self.cfg.to_json(), "torch_dtype": str(dtype).removeprefix("torch."), "num_params": self.num_params}
        (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        if info is not None:
            (path / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")


class EagleProposer:
    """Drafts with an `EagleHead` for every request that uses it, batched: one head pass per draft position."""

    name = "eagle"
    needs_hidden_states = True

    def __init__(self, head: EagleHead, target: TinyLlama):
        c = target.cfg
        if (head.cfg.hidden_size, head.cfg.vocab_size) != (c.hidden_size, c.vocab_size):
            raise ModelLoadError(f"EAGLE head (hidden {head.cfg.hidden_size}, vocab {head.cfg.vocab_size}) does not "
                                 f"fit the target (hidden {c.hidden_size}, vocab {c.vocab_size})")
        self.head = head.to(target.embed.weight.dtype).eval()
        self.embed = target.embed  # shared with the target, never trained here
        self.lm_head = target.lm_head

    @classmethod
    def from_dir(cls, path: str | Path, target: TinyLlama) -> EagleProposer:
        return cls(EagleHead.from_pretrained(path), target)

    def add(self, request_id: str) -> None:
        return None  # no per-request state: the engine passes the hidden state each step

    def remove(self, request_id: str) -> None:
        return None

    @torch.inference_mode()
    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        # a request has no hidden state before its first target forward (prefill): it drafts nothing then
        active = [i for i, it in enumerate(batch) if it.k > 0 and it.hidden is not None]
        drafted: list[list[int]] = [[] for _ in batch]
        probs: list[list[torch.Tensor]] = [[] for _ in batch]
        if active:
            f = torch.stack([batch[i].hidden.reshape(-1) for i in active])  # [A, h]
            tok = torch.tensor([batch[i].token_ids[-1] for i in active])  # [A]
        step = 0
        while active:
            f = self.head(f, self.embed(tok))  # [A, h] predicted next hidden state
            sp = logits_to_probs(self.lm_head(f), [batch[i].sampling.temperature for i in active],
                                 [batch[i].sampling.top_p for i in active])  # probs [A, V]
            gens = {j: batch[i].sampling.generator for j, i in enumerate(active)
                    if batch[i].sampling.generator is not None}
            tok = sample_from_probs(sp.probs, gens or None, greedy=sp.greedy)  # [A]
            for j, (i, t) in enumerate(zip(active, tok.tolist(), strict=True)):
                drafted[i].append(t)
                probs[i].append(sp.probs[j])
            step += 1
            keep = [j for j, i in enumerate(active) if batch[i].k > step]
            if len(keep) < len(active):
                sel = torch.tensor(keep, dtype=torch.long)
                f, tok = f.index_select(0, sel), tok.index_select(0, sel)
                active = [active[j] for j in keep]
        return [Draft(d, torch.stack(p) if p else None) for d, p in zip(drafted, probs, strict=True)]
