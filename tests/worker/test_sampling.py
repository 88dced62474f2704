"""Tests of the batched sampling primitives (exponential race, temperature / top-k / top-p filtering)."""

from __future__ import annotations

import pytest
import torch

from adaptspec.worker.sampling import (
    logits_to_probs,
    race_noise_from_exponentials,
    race_sample,
    sample_from_probs,
)

N_ROWS = 65_536


def assert_histogram(samples: torch.Tensor, probs: torch.Tensor, what: str) -> None:
    """Each bin within 6 sigma + 5 of its closed-form expectation; zero-probability bins never hit."""
    probs = probs.to(torch.float64)
    n = samples.numel()
    assert int(samples.min()) >= 0 and int(samples.max()) < probs.numel(), f"{what}: id out of range"
    counts = torch.bincount(samples, minlength=probs.numel()).to(torch.float64)
    bound = 6.0 * torch.sqrt(n * probs * (1 - probs)) + 5.0
    assert torch.all(counts[probs == 0] == 0), f"{what}: zero-probability ids hit"
    bad = (counts - n * probs).abs() > bound
    assert not bad.any(), f"{what}: bins {torch.nonzero(bad).flatten().tolist()} off (n={n})"


def test_race_samples_follow_the_distribution_rows_independently():
    vocab = 37  # not a power of two
    g = torch.Generator().manual_seed(0)
    a = torch.rand(vocab, generator=g) ** 3
    a[[0, 5, 36]] = 0
    a /= a.sum()
    b = torch.zeros(vocab)
    b[[1, 36]] = torch.tensor([0.25, 0.75])
    probs = torch.stack([a, b]).repeat(N_ROWS // 2, 1)
    tokens = sample_from_probs(probs, torch.Generator().manual_seed(1))
    assert tokens.dtype == torch.int64 and tokens.shape == (N_ROWS,)
    assert_histogram(tokens[0::2], a, "row a")
    assert_histogram(tokens[1::2], b, "row b")


def test_unnormalised_weights_are_fine_for_the_race():
    w = torch.tensor([0.0, 2.0, 6.0, 0.0, 0.5])
    exponentials = torch.empty(N_ROWS, 5).exponential_(generator=torch.Generator().manual_seed(3))
    tokens = race_sample(w.expand(N_ROWS, 5), race_noise_from_exponentials(exponentials))
    assert_histogram(tokens, w / w.sum(), "unnormalised race")


def test_logits_to_probs_temperature_matches_softmax():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(2))
    temps = [1.0, 0.5, 2.0, 0.7]
    probs, greedy = logits_to_probs(logits, temperature=temps)
    expected = torch.softmax(logits / torch.tensor(temps).unsqueeze(1), dim=-1)
    assert torch.allclose(probs, expected, atol=1e-6)
    assert not greedy.any()


def test_temperature_zero_rows_are_greedy_one_hot():
    logits = torch.tensor([[0.0, 3.0, 3.0, -1.0], [1.0, 0.0, 2.0, 0.5]])
    probs, greedy = logits_to_probs(logits, temperature=torch.tensor([0.0, 1.0]), top_p=0.5)
    assert greedy.tolist() == [True, False]
    assert probs[0].tolist() == [0.0, 1.0, 0.0, 0.0]  # first index on ties, like torch.argmax
    tokens = sample_from_probs(probs, greedy=greedy)
    assert int(tokens[0]) == 1


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    probs_in = torch.tensor([0.05, 0.4, 0.1, 0.3, 0.15])
    logits = probs_in.log().unsqueeze(0).repeat(3, 1)
    probs, _ = logits_to_probs(logits, temperature=1.0, top_p=[0.5, 0.7, 0.71])
    # Sorted: 0.4 (id 1), 0.3 (id 3), 0.15 (id 4), 0.1, 0.05.
    # p=0.5 -> {1, 3}; p=0.7 -> {1, 3} (0.4 + 0.3 reaches 0.7); p=0.71 -> {1, 3, 4}.
    def keep(ids):
        m = torch.zeros(5)
        m[ids] = probs_in[ids]
        return m / m.sum()
    assert torch.allclose(probs[0], keep([1, 3]), atol=1e-6)
    assert torch.allclose(probs[1], keep([1, 3]), atol=1e-6)
    assert torch.allclose(probs[2], keep([1, 3, 4]), atol=1e-6)


def test_top_k_and_top_p_together():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0, 0.0]])
    probs, _ = logits_to_probs(logits, top_k=3)
    assert (probs[0] > 0).tolist() == [False, True, True, True, False]
    probs, _ = logits_to_probs(logits, top_k=2, top_p=0.99)
    assert (probs[0] > 0).tolist() == [False, True, True, False, False]
    assert torch.allclose(probs.sum(dim=-1), torch.ones(1))


def test_filtered_distribution_sampled_statistically():
    vocab = 600
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(5)) * 3
    probs, _ = logits_to_probs(logits.unsqueeze(0), temperature=0.8, top_p=0.9)
    assert (probs[0] == 0).sum() > vocab // 2  # the filter really removed the tail
    batch_probs, _ = logits_to_probs(logits.repeat(64, 1), temperature=0.8, top_p=0.9)
    assert torch.equal(batch_probs, probs.expand(64, vocab))  # batched rows filter like a single row
    tokens = sample_from_probs(probs.expand(N_ROWS, vocab), torch.Generator().manual_seed(6))
    assert_histogram(tokens, probs[0], "top-p filtered sampling")


def test_seeded_rows_independent_of_batch_composition():
    vocab = 500
    probs = torch.softmax(torch.randn(6, vocab, generator=torch.Generator().manual_seed(7)), -1)
    alone = sample_from_probs(probs[3:4], {0: torch.Generator().manual_seed(42)})
    for trial in range(3):
        torch.manual_seed(trial)
        batch = sample_from_probs(probs, {3: torch.Generator().manual_seed(42), 0: torch.Generator().manual_seed(1)})
        assert int(batch[3]) == int(alone[0])
    assert len({int(sample_from_probs(probs[3:4], {0: torch.Generator().manual_seed(s)})[0])
                for s in range(40)}) > 1


def test_shared_generator_deterministic_and_greedy_rows_use_no_randomness():
    probs = torch.softmax(torch.randn(64, 300, generator=torch.Generator().manual_seed(8)), -1)
    a = sample_from_probs(probs, torch.Generator().manual_seed(9))
    b = sample_from_probs(probs, torch.Generator().manual_seed(9))
    assert torch.equal(a, b)
    flags = torch.arange(64) % 2 == 0
    c = sample_from_probs(probs, torch.Generator().manual_seed(10), greedy=flags)
    assert torch.equal(c[flags], probs[flags].argmax(dim=-1))
    g = torch.Generator().manual_seed(11)
    sample_from_probs(probs[:1], {0: g}, greedy=True)
    assert torch.equal(g.get_state(), torch.Generator().manual_seed(11).get_state())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": -1.0}, "temperature must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": [0.5, 0.5, 0.5]}, "one entry per row"),
        ({"temperature": [1.0]}, "one entry per row"),
    ],
)
def test_bad_sampling_parameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        logits_to_probs(torch.zeros(2, 8), **kwargs)


def test_bad_generator_arguments_raise():
    with pytest.raises(ValueError, match="not a row index"):
        sample_from_probs(torch.ones(2, 3) / 3, {2: torch.Generator()})
    with pytest.raises(TypeError, match="torch.Generator"):
        sample_from_probs(torch.ones(2, 3) / 3, "seed")


def test_race_never_picks_zero_weight_even_with_extreme_noise():
    """E = 0 (instant), E = inf (never) and tiny weights: the clamped, finite noise keeps every positive
    weight strictly ahead of every zero weight, without any mask."""
    w = torch.tensor([[0.0, 0.0, 1e-30, 0.0, 0.0],
                      [0.0, 2.0**-120, 0.0, 0.0, 0.0],
                      [0.5, 0.0, 0.5, 0.0, 0.0]])
    e = torch.tensor([[0.0, 0.0, float("inf"), 0.0, 0.0],
                      [0.0, float("inf"), 0.0, 0.0, 0.0],
                      [float("inf"), 0.0, 0.0, 0.0, 0.0]])
    assert race_sample(w, race_noise_from_exponentials(e)).tolist() == [2, 1, 2]
    drawn = -torch.rand(1000, 7, generator=torch.Generator().manual_seed(0)).log()
    assert torch.equal(race_noise_from_exponentials(drawn), -drawn)  # in range: a no-op
