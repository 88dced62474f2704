"""Statistical and exactness tests of the fast-path verifier (closed-form expectations, STYLE.md).

Batches are built by replicating a few fixed distributions over >= 65,536 requests, so one verify call gives
that many independent draws. Every histogram bin must lie within 6*sqrt(n p (1-p)) + 5 of n p, and bins of
probability zero must never be hit.
"""

from __future__ import annotations

import math

import pytest
import torch

from adaptspec.worker.sampling import sample_from_probs
from adaptspec.worker.verify import PLACEHOLDER_TOKEN_ID, _verify_torch, prepare_inputs, verify_drafts

N_ROWS = 65_536


def assert_histogram(samples: torch.Tensor, probs: torch.Tensor, what: str) -> None:
    """Each bin within 6 sigma + 5 of its closed-form expectation; zero-probability bins never hit."""
    probs = probs.to(torch.float64)
    n = samples.numel()
    assert n > 0, f"{what}: no samples"
    assert int(samples.min()) >= 0 and int(samples.max()) < probs.numel(), f"{what}: id out of range"
    counts = torch.bincount(samples, minlength=probs.numel()).to(torch.float64)
    expected = n * probs
    bound = 6.0 * torch.sqrt(n * probs * (1 - probs)) + 5.0
    zero = probs == 0
    assert torch.all(counts[zero] == 0), f"{what}: zero-probability ids hit: {torch.nonzero(counts * zero).tolist()}"
    bad = (counts - expected).abs() > bound
    assert not bad.any(), (
        f"{what}: bins {torch.nonzero(bad).flatten().tolist()} counts {counts[bad].tolist()} "
        f"expected {expected[bad].tolist()} (n={n})")


def make_dist(seed: int, vocab: int, zeros=()) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(vocab, generator=g, dtype=torch.float64) ** 2 + 0.02
    w[list(zeros)] = 0
    return (w / w.sum()).to(torch.float32)


def accept_length_probs(betas: list[float]) -> torch.Tensor:
    """P(L = l) = prod_{i<l} beta_i * (1 - beta_l) for l < k, and prod beta for l = k."""
    out, prefix = [], 1.0
    for b in betas:
        out.append(prefix * (1 - b))
        prefix *= b
    out.append(prefix)
    return torch.tensor(out, dtype=torch.float64)


def accept_lengths(out: torch.Tensor) -> torch.Tensor:
    return (out != PLACEHOLDER_TOKEN_ID).sum(dim=1) - 1


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    r = (p.double() - q.double()).clamp_min(0)
    return r / r.sum()


# ---------------------------------------------------------------------------------------------------------
# Draft model case: k = 3, V = 11, drafts proposed by q; both sides have zero-probability tokens and q puts
# mass on tokens the target never emits.
K, V = 3, 11
P_ROWS = torch.stack([make_dist(1, V, zeros=(0, 7)), make_dist(2, V, zeros=(3,)),
                      make_dist(3, V, zeros=(10, 4)), make_dist(4, V, zeros=(1, 5))])  # k draft rows + bonus
Q_ROWS = torch.stack([make_dist(11, V, zeros=(2,)), make_dist(12, V, zeros=(6, 8)),
                      make_dist(13, V, zeros=(9,))])


@pytest.fixture(scope="module")
def draft_model_run():
    g = torch.Generator().manual_seed(1234)
    drafts = torch.stack([torch.multinomial(Q_ROWS[j], N_ROWS, replacement=True, generator=g)
                          for j in range(K)], dim=1)  # [R, K]
    target = P_ROWS.repeat(N_ROWS, 1)  # [R * (K + 1), V]
    draft_probs = Q_ROWS.repeat(N_ROWS, 1)  # [R * K, V]
    out = verify_drafts(target, drafts.reshape(-1), [K] * N_ROWS, draft_probs,
                        generator=torch.Generator().manual_seed(99))
    return drafts, out


def test_output_shape_padding_and_ids(draft_model_run):
    drafts, out = draft_model_run
    assert out.shape == (N_ROWS, K + 1) and out.dtype == torch.int64
    lengths = accept_lengths(out)
    # Emitted tokens form a prefix; the accepted ones are exactly the drafts.
    pos = torch.arange(K + 1)
    assert torch.all((out != -1) == (pos <= lengths.unsqueeze(1)))
    accepted = pos[:K] < lengths.unsqueeze(1)
    assert torch.equal(out[:, :K][accepted], drafts[accepted])
    assert int(out.max()) < V


def test_each_emitted_position_follows_target_row(draft_model_run):
    _, out = draft_model_run
    lengths = accept_lengths(out)
    for j in range(K + 1):  # j = 0: the first emitted token ~ target row 0, over all rows
        reached = lengths >= j
        assert_histogram(out[reached, j], P_ROWS[j], f"emitted token at position {j}")


def test_accept_length_distribution_closed_form(draft_model_run):
    _, out = draft_model_run
    betas = [float(torch.minimum(P_ROWS[i].double(), Q_ROWS[i].double()).sum()) for i in range(K)]
    assert_histogram(accept_lengths(out), accept_length_probs(betas), "accept length")


def test_token_at_stop_position_follows_residual(draft_model_run):
    _, out = draft_model_run
    lengths = accept_lengths(out)
    for stop in range(K):
        rows = lengths == stop
        assert_histogram(out[rows, stop], residual(P_ROWS[stop], Q_ROWS[stop]), f"recovered token at {stop}")


def test_bonus_token_follows_last_target_row(draft_model_run):
    _, out = draft_model_run
    rows = accept_lengths(out) == K
    assert rows.sum() > 1000
    assert_histogram(out[rows, K], P_ROWS[K], "bonus token")


# ---------------------------------------------------------------------------------------------------------
def test_point_mass_drafts_ngram_case():
    """draft_probs=None: accept x with prob p(x); on rejection sample p with x removed. Two groups of requests
    in one batch; group B proposes a token the target never emits at position 1."""
    vocab, k = 13, 3
    p = torch.stack([make_dist(21 + i, vocab, zeros=(12, 5)) for i in range(k + 1)])
    group_a, group_b = [2, 7, 0], [2, 12, 0]  # p[1, 12] == 0
    half = N_ROWS // 2
    drafts = torch.tensor([group_a] * half + [group_b] * half).reshape(-1)
    out = verify_drafts(p.repeat(N_ROWS, 1), drafts, [k] * N_ROWS, None,
                        generator=torch.Generator().manual_seed(5))
    lengths = accept_lengths(out)
    for name, xs, rows in (("A", group_a, slice(0, half)), ("B", group_b, slice(half, None))):
        out_g, len_g = out[rows], lengths[rows]
        betas = [float(p[i, x]) for i, x in enumerate(xs)]
        assert_histogram(len_g, accept_length_probs(betas), f"group {name} accept length")
        assert_histogram(out_g[:, 0], p[0], f"group {name} first token")
        for stop, x in enumerate(xs):
            removed = p[stop].double().clone()
            removed[x] = 0
            sel = len_g == stop
            if sel.any():
                assert_histogram(out_g[sel, stop], removed / removed.sum(), f"group {name} stop {stop}")
        if (len_g == k).any():
            assert_histogram(out_g[len_g == k, k], p[k], f"group {name} bonus")
    assert not (lengths[half:] >= 2).any()  # a zero-target-probability draft is never accepted
    assert not (out == 12).any() and not (out == 5).any()


def _run_chunked(build, chunks: int):
    outs = [build(c) for c in range(chunks)]
    return torch.cat(outs)


def test_mixed_k_including_zero_with_vocab_1000():
    """Requests with k in {0, 1, 2, 4} interleaved in every batch, V = 1000 (not a power of two)."""
    vocab, pattern = 1000, [0, 2, 4, 1]
    zeros = list(range(0, vocab, 3))  # a third of the vocabulary is impossible under the target
    p = torch.stack([make_dist(40 + i, vocab, zeros=zeros) for i in range(5)])  # rows for positions 0..4
    q = torch.stack([make_dist(50 + i, vocab, zeros=range(1, vocab, 7)) for i in range(4)])
    per_chunk, chunks = 4096, 16  # 65,536 requests, 16,384 of each k
    gen_drafts = torch.Generator().manual_seed(7)
    gen_verify = torch.Generator().manual_seed(8)

    ks = pattern * (per_chunk // len(pattern))
    target_rows = torch.cat([torch.arange(k + 1) if k else torch.tensor([4]) for k in pattern])
    draft_rows = torch.cat([torch.arange(k) for k in pattern])
    reps = per_chunk // len(pattern)
    target = p[target_rows].repeat(reps, 1)  # the same for every chunk; only the drafts are redrawn
    draft_probs = q[draft_rows].repeat(reps, 1)

    def build(_c):
        drafts = torch.empty(draft_probs.shape[0], dtype=torch.int64)
        which = draft_rows.repeat(reps)
        for j in range(4):  # one multinomial per distinct draft distribution (fast), scattered into place
            sel = torch.nonzero(which == j).squeeze(1)
            drafts[sel] = torch.multinomial(q[j], sel.numel(), replacement=True, generator=gen_drafts)
        out = verify_drafts(target, drafts, ks, draft_probs, generator=gen_verify)
        return torch.nn.functional.pad(out, (0, 5 - out.shape[1]), value=-1)

    out = _run_chunked(build, chunks)
    ks = torch.tensor(pattern * (per_chunk * chunks // len(pattern)))
    assert int(out.max()) < vocab
    lengths = accept_lengths(out)
    assert torch.all(lengths <= ks)
    betas = [float(torch.minimum(p[i].double(), q[i].double()).sum()) for i in range(4)]
    for k in pattern:
        rows = ks == k
        first_row = p[4] if k == 0 else p[0]  # k = 0: the bonus row is the request's only target row
        assert_histogram(out[rows, 0], first_row, f"k={k} first token")
        assert_histogram(lengths[rows], accept_length_probs(betas[:k]), f"k={k} accept length")
        assert torch.all(out[rows, k + 1:] == -1)


def test_prime_vocab_point_mass_zero_probability_never_emitted():
    """V = 1031 (prime): sparse target rows (support of 9 ids incl. V-1), point-mass drafts, k in {0, 1}."""
    vocab = 1031
    support = torch.tensor([3, 100, 511, 512, 513, 700, 1000, 1029, 1030])
    p = torch.zeros(2, vocab)
    p[0, support] = torch.arange(1, 10, dtype=torch.float32)
    p[1, support] = torch.arange(9, 0, -1, dtype=torch.float32)
    p /= p.sum(dim=1, keepdim=True)
    per_chunk, chunks = 8192, 8
    gen = torch.Generator().manual_seed(11)
    # Request 2i: k = 1, draft 1030 at row p[0], bonus p[1]; request 2i+1: k = 0, bonus p[1].
    target = torch.cat([p[0:1], p[1:2], p[1:2]]).repeat(per_chunk // 2, 1)
    ks = [1, 0] * (per_chunk // 2)
    drafts = torch.full((per_chunk // 2,), 1030)
    out = torch.cat([verify_drafts(target, drafts, ks, generator=gen) for _ in range(chunks)])
    with_draft, bonus_only = out[0::2], out[1::2]
    assert_histogram(with_draft[:, 0], p[0], "V=1031 first token")
    assert_histogram(bonus_only[:, 0], p[1], "V=1031 bonus-only token")
    assert torch.all(bonus_only[:, 1] == -1)
    beta = float(p[0, 1030])
    assert_histogram(accept_lengths(with_draft), torch.tensor([1 - beta, beta]), "V=1031 accept length")
    assert_histogram(with_draft[accept_lengths(with_draft) == 1, 1], p[1], "V=1031 bonus after accept")
    assert int(out.max()) < vocab


def test_residual_all_zero_falls_back_to_target():
    """q >= p everywhere (p == q up to an unnormalised factor) and u forced near 1: every draft is rejected and
    the residual is all zero, so the emitted token must come from p itself."""
    vocab = 9
    p = make_dist(60, vocab, zeros=(4,))
    q = p * 1.001
    drafts = torch.multinomial(p, N_ROWS, replacement=True, generator=torch.Generator().manual_seed(1))
    target = torch.stack([p, p]).repeat(N_ROWS, 1)
    uniforms = torch.full((N_ROWS,), 0.9999999, dtype=torch.float64)
    race = torch.empty(N_ROWS, vocab).exponential_(generator=torch.Generator().manual_seed(2))
    out = verify_drafts(target, drafts, [1] * N_ROWS, q.repeat(N_ROWS, 1), uniforms=uniforms, race_noise=race)
    assert torch.all(accept_lengths(out) == 0)
    assert_histogram(out[:, 0], p, "fallback token")


# ---------------------------------------------------------------------------------------------------------
def greedy_reference(target, drafts, ks):
    """Plain greedy decoding, request by request."""
    rows, out, d, t = [], [], 0, 0
    for k in ks:
        emitted = []
        for j in range(k):
            best = int(target[t + j].argmax())
            emitted.append(best)
            if int(drafts[d + j]) != best:
                break
        else:
            emitted.append(int(target[t + k].argmax()))
        rows.append(emitted)
        d, t = d + k, t + k + 1
    width = max(ks) + 1
    for r in rows:
        out.append(r + [-1] * (width - len(r)))
    return torch.tensor(out)


@pytest.mark.parametrize("with_draft_probs", [True, False])
def test_greedy_equals_argmax_decoding(with_draft_probs):
    g = torch.Generator().manual_seed(3)
    vocab = 37
    ks = [int(k) for k in torch.randint(0, 6, (400,), generator=g)]
    n, batch = sum(ks), len(ks)
    # Quantised probabilities create ties: argmax must break them to the first index, like greedy decoding.
    target = torch.randint(0, 4, (n + batch, vocab), generator=g).float() + 1e-3
    target /= target.sum(dim=1, keepdim=True)
    req = torch.repeat_interleave(torch.arange(batch), torch.tensor(ks))
    target_rows = torch.arange(n) + req
    best = target[target_rows].argmax(dim=1)
    drafts = torch.where(torch.rand(n, generator=g) < 0.8, best, torch.randint(0, vocab, (n,), generator=g))
    draft_probs = torch.softmax(torch.randn(n, vocab, generator=g), -1) if with_draft_probs else None
    expected = greedy_reference(target, drafts, ks)
    out = verify_drafts(target, drafts, ks, draft_probs, greedy=True)
    assert torch.equal(out, expected)
    # Mixed batch: greedy rows are unaffected by the seed and by their sampled neighbours.
    flags = [i % 3 != 0 for i in range(batch)]
    for seed in (1, 2):
        mixed = verify_drafts(target, drafts, ks, draft_probs, greedy=flags,
                              generator=torch.Generator().manual_seed(seed))
        assert torch.equal(mixed[torch.tensor(flags)], expected[torch.tensor(flags)])
    gens = {i: torch.Generator().manual_seed(i) for i in range(0, batch, 2)}
    mixed = verify_drafts(target, drafts, ks, draft_probs, greedy=torch.tensor(flags), generator=gens)
    assert torch.equal(mixed[torch.tensor(flags)], expected[torch.tensor(flags)])


def test_seeded_shared_generator_is_deterministic():
    target = make_dist(70, 50).repeat(3 * 64, 1)
    q = make_dist(71, 50).repeat(2 * 64, 1)
    drafts = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(0)).squeeze(1)

    def run(seed):
        return verify_drafts(target, drafts, [2] * 64, q, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))


def test_seeded_requests_reproducible_regardless_of_batch():
    vocab = 101
    g = torch.Generator().manual_seed(9)
    probs = torch.softmax(torch.randn(60, vocab, generator=g) * 2, -1)
    ks_all = [3, 0, 2, 4, 1, 0, 3]
    n = sum(ks_all)
    draft_probs = torch.softmax(torch.randn(n, vocab, generator=g) * 2, -1)
    drafts = torch.multinomial(draft_probs, 1, generator=g).squeeze(1)
    target = probs[: n + len(ks_all)]
    t_start = [sum(ks_all[:i]) + i for i in range(len(ks_all))]
    d_start = [sum(ks_all[:i]) for i in range(len(ks_all))]

    def alone(i, seed):
        k = ks_all[i]
        return verify_drafts(target[t_start[i]: t_start[i] + k + 1], drafts[d_start[i]: d_start[i] + k], [k],
                             draft_probs[d_start[i]: d_start[i] + k],
                             generator={0: torch.Generator().manual_seed(seed)})[0]

    seeds = {0: 100, 2: 102, 3: 103, 5: 105}
    for trial in range(3):
        torch.manual_seed(trial)  # unseeded requests draw from the default generator
        gens = {i: torch.Generator().manual_seed(s) for i, s in seeds.items()}
        batched = verify_drafts(target, drafts, ks_all, draft_probs, generator=gens)
        for i, s in seeds.items():
            solo = alone(i, s)
            assert torch.equal(batched[i, : solo.numel()], solo), f"request {i} differs when batched"
    # And the seeds matter: over many seeds request 0 does not always emit the same thing.
    outs = {tuple(alone(0, s).tolist()) for s in range(30)}
    assert len(outs) > 1


def test_bonus_only_request_consumes_like_sample_from_probs():
    vocab = 257
    row = torch.softmax(torch.randn(1, vocab, generator=torch.Generator().manual_seed(4)), -1)
    for seed in range(20):
        a = verify_drafts(row, torch.empty(0, dtype=torch.long), [0], generator={0: torch.Generator().manual_seed(seed)})
        b = sample_from_probs(row, {0: torch.Generator().manual_seed(seed)})
        assert int(a[0, 0]) == int(b[0])
        c = verify_drafts(row, torch.empty(0, dtype=torch.long), [0], generator=torch.Generator().manual_seed(seed))
        d = sample_from_probs(row, torch.Generator().manual_seed(seed))
        assert int(c[0, 0]) == int(d[0])


def test_requests_without_drafts_draw_no_uniforms():
    """A k = 0 request's generator is advanced only by its race row, so a following draw is unchanged."""
    vocab = 31
    row = torch.softmax(torch.randn(1, vocab), -1)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    verify_drafts(row, torch.empty(0, dtype=torch.long), [0], generator={0: g1})
    torch.rand(vocab, generator=g2)  # the race row
    assert torch.equal(g1.get_state(), g2.get_state())
    rows = torch.softmax(torch.randn(3, vocab), -1)
    g3, g4 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    verify_drafts(rows, torch.tensor([4, 5]), [2], greedy=True, generator={0: g3})
    assert torch.equal(g3.get_state(), torch.Generator().manual_seed(1).get_state())  # greedy: no draws
    verify_drafts(rows, torch.tensor([4, 5]), [2], generator={0: g4})
    assert not torch.equal(g4.get_state(), torch.Generator().manual_seed(2).get_state())


def test_bonus_only_batch_accepts_an_empty_float_draft_tensor():
    row = torch.softmax(torch.randn(2, 9, generator=torch.Generator().manual_seed(0)), -1)
    out = verify_drafts(row, torch.tensor([]), [0, 0], greedy=True)
    assert out.tolist() == [[int(row[0].argmax())], [int(row[1].argmax())]]


def test_padded_draft_ids_match_flat():
    vocab, ks = 20, [2, 0, 3]
    g = torch.Generator().manual_seed(2)
    target = torch.softmax(torch.randn(sum(ks) + 3, vocab, generator=g), -1)
    flat = torch.randint(0, vocab, (5,), generator=g)
    padded = torch.full((3, 4), -1)
    padded[0, :2], padded[2, :3] = flat[:2], flat[2:]
    a = verify_drafts(target, flat, ks, generator=torch.Generator().manual_seed(0))
    b = verify_drafts(target, padded, torch.tensor(ks), generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)


def test_injected_randomness_matches_generator_draws():
    vocab, ks = 64, [3, 1, 0, 2]
    g = torch.Generator().manual_seed(8)
    target = torch.softmax(torch.randn(sum(ks) + 4, vocab, generator=g), -1)
    q = torch.softmax(torch.randn(sum(ks), vocab, generator=g), -1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    shared = torch.Generator().manual_seed(77)
    u = torch.rand(sum(ks), dtype=torch.float64, generator=shared)
    e = -torch.rand(4, vocab, generator=shared).log()  # Exp(1) exactly as the verifier draws it
    a = verify_drafts(target, drafts, ks, q, uniforms=u, race_noise=e)
    b = verify_drafts(target, drafts, ks, q, generator=torch.Generator().manual_seed(77))
    assert torch.equal(a, b)


def test_low_precision_probabilities():
    vocab, ks = 300, [4] * 512
    p = make_dist(80, vocab, zeros=range(0, vocab, 2))
    target = p.repeat(5 * 512, 1).to(torch.bfloat16)
    drafts = torch.randint(0, vocab, (4 * 512,), generator=torch.Generator().manual_seed(0))
    out = verify_drafts(target, drafts, ks, generator=torch.Generator().manual_seed(1))
    emitted = out[out != -1]
    assert int(emitted.max()) < vocab and torch.all(emitted % 2 == 1)  # even ids have zero target mass


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"target_probs": torch.rand(5, 4)}, ValueError, "expected sum"),
        ({"draft_token_ids": torch.tensor([0, 1, 2, 3])}, ValueError, "draft_token_ids must be flat"),
        ({"draft_token_ids": torch.tensor([0, 1, 9])}, ValueError, r"must lie in \[0, V=4\)"),
        ({"draft_token_ids": torch.tensor([0.0, 1.0, 2.0])}, TypeError, "integer tensor"),
        ({"num_draft_tokens": [2, -1]}, ValueError, "integers >= 0"),
        ({"draft_probs": torch.rand(3, 5)}, ValueError, "draft_probs must be"),
        ({"greedy": [True]}, ValueError, "one entry per request"),
        ({"generator": {5: torch.Generator()}}, ValueError, "not a request index"),
        ({"generator": 3}, TypeError, "torch.Generator"),
        ({"use_triton": True}, RuntimeError, "CUDA"),
    ],
)
def test_bad_input_raises_clear_error(kwargs, error, match):
    args = {"target_probs": torch.rand(4, 4), "draft_token_ids": torch.tensor([0, 1]),
            "num_draft_tokens": [2, 0]}
    if "draft_token_ids" in kwargs and kwargs["draft_token_ids"].numel() == 3:
        args.update(target_probs=torch.rand(5, 4), num_draft_tokens=[3, 0])
    args.update(kwargs)
    with pytest.raises(error, match=match):
        verify_drafts(**args)


@pytest.mark.parametrize("with_draft_probs", [True, False])
def test_out_of_range_draft_ids_are_rejected_on_the_device_path(with_draft_probs):
    """On CPU bad ids raise; the device path (no host check) must reject them and never emit an id >= V."""
    vocab, ks = 6, [2, 1]
    target = torch.full((5, vocab), 1.0 / vocab)
    q = torch.full((3, vocab), 1.0 / vocab) if with_draft_probs else None
    inp = prepare_inputs(target, torch.tensor([1, 2, 3]), ks, q)
    inp.draft_token_ids = torch.tensor([1, vocab + 3, -2])  # as if a GPU caller passed garbage
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        u = torch.rand(3, dtype=torch.float64, generator=g)
        out = _verify_torch(inp, u, torch.rand(2, vocab, generator=g).log())
        assert int(out.max()) < vocab
        assert int(out[0, 1]) != vocab + 3 and int(out[1, 0]) != -2
        assert (out[:, 2] == -1).all() and int(out[1, 1]) == -1


def test_closed_form_helper_sums_to_one():
    probs = accept_length_probs([0.3, 0.9, 0.5])
    assert math.isclose(float(probs.sum()), 1.0)
    assert math.isclose(float(probs[0]), 0.7) and math.isclose(float(probs[3]), 0.3 * 0.9 * 0.5)
