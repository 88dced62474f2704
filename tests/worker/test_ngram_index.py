"""The n-gram proposer's per-request index drafts exactly what the whole-context search (`ngram_lookup`, what
trace replay and the shadows score) drafts, at every step of a growing sequence, for every n range and k."""

from __future__ import annotations

import numpy as np

from adaptspec.control.shadow import ngram_lookup
from adaptspec.worker.proposers import NgramProposer, ProposeInput


def _sequences(rng: np.random.Generator, count: int) -> list[list[int]]:
    """Token sequences that copy stretches of themselves (as answers quoting their prompt do), small vocabularies
    (many short repeats) and large ones (few)."""
    out = []
    for i in range(count):
        vocab = (3, 8, 50, 5000)[i % 4]
        seq = rng.integers(0, vocab, int(rng.integers(2, 60))).tolist()
        while len(seq) < 300:
            if rng.random() < 0.4 and len(seq) > 8:
                a = int(rng.integers(0, len(seq) - 4))
                seq += seq[a:a + int(rng.integers(2, 12))]
            else:
                seq += rng.integers(0, vocab, int(rng.integers(1, 6))).tolist()
        out.append(seq)
    return out


def test_the_index_drafts_what_the_whole_context_search_drafts():
    rng = np.random.default_rng(7)
    seqs = _sequences(rng, 24)
    steps = 0
    for min_n, max_n in ((1, 1), (2, 4), (1, 3), (3, 5)):
        prop = NgramProposer(min_n, max_n)
        grown = {f"r{i}": int(rng.integers(1, 20)) for i in range(len(seqs))}
        while grown:
            batch, want = [], []
            for rid, length in list(grown.items()):
                seq = seqs[int(rid[1:])][:length]
                k = int(rng.integers(1, 9))
                batch.append(ProposeInput(rid, seq, k))
                want.append(ngram_lookup(np.asarray(seq, dtype=np.int64), k, min_n, max_n).tolist())
                # the next step commits 1-6 tokens (an accepted draft and the bonus token)
                grown[rid] = length + int(rng.integers(1, 7))
                if grown[rid] > len(seqs[int(rid[1:])]):
                    del grown[rid]
            got = [d.token_ids for d in prop.propose(batch)]
            assert got == want
            steps += 1
        for rid in (f"r{i}" for i in range(len(seqs))):
            prop.remove(rid)
        assert not prop._index  # nothing held for finished requests
    assert steps > 100


def test_an_id_seen_again_with_another_sequence_starts_over():
    prop = NgramProposer(1, 3)
    first = [5, 6, 7, 5, 6, 7, 5, 6]
    assert prop.propose([ProposeInput("a", first, 3)])[0].token_ids == [7, 5, 6]
    other = [1, 2, 3, 4, 1, 2, 3, 9, 9, 1, 2]
    assert prop.propose([ProposeInput("a", other, 3)])[0].token_ids == \
        ngram_lookup(np.asarray(other), 3, 1, 3).tolist() == [3, 9, 9]
