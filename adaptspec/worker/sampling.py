"""Batched sampling primitives shared by the engine, the draft proposer and the verifier.

Every random choice here is an *exponential race*: to draw one index from a non-negative weight row ``w``
(not necessarily normalised), draw ``E_j ~ Exp(1)`` i.i.d. and take ``argmax_j w_j / E_j``. The winner is
distributed as ``w / sum(w)`` (the minimum of independent ``Exp(w_j)`` variables ``E_j / w_j``), so no
normalisation, no ``torch.multinomial`` and no host synchronisation are needed, and a zero-weight index
can never win (it is masked out of the race).

Randomness conventions (``verify.py`` follows the same ones, so a request's stream is one story):

* ``generators`` is ``None`` (torch's default generator), one ``torch.Generator`` for the whole batch, or a
  dict ``{row_index: torch.Generator}`` for seeded rows. With a dict, each listed row draws its own noise
  from its own generator (a short Python loop over the *dict entries only*), so a seeded row gets the same
  tokens whatever else is in the batch; unlisted rows use the default generator.
* One sampled row consumes exactly one ``torch.rand(V, dtype=float32, generator=g)`` draw ``U`` from its own
  generator; greedy rows (temperature 0) consume nothing from a per-row generator. With one shared
  generator the whole ``[rows, V]`` block is one ``torch.rand`` call.
* The race is kept in the form ``L = log(U) = -E`` (float32, finite, < 0) and scored as ``argmin w / L``,
  one correctly rounded division per entry and no mask (see ``race_sample``); the Triton verifier evaluates
  the same expression (``tl.div_rn``), which is what makes it bit-equal to the torch path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

__all__ = [
    "Generators",
    "LOG_U_MAX",
    "LOG_U_MIN",
    "MIN_RACE_WEIGHT",
    "SamplingProbs",
    "draw_race_noise",
    "logits_to_probs",
    "race_noise_from_exponentials",
    "race_sample",
    "sample_from_probs",
]

Generators = torch.Generator | Mapping[int, torch.Generator] | None

# The race noise L = log(U) lives in [LOG_U_MIN, LOG_U_MAX]: float32 torch.rand gives U = k * 2**-24,
# k < 2**24, so log U <= log(1 - 2**-24) < 0; U = 0 (k = 0, probability 2**-24) is read as the middle of
# its bucket, 2**-25, instead of E = inf. Finite, strictly negative L is what lets the race skip masking.
LOG_U_MIN = math.log(2.0**-25)  # rounded to float32 by clamp
LOG_U_MAX = float(torch.tensor(1.0 - 2.0**-24, dtype=torch.float32).log())
# Weights at or below this count as no mass (the verifier's residual fall-back to p): any weight above it
# divided by |L| <= 17.4 is still a positive float32, so the race winner is a positive-weight index.
MIN_RACE_WEIGHT = 2.0**-123  # ~9.4e-38, exact in float32 (the same threshold on every backend)


def _race_row(length: int, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """One row of race noise ``log(U)`` for one generator, drawn into a fresh tensor (never an indexed copy)."""
    return torch.rand(length, dtype=torch.float32, device=device, generator=generator).log_().clamp_min_(LOG_U_MIN)


def race_noise_from_exponentials(exponentials: torch.Tensor) -> torch.Tensor:
    """Race noise ``-E`` from injected ``Exp(1)`` samples ``E`` (float32), clamped to the range the sampler
    itself produces; for ``E = -log U`` drawn as above the result is ``log U`` bit for bit."""
    return exponentials.to(torch.float32).neg().clamp_(LOG_U_MIN, LOG_U_MAX)


def draw_race_noise(rows: int, vocab: int, device: torch.device | str, generators: Generators = None,
                    skip_rows: Sequence[bool] | None = None) -> torch.Tensor:
    """Race noise ``L = log(U) = -E``, ``E ~ Exp(1)``: float32 ``[rows, vocab]``, all entries <= 0.

    ``generators`` as in the module docstring. ``skip_rows[i]`` True (a greedy row) means row ``i`` draws
    nothing from a per-row generator in a dict (its noise is then left from the shared draw, unused).
    (``log`` of ``torch.rand`` rather than ``exponential_``: ~4x cheaper on CPU, same law.)
    """
    device = torch.device(device)
    per_row: Mapping[int, torch.Generator] = {}
    shared: torch.Generator | None = None
    if isinstance(generators, Mapping):
        per_row = generators
        for i in per_row:
            if not 0 <= int(i) < rows:
                raise ValueError(f"generator dict key {i!r} is not a row index in [0, {rows})")
    elif generators is not None:
        if not isinstance(generators, torch.Generator):
            raise TypeError(f"generators must be None, a torch.Generator or a dict of them, got {type(generators)!r}")
        shared = generators
    if per_row and len(per_row) == rows:
        noise = torch.full((rows, vocab), -1.0, dtype=torch.float32, device=device)
    else:
        noise = torch.rand(rows, vocab, dtype=torch.float32, device=device, generator=shared).log_()
        noise.clamp_min_(LOG_U_MIN)
    for i, gen in per_row.items():
        if skip_rows is not None and skip_rows[int(i)]:
            continue
        noise[int(i)] = _race_row(vocab, device, gen)
    return noise


def race_sample(weights: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Winner of the exponential race per row: ``argmin w / L`` with ``L = -E`` (= ``argmax w / E``).

    ``weights`` ``[rows, V]`` (any float dtype; used in float32), ``noise`` ``[rows, V]`` float32 from
    :func:`draw_race_noise`. No mask is needed: ``L`` is finite and strictly negative, so zero weights score
    ``-0.0`` and every weight above ``MIN_RACE_WEIGHT`` scores strictly below it; a valid row (its largest
    weight above that) therefore never yields a zero-weight index. First index on ties, like torch.argmin.
    """
    return (weights.to(torch.float32) / noise).min(dim=-1).indices


def _as_row_tensor(value, rows: int, name: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        t = value.to(device=device, dtype=dtype).reshape(-1)
        if t.numel() == 1:
            t = t.expand(rows)
    elif isinstance(value, (int, float, bool)):
        t = torch.full((rows,), value, dtype=dtype, device=device)
    else:
        t = torch.tensor(list(value), dtype=dtype, device=device)
    if t.shape != (rows,):
        raise ValueError(f"{name} must be a scalar or have one entry per row ({rows}), got shape {tuple(t.shape)}")
    return t


def _host_values(value) -> list[float] | None:
    """The per-row values if they are known on the host without a device sync, else None."""
    if isinstance(value, (int, float, bool)):
        return [float(value)]
    if isinstance(value, torch.Tensor):
        return value.reshape(-1).tolist() if value.device.type == "cpu" else None
    return [float(v) for v in value]


class SamplingProbs(NamedTuple):
    probs: torch.Tensor  # [rows, V] float32, rows sum to 1
    greedy: torch.Tensor  # [rows] bool: temperature 0 (probs is then the one-hot of argmax(logits))


def logits_to_probs(logits: torch.Tensor, temperature=1.0, top_p=1.0, top_k=None) -> SamplingProbs:
    """Per-row temperature / top-k / top-p filtered probabilities, batched.

    ``logits`` ``[rows, V]``; ``temperature``, ``top_p`` and ``top_k`` are scalars or one value per row
    (sequence or tensor). ``top_k`` None or <= 0 means off; ``top_p`` >= 1 means off. Rows with temperature
    0 are greedy: their probs are the one-hot of ``argmax(logits)`` (first index on ties), so argmax
    verification and race sampling both reproduce greedy decoding exactly, and ``greedy`` flags them.
    Returns ``SamplingProbs(probs float32 [rows, V], greedy bool [rows])``.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be [rows, V], got shape {tuple(logits.shape)}")
    rows, vocab = logits.shape
    device = logits.device
    temp = _as_row_tensor(temperature, rows, "temperature", device, torch.float32)
    host_temp = _host_values(temperature)
    if host_temp is not None and any(t < 0 for t in host_temp):
        raise ValueError(f"temperature must be >= 0, got {host_temp}")
    greedy = temp == 0
    x = logits.to(torch.float32) / torch.where(greedy, torch.ones_like(temp), temp).unsqueeze(1)

    host_p = _host_values(top_p)
    if host_p is not None and any(not 0.0 < p <= 1.0 for p in host_p):
        raise ValueError(f"top_p must be in (0, 1], got {host_p}")
    host_k = None if top_k is None else _host_values(top_k)
    use_top_p = host_p is None or any(p < 1.0 for p in host_p)
    use_top_k = top_k is not None and (host_k is None or any(0 < k < vocab for k in host_k))
    if use_top_p or use_top_k:
        # Sort once, mask in sorted order, scatter the mask back: O(V log V) per row, fully batched.
        sorted_x, order = x.sort(dim=-1, descending=True)
        drop = torch.zeros_like(sorted_x, dtype=torch.bool)
        if use_top_k:
            k = _as_row_tensor(top_k, rows, "top_k", device, torch.int64)
            k = torch.where((k <= 0) | (k > vocab), torch.full_like(k, vocab), k)
            drop |= torch.arange(vocab, device=device).unsqueeze(0) >= k.unsqueeze(1)
        if use_top_p:
            p = _as_row_tensor(top_p, rows, "top_p", device, torch.float32)
            sorted_probs = sorted_x.masked_fill(drop, float("-inf")).softmax(dim=-1)
            mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of strictly better tokens
            # Keep the smallest prefix whose mass reaches top_p; the first token always survives.
            drop |= mass_before >= p.unsqueeze(1)
            drop[:, 0] = False
        x = x.masked_fill(torch.zeros_like(drop).scatter_(1, order, drop), float("-inf"))
    probs = x.softmax(dim=-1)
    if host_temp is None or any(t == 0 for t in host_temp):
        one_hot = torch.zeros_like(probs).scatter_(1, logits.argmax(dim=-1, keepdim=True), 1.0)
        probs = torch.where(greedy.unsqueeze(1), one_hot, probs)
    return SamplingProbs(probs, greedy)


def sample_from_probs(probs: torch.Tensor, generators: Generators = None, greedy=None) -> torch.Tensor:
    """One token per row of ``probs`` ``[rows, V]`` by exponential race: LongTensor ``[rows]``.

    ``greedy`` (None, a bool, or one bool per row) rows take ``argmax(probs)`` and use no randomness.
    ``generators`` as in the module docstring. Never returns an index with zero probability for a valid row
    (one whose largest entry exceeds ``MIN_RACE_WEIGHT``; an all-zero row yields index 0).
    """
    if probs.dim() != 2:
        raise ValueError(f"probs must be [rows, V], got shape {tuple(probs.shape)}")
    rows, vocab = probs.shape
    host_greedy = None if greedy is None else _host_values(greedy)
    if host_greedy is not None and len(host_greedy) == 1:
        host_greedy = host_greedy * rows
    if host_greedy is not None and all(host_greedy):
        return probs.argmax(dim=-1)
    skip = None if host_greedy is None else [bool(g) for g in host_greedy]
    if skip is None and isinstance(generators, Mapping) and greedy is not None:
        skip = [bool(g) for g in _as_row_tensor(greedy, rows, "greedy", probs.device, torch.bool).tolist()]
    tokens = race_sample(probs, draw_race_noise(rows, vocab, probs.device, generators, skip_rows=skip))
    if greedy is not None:
        g = _as_row_tensor(greedy, rows, "greedy", probs.device, torch.bool)
        tokens = torch.where(g, probs.argmax(dim=-1), tokens)
    return tokens
