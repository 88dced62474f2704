"""Triton kernel for :func:`adaptspec.worker.verify.verify_drafts` (CUDA only; optional).

One program per request. Phase 1 walks the request's drafts in order until the first rejection (float64
``u * q(x) <= p(x)``, or ``x == argmax(p)`` for greedy requests) and writes the accepted ids. Phase 2 makes one
pass over the stop row in blocks of ``BLOCK_V``, tracking three running first-index argmaxes at once: the race
over the residual ``max(0, p - q)`` (point mass: ``p`` with ``x`` removed), the race over ``p`` (the fallback
when the residual has no mass), and plain ``argmax(p)`` (greedy). It consumes the very same float64 uniforms
and race noise ``log U`` as the torch path and evaluates the same float32/float64 expressions (the race
score ``w / log U`` with the correctly rounded ``tl.div_rn``, as torch divides; no mask), so the two are
bit-equal; the torch path (``verify._verify_torch``) is the reference.

Importing this module raises ImportError when triton is missing; ``verify_drafts`` then uses torch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from adaptspec.worker.sampling import MIN_RACE_WEIGHT

__all__ = ["verify_triton"]


@triton.jit
def _row_argmax(row_ptr, V, BLOCK_V: tl.constexpr):
    """First index of the maximum of one row (like torch.argmax), as int64."""
    offs = tl.arange(0, BLOCK_V)
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.zeros((), tl.int64)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + offs
        p = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m = tl.max(p, axis=0)
        idx = tl.argmax(p, axis=0, tie_break_left=True).to(tl.int64) + v0
        better = m > best
        best = tl.where(better, m, best)
        best_idx = tl.where(better, idx, best_idx)
    return best_idx


@triton.jit
def _accept_drafts(target_ptr, t_stride, q_ptr, q_stride, ids_ptr, u_ptr, out_row, k, d0, t0, is_greedy, V,
                   HAS_Q: tl.constexpr, BLOCK_V: tl.constexpr):
    """Phase 1 of one request (drafts d0 .. d0 + k - 1, target rows from t0): accept its drafts in order until
    the first rejection, writing the accepted ids to `out_row`; returns how many were accepted (int64)."""
    s = tl.zeros((), tl.int64)  # stop position = number accepted
    running = k > 0
    while running:
        x = tl.load(ids_ptr + d0 + s)
        x_ok = (x >= 0) & (x < V)
        xc = tl.minimum(tl.maximum(x, 0), V - 1)
        row = target_ptr + (t0 + s) * t_stride
        if is_greedy:
            acc = x_ok & (x == _row_argmax(row, V, BLOCK_V))
        else:
            p_x = tl.load(row + xc).to(tl.float64)
            u = tl.load(u_ptr + d0 + s)
            if HAS_Q:
                q_x = tl.load(q_ptr + (d0 + s) * q_stride + xc).to(tl.float64)
                acc = x_ok & (p_x > 0) & (q_x > 0) & (u * q_x <= p_x)
            else:
                acc = x_ok & (p_x > 0) & (u <= p_x)  # q(x) = 1: u * 1.0 == u exactly
        tl.store(out_row + s, x, mask=acc)
        s = s + acc.to(tl.int64)
        running = acc & (s < k)
    return s


@triton.jit
def _verify_kernel(target_ptr, t_stride, q_ptr, q_stride, ids_ptr, k_ptr, d_start_ptr, greedy_ptr,
                   u_ptr, noise_ptr, noise_stride, out_ptr, o_stride, V,
                   MIN_WEIGHT: tl.constexpr, HAS_Q: tl.constexpr, HAS_RACE: tl.constexpr,
                   BLOCK_V: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    k = tl.load(k_ptr + i)  # int64
    d0 = tl.load(d_start_ptr + i)  # first flat draft index
    t0 = d0 + i  # first target row
    is_greedy = tl.load(greedy_ptr + i) != 0
    out_row = out_ptr + i * o_stride

    # ---- phase 1: accept drafts until the first rejection ------------------------------------------------
    s = _accept_drafts(target_ptr, t_stride, q_ptr, q_stride, ids_ptr, u_ptr, out_row, k, d0, t0, is_greedy, V,
                       HAS_Q, BLOCK_V)  # stop position = number accepted

    # ---- phase 2: one pass over the stop row -------------------------------------------------------------
    rejected = s < k
    p_row = target_ptr + (t0 + s) * t_stride
    q_row = q_ptr + (d0 + s) * q_stride
    if HAS_Q:  # noqa: SIM108 (constexpr branches, resolved at compile time)
        x_stop = -1
    else:
        x_stop = tl.load(ids_ptr + d0 + s, mask=rejected, other=-1)
    q_len = tl.where(rejected, V, 0)  # the draft row only exists (and is read) at a rejection
    offs = tl.arange(0, BLOCK_V)
    best_r = tl.full((), float("inf"), tl.float32)
    idx_r = tl.zeros((), tl.int64)
    best_p = tl.full((), float("inf"), tl.float32)
    idx_p = tl.zeros((), tl.int64)
    best_g = tl.full((), float("-inf"), tl.float32)
    idx_g = tl.zeros((), tl.int64)
    has_mass = s < 0  # False
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + offs
        in_v = cols < V
        p = tl.load(p_row + cols, mask=in_v, other=0.0).to(tl.float32)
        # greedy / all-greedy: first index of max(p)
        pg = tl.where(in_v, p, float("-inf"))
        m = tl.max(pg, axis=0)
        idx = tl.argmax(pg, axis=0, tie_break_left=True).to(tl.int64) + v0
        better = m > best_g
        best_g = tl.where(better, m, best_g)
        idx_g = tl.where(better, idx, idx_g)
        if HAS_RACE:
            if HAS_Q:
                q = tl.load(q_row + cols, mask=cols < q_len, other=0.0).to(tl.float32)
                res = tl.maximum(p - q, 0.0)
            else:
                res = tl.where(cols == x_stop, 0.0, p)
            noise = tl.load(noise_ptr + i * noise_stride + cols, mask=in_v, other=-1.0)  # log U = -E
            has_mass = has_mass | (tl.max(res, axis=0) > MIN_WEIGHT)
            # argmax w / E == argmin w / (-E). L is finite and < 0, so zero weights score -0.0 and weights
            # above MIN_WEIGHT strictly less: no mask (the torch path, sampling.race_sample, does the same).
            sr = tl.div_rn(res, noise)
            m = tl.min(sr, axis=0)
            idx = tl.argmin(sr, axis=0, tie_break_left=True).to(tl.int64) + v0
            better = m < best_r
            best_r = tl.where(better, m, best_r)
            idx_r = tl.where(better, idx, idx_r)
            sp = tl.div_rn(p, noise)
            m = tl.min(sp, axis=0)
            idx = tl.argmin(sp, axis=0, tie_break_left=True).to(tl.int64) + v0
            better = m < best_p
            best_p = tl.where(better, m, best_p)
            idx_p = tl.where(better, idx, idx_p)
    if HAS_RACE:  # noqa: SIM108 (constexpr branch)
        token = tl.where(is_greedy, idx_g, tl.where(has_mass, idx_r, idx_p))
    else:
        token = idx_g
    tl.store(out_row + s, token)


def verify_triton(inp, uniforms: torch.Tensor, race: torch.Tensor | None) -> torch.Tensor:
    """Run the kernel on prepared inputs (``verify.VerifyInputs``); same output as ``verify._verify_torch``.

    ``race``: float32 ``[B, V]`` race noise ``log U = -E`` (``sampling.draw_race_noise``), None when all greedy.
    """
    batch, vocab, device = inp.batch, inp.vocab, inp.device
    out = torch.full((batch, inp.max_k + 1), -1, dtype=torch.int64, device=device)
    target = inp.target_probs if inp.target_probs.stride(1) == 1 else inp.target_probs.contiguous()
    dummy = torch.zeros(1, dtype=torch.int64, device=device)
    has_q = inp.draft_probs is not None and inp.num_drafts > 0
    q = (inp.draft_probs if inp.draft_probs.stride(1) == 1 else inp.draft_probs.contiguous()) if has_q else target
    ids = inp.draft_token_ids if inp.num_drafts else dummy
    u = uniforms.contiguous() if inp.num_drafts else torch.zeros(1, dtype=torch.float64, device=device)
    has_race = race is not None
    noise = race.contiguous() if has_race else torch.zeros(1, dtype=torch.float32, device=device)
    greedy = inp.greedy.to(torch.int32)
    block_v = max(16, min(triton.next_power_of_2(vocab), 2048))
    _verify_kernel[(batch,)](
        target, target.stride(0), q, q.stride(0), ids, inp.k, inp.draft_start, greedy,
        u, noise, vocab if has_race else 0, out, out.stride(0), vocab,
        MIN_WEIGHT=MIN_RACE_WEIGHT, HAS_Q=has_q, HAS_RACE=has_race, BLOCK_V=block_v,
        num_warps=8 if block_v >= 2048 else 4)
    return out
