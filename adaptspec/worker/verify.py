"""Fast-path verifier: batched, distribution-exact speculative rejection sampling over a ragged batch.

Implements the acceptance rule of Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative
Decoding") and Chen et al. 2023 ("Accelerating LLM Decoding with Speculative Sampling"): draft token ``x``
drawn from ``q`` at a position whose target distribution is ``p`` is accepted with probability
``min(1, p(x) / q(x))``; at the first rejection the emitted token is drawn from ``norm(max(0, p - q))``; if all
``k`` drafts are accepted a bonus token is drawn from the target's next distribution. The emitted sequence is
distributed exactly as sampling from the target alone.

Layout (vLLM v1 style, ragged batches flattened)::

    num_draft_tokens  k = [k_0, ..., k_{B-1}]        (k_i >= 0; a list avoids any device sync)
    draft_token_ids   [sum(k)]                        request 0's k_0 drafts, then request 1's, ...
                      (a padded [B, max_k] tensor is accepted too; entries past k_i are ignored)
    target_probs      [sum(k) + B, V]                 per request: its k_i draft positions, then its bonus
    draft_probs       [sum(k), V] or None             None = point-mass drafts (n-gram / prompt lookup)
    greedy            None | bool | [B] bools         argmax verification for those requests
    generator         None | torch.Generator | {request_index: torch.Generator}
    returns           int64 [B, max_k + 1]            accepted drafts, then the recovered/bonus token,
                                                      padded with PLACEHOLDER_TOKEN_ID (-1)

Rules, all vectorised over requests and positions (no Python loop on the hot path, no host sync when
``num_draft_tokens`` is a list or CPU tensor):

* accept iff ``p(x) > 0 and q(x) > 0 and u * q(x) <= p(x)`` with float64 uniforms ``u ~ U[0, 1)``; for
  point-mass drafts ``q(x) = 1``. Draft ids outside ``[0, V)`` are rejected (and raise on CPU).
* only the stop position is resampled: request i stops at ``s_i`` = its first rejection (or ``k_i``), and one
  exponential race over that single row picks the emitted token: from ``max(0, p - q)`` when rejected
  (point mass: ``p`` with ``x`` removed), from ``p`` at the bonus position, and from ``p`` when the residual
  has no mass (``p == q``; "no mass" = every entry <= ``MIN_RACE_WEIGHT`` = 2**-123, which also keeps the race
  exact in float32 and can only happen when the rejection itself had probability below ~V * 1e-37).
  Zero-probability tokens can never win; ids are always ``< V``.
* greedy requests: ``x`` accepted iff ``x == argmax(p)``; the emitted token is ``argmax(p)`` at the stop
  position (first index on ties, as ``torch.argmax``), i.e. exactly greedy decoding; no randomness used.

Randomness (conventions shared with :mod:`adaptspec.worker.sampling`): one float64 uniform per draft token
(none for requests with ``k_i = 0``), then one float32 uniform row of length V per sampled request for
the race (kept as ``log U = -E``, ``E ~ Exp(1)``). With a single generator (or None) both are drawn in one call each for the whole batch. With a dict
``{request_index: generator}`` each listed request draws ``torch.rand(k_i, float64)`` (if ``k_i > 0``) and then,
unless greedy, one race row ``torch.rand(V, float32)`` from its own generator, so a seeded request emits the same
tokens whatever else is in the batch; the loop runs over the dict entries only. A request with ``k_i = 0``
therefore consumes exactly what :func:`~adaptspec.worker.sampling.sample_from_probs` would for its row.

``uniforms`` / ``race_noise`` inject the randomness directly (tests; the Triton path consumes the very
same tensors, which is how it is bit-equal to this one).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence

import torch

from adaptspec.worker.sampling import (
    MIN_RACE_WEIGHT,
    Generators,
    draw_race_noise,
    race_noise_from_exponentials,
    race_sample,
)

__all__ = ["PLACEHOLDER_TOKEN_ID", "VerifyInputs", "greedy_verify", "prepare_inputs", "verify_drafts"]

PLACEHOLDER_TOKEN_ID = -1


def _num_tokens_on_host(num_draft_tokens) -> list[int]:
    if isinstance(num_draft_tokens, torch.Tensor):
        if num_draft_tokens.dim() != 1:
            raise ValueError(f"num_draft_tokens must be 1-D, got shape {tuple(num_draft_tokens.shape)}")
        ks = num_draft_tokens.tolist()  # a device sync if it lives on the GPU: pass a list to avoid it
    else:
        ks = list(num_draft_tokens)
    out = []
    for k in ks:
        if isinstance(k, bool) or int(k) != k or k < 0:
            raise ValueError(f"num_draft_tokens entries must be integers >= 0, got {ks}")
        out.append(int(k))
    if not out:
        raise ValueError("num_draft_tokens is empty: a batch needs at least one request")
    return out


class VerifyInputs:
    """Validated, flattened inputs plus the index tensors both implementations use."""

    def __init__(self, target_probs, draft_token_ids, num_draft_tokens, draft_probs, greedy):
        if target_probs.dim() != 2:
            raise ValueError(f"target_probs must be [sum(k) + batch, V], got shape {tuple(target_probs.shape)}")
        ks = _num_tokens_on_host(num_draft_tokens)
        self.ks = ks
        self.draft_start_host = [0, *itertools.accumulate(ks)][:-1]
        self.batch = batch = len(ks)
        self.num_drafts = n = sum(ks)
        self.max_k = max(ks)
        self.vocab = vocab = target_probs.shape[1]
        self.device = device = target_probs.device
        if target_probs.shape[0] != n + batch:
            raise ValueError(
                f"target_probs has {target_probs.shape[0]} rows, expected sum(num_draft_tokens) + batch = "
                f"{n} + {batch} = {n + batch}")
        if vocab == 0:
            raise ValueError("target_probs has an empty vocabulary dimension")
        self.target_probs = target_probs

        meta = torch.tensor([ks, self.draft_start_host], dtype=torch.int64, device=device)  # one copy
        self.k = meta[0]  # [B]
        self.draft_start = meta[1]  # [B] first flat draft index of each request
        self.target_start = self.draft_start + torch.arange(batch, device=device)  # [B] first target row

        if not isinstance(draft_token_ids, torch.Tensor):
            raise TypeError(f"draft_token_ids must be a tensor, got {type(draft_token_ids)!r}")
        ids = draft_token_ids.to(device=device)
        if ids.numel() == 0:
            ids = ids.to(torch.int64)  # an empty list of drafts (torch.tensor([]) is float32) is fine
        if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
            raise TypeError(f"draft_token_ids must be an integer tensor, got {ids.dtype}")
        if ids.dim() == 2:
            if ids.shape[0] != batch or ids.shape[1] < self.max_k:
                raise ValueError(
                    f"padded draft_token_ids must be [batch={batch}, >= max_k={self.max_k}], got {tuple(ids.shape)}")
            flat_pos = torch.tensor([i * ids.shape[1] + j for i, k in enumerate(ks) for j in range(k)],
                                    dtype=torch.int64, device=device)
            ids = ids.reshape(-1)[flat_pos]
        elif ids.dim() != 1 or ids.shape[0] != n:
            raise ValueError(
                f"draft_token_ids must be flat [sum(num_draft_tokens) = {n}] (or padded [batch, max_k]), "
                f"got shape {tuple(draft_token_ids.shape)}")
        ids = ids.to(torch.int64)
        if ids.device.type == "cpu" and n and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise ValueError(f"draft_token_ids must lie in [0, V={vocab}), got min {int(ids.min())} "
                             f"max {int(ids.max())}")
        self.draft_token_ids = ids.contiguous()

        if draft_probs is not None:
            if draft_probs.shape != (n, vocab):
                raise ValueError(
                    f"draft_probs must be [sum(num_draft_tokens) = {n}, V = {vocab}], got {tuple(draft_probs.shape)}")
            draft_probs = draft_probs.to(device=device)
        self.draft_probs = draft_probs

        # greedy: None / bool / per-request. Host copy when known without a sync (needed by the dict path).
        self.greedy_host: list[bool] | None
        if greedy is None or isinstance(greedy, bool):
            self.greedy_host = [bool(greedy)] * batch
        elif isinstance(greedy, torch.Tensor) and greedy.device.type != "cpu":
            self.greedy_host = None
        else:
            vals = greedy.reshape(-1).tolist() if isinstance(greedy, torch.Tensor) else list(greedy)
            if len(vals) != batch:
                raise ValueError(f"greedy must have one entry per request ({batch}), got {len(vals)}")
            self.greedy_host = [bool(v) for v in vals]
        if self.greedy_host is not None:
            self.greedy = torch.tensor(self.greedy_host, dtype=torch.bool, device=device)
        else:
            self.greedy = greedy.to(torch.bool).reshape(-1)
            if self.greedy.shape != (batch,):
                raise ValueError(f"greedy must have one entry per request ({batch}), got {tuple(greedy.shape)}")
        self.all_greedy = self.greedy_host is not None and all(self.greedy_host)
        self.any_greedy = self.greedy_host is None or any(self.greedy_host)

    def draw(self, generator: Generators) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Float64 uniforms ``[sum(k)]`` and race noise ``log U`` ``[B, V]`` (None when every request is greedy)."""
        n, device = self.num_drafts, self.device
        per_req: Mapping[int, torch.Generator] = generator if isinstance(generator, Mapping) else {}
        shared = None if per_req else generator
        if shared is not None and not isinstance(shared, torch.Generator):
            raise TypeError(f"generator must be None, a torch.Generator or a dict of them, got {type(shared)!r}")
        for i in per_req:
            if not 0 <= int(i) < self.batch:
                raise ValueError(f"generator dict key {i!r} is not a request index in [0, {self.batch})")
        greedy_host = self.greedy_host
        if per_req and greedy_host is None:
            greedy_host = self.greedy.tolist()  # the dict path needs it on the host anyway

        if per_req and len(per_req) == self.batch:
            u = torch.empty(n, dtype=torch.float64, device=device)
        elif n:
            u = torch.rand(n, dtype=torch.float64, device=device, generator=shared)
        else:
            u = torch.empty(0, dtype=torch.float64, device=device)
        # Per seeded request (one generator each): its k_i uniforms, then its race row; greedy requests and
        # requests without drafts draw no uniforms, greedy ones no race row either.
        for i, gen in per_req.items():
            k, start = self.ks[int(i)], self.draft_start_host[int(i)]
            if k and not greedy_host[int(i)]:
                u[start:start + k] = torch.rand(k, dtype=torch.float64, device=device, generator=gen)
        race = None
        if not self.all_greedy:
            race = draw_race_noise(self.batch, self.vocab, device, generator, skip_rows=greedy_host)
        return u, race


def prepare_inputs(target_probs, draft_token_ids, num_draft_tokens, draft_probs=None, greedy=None) -> VerifyInputs:
    return VerifyInputs(target_probs, draft_token_ids, num_draft_tokens, draft_probs, greedy)


def _verify_torch(inp: VerifyInputs, uniforms: torch.Tensor, race: torch.Tensor | None) -> torch.Tensor:
    batch, max_k, n, vocab, device = inp.batch, inp.max_k, inp.num_drafts, inp.vocab, inp.device
    p_all = inp.target_probs
    x = inp.draft_token_ids  # [N]
    x_ok = (x >= 0) & (x < vocab)
    x_c = x.clamp(0, vocab - 1)

    # --- accept / reject every draft position at once, in a padded [B, max_k] view --------------------
    # Position j of request b: flat draft d_idx[b, j], target row t_idx[b, j]; positions j >= k_b are
    # clamped to a real row and count as rejected, so the accepted prefix stops at k_b.
    j = torch.arange(max_k, device=device)
    valid = j < inp.k.unsqueeze(1)  # [B, max_k]
    d_idx = (inp.draft_start.unsqueeze(1) + j).clamp_(max=max(n - 1, 0))
    t_idx = (inp.target_start.unsqueeze(1) + j).clamp_(max=p_all.shape[0] - 1)
    x_pad, xc_pad = x[d_idx], x_c[d_idx]  # [B, max_k]
    p_x = p_all[t_idx, xc_pad].to(torch.float64)
    accepted = valid & x_ok[d_idx] & (p_x > 0)
    if inp.draft_probs is not None:
        q_x = inp.draft_probs[d_idx, xc_pad].to(torch.float64)
        accepted &= (q_x > 0) & (uniforms[d_idx] * q_x <= p_x)
    else:
        accepted &= uniforms[d_idx] <= p_x  # q(x) = 1
    row_argmax = None
    if inp.any_greedy:
        row_argmax = p_all.argmax(dim=-1)  # [sum(k) + B], first index on ties
        accepted_greedy = valid & x_ok[d_idx] & (x_pad == row_argmax[t_idx])
        accepted = torch.where(inp.greedy.unsqueeze(1), accepted_greedy, accepted)
    num_accepted = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)  # [B] = stop position s_i
    rejected = num_accepted < inp.k  # [B] False: all accepted, stop at the bonus row

    # --- one race per request, on its stop row only ---------------------------------------------------
    stop_row = inp.target_start + num_accepted  # [B]
    p_stop = p_all.index_select(0, stop_row).to(torch.float32)  # [B, V] (a copy)
    stop_draft = (inp.draft_start + num_accepted).clamp(max=max(n - 1, 0))  # [B] (garbage when not rejected)
    if inp.draft_probs is not None and n:
        residual = inp.draft_probs.index_select(0, stop_draft).to(torch.float32)  # q, a fresh copy
        torch.sub(p_stop, residual, out=residual).clamp_min_(0.0)  # max(0, p - q), in place
        use_residual = rejected & (residual.amax(dim=-1) > MIN_RACE_WEIGHT)  # else p: bonus row, or p == q
        dist = torch.where(use_residual.unsqueeze(1), residual, p_stop)
    elif n:
        # Point mass at x: p with x removed (out-of-range x has nothing to remove). If that leaves no
        # mass (p is all on x), the value at x goes back, which is exactly the fall-back to p.
        x_stop = x_c[stop_draft].unsqueeze(1)  # [B, 1]
        p_at_x = p_stop.gather(1, x_stop)
        dist = p_stop.scatter(1, x_stop, torch.zeros_like(p_at_x))
        no_mass = dist.amax(dim=-1, keepdim=True) <= MIN_RACE_WEIGHT
        keep = ~(rejected & x_ok[stop_draft]).unsqueeze(1) | no_mass
        dist.scatter_(1, x_stop, torch.where(keep, p_at_x, torch.zeros_like(p_at_x)))
    else:
        dist = p_stop
    if race is None:  # every request greedy
        token = row_argmax[stop_row]
    else:
        token = race_sample(dist, race)
        if row_argmax is not None:
            token = torch.where(inp.greedy, row_argmax[stop_row], token)

    # --- assemble [B, max_k + 1] ----------------------------------------------------------------------
    out = torch.full((batch, max_k + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=device)
    out[:, :max_k] = torch.where(j < num_accepted.unsqueeze(1), x_pad,
                                 torch.full((), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=device))
    out.scatter_(1, num_accepted.unsqueeze(1), token.unsqueeze(1))
    return out


def _triton_available(device: torch.device) -> bool:
    # Opt-in until the kernel's bit-equality test has run on a real GPU (it has only run under
    # TRITON_INTERPRET): ADAPTSPEC_VERIFY_TRITON=1 turns the automatic choice on.
    if device.type != "cuda" or os.environ.get("ADAPTSPEC_VERIFY_TRITON", "0") != "1":
        return False
    try:
        from adaptspec.worker import _verify_triton  # noqa: F401
    except ImportError:
        return False
    return True


def verify_drafts(target_probs: torch.Tensor, draft_token_ids: torch.Tensor,
                  num_draft_tokens: Sequence[int] | torch.Tensor, draft_probs: torch.Tensor | None = None,
                  greedy=None, generator: Generators = None, *, use_triton: bool | None = None,
                  uniforms: torch.Tensor | None = None, race_noise: torch.Tensor | None = None) -> torch.Tensor:
    """Verify a ragged batch of drafts; returns int64 ``[B, max_k + 1]`` padded with -1 (see module doc).

    ``use_triton``: None = the Triton kernel on CUDA when triton imports and the environment sets
    ``ADAPTSPEC_VERIFY_TRITON=1``, else torch; True forces it (error if unavailable), False forces torch.
    ``uniforms`` (float64 ``[sum(k)]``) and ``race_noise`` (``Exp(1)`` samples ``E``, float32 ``[B, V]``)
    replace the draws from ``generator`` when given.
    """
    inp = prepare_inputs(target_probs, draft_token_ids, num_draft_tokens, draft_probs, greedy)
    if uniforms is None or (race_noise is None and not inp.all_greedy):
        drawn_u, drawn_race = inp.draw(generator)
    else:
        drawn_u, drawn_race = None, None
    if uniforms is not None:
        uniforms = uniforms.to(device=inp.device, dtype=torch.float64).reshape(-1)
        if uniforms.shape != (inp.num_drafts,):
            raise ValueError(f"uniforms must be [sum(k) = {inp.num_drafts}], got {tuple(uniforms.shape)}")
    else:
        uniforms = drawn_u
    if race_noise is not None:
        if race_noise.shape != (inp.batch, inp.vocab):
            raise ValueError(f"race_noise must be [B = {inp.batch}, V = {inp.vocab}], got {tuple(race_noise.shape)}")
        race = race_noise_from_exponentials(race_noise.to(device=inp.device))
    else:
        race = drawn_race

    if use_triton is None:
        use_triton = _triton_available(inp.device)
    if use_triton:
        if inp.device.type != "cuda":
            raise RuntimeError("use_triton=True needs CUDA tensors")
        from adaptspec.worker._verify_triton import verify_triton

        return verify_triton(inp, uniforms, race)
    return _verify_torch(inp, uniforms, race)


def greedy_verify(logits: torch.Tensor, drafts: list[list[int]], ks: list[int]) -> list[list[int]]:
    """Greedy verification straight from the logits: `logits` holds, per request, its k_i draft positions
    then its bonus position ([sum(k) + B, V]). Request i accepts the longest prefix of its drafts equal to
    the argmax at each position and then emits the argmax at the first mismatch (or the bonus position).
    The same tokens as `verify_drafts(logits_to_probs(logits, 0.0).probs, ..., greedy=True)` (argmax, first
    index on ties, in both), without building probabilities."""
    am = logits.argmax(dim=-1).tolist()
    out, o = [], 0
    for d, k in zip(drafts, ks, strict=True):
        a = 0
        while a < k and d[a] == am[o + a]:
            a += 1
        out.append(am[o:o + a + 1])
        o += k + 1
    if o != len(am):
        raise ValueError(f"logits has {len(am)} rows, expected sum(k) + B = {o}")
    return out
