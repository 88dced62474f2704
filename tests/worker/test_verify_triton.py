"""The Triton verifier is bit-equal to the torch reference under the same injected randomness.

``gpu`` tests compile and run the kernel on CUDA; the interpreter test runs the same kernel through
``TRITON_INTERPRET=1`` on CPU (in a subprocess, since the flag is read at import) wherever triton is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from adaptspec.worker.verify import verify_drafts

CASES_SCRIPT = textwrap.dedent("""
    import torch
    from adaptspec.worker.sampling import race_noise_from_exponentials
    from adaptspec.worker.verify import _verify_torch, prepare_inputs
    from adaptspec.worker._verify_triton import verify_triton

    def cases(device, count, vocabs):
        g = torch.Generator().manual_seed(0)
        for case in range(count):
            vocab = vocabs[case % len(vocabs)]
            batch = 1 + case % 7
            ks = torch.randint(0, 6, (batch,), generator=g).tolist()
            n = sum(ks)
            target = torch.softmax(torch.randn(n + batch, vocab, generator=g) * 3, -1)
            target[target < 1e-3] = 0  # zero-probability tokens
            if case % 3 == 0:  # ties everywhere
                target = torch.randint(0, 3, (n + batch, vocab), generator=g).float()
            q = torch.softmax(torch.randn(n, vocab, generator=g) * 3, -1) if case % 2 == 0 else None
            if q is not None and case % 4 == 0:
                q = target[:n] * 1.0  # p == q: all-zero residuals
            x = torch.randint(0, vocab, (n,), generator=g)
            if n and case % 4:
                x[::2] = target[:n][::2].argmax(-1)
            greedy = (torch.rand(batch, generator=g) < 0.3).tolist() if case % 5 else [True] * batch
            u = torch.rand(n, dtype=torch.float64, generator=g)
            if case % 7 == 0:
                u.fill_(0.9999999)
            noise = -torch.rand(batch, vocab, generator=g).log()
            if case % 8 == 1:
                noise[:, ::5] = 0.0  # E = 0: an instant winner (score -inf), and 0 / -0 = NaN masked out
            if case % 6 == 5:
                target = target.to(torch.bfloat16)
            move = (lambda t: None if t is None else t.to(device))
            yield (move(target), move(x), ks, move(q), greedy, move(u), move(noise))

    def compare(device, count, vocabs):
        bad = 0
        for target, x, ks, q, greedy, u, noise in cases(device, count, vocabs):
            inp = prepare_inputs(target, x, ks, q, greedy)
            race = None if all(greedy) else race_noise_from_exponentials(noise)
            a, b = _verify_torch(inp, u, race), verify_triton(inp, u, race)
            bad += int(not torch.equal(a, b))
        return bad
""")


def test_triton_interpreter_matches_torch_reference():
    pytest.importorskip("triton")
    code = CASES_SCRIPT + "\nprint(compare('cpu', 24, [1, 7, 100, 1000, 2050]))\n"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "0"


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@cuda
def test_triton_kernel_bit_equal_to_torch_on_cuda():
    pytest.importorskip("triton")
    namespace: dict = {}
    exec(CASES_SCRIPT, namespace)  # the same cases as the interpreter test, on the GPU
    assert namespace["compare"]("cuda", 120, [7, 1000, 4099, 32000, 128256]) == 0


@pytest.mark.gpu
@cuda
def test_dispatch_uses_triton_and_matches_statistically():
    pytest.importorskip("triton")
    vocab, rows, k = 4099, 65_536, 2
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(k + 1, vocab, generator=g) * 2, -1)
    q = torch.softmax(torch.randn(k, vocab, generator=g) * 2, -1)
    drafts = torch.stack([torch.multinomial(q[j], rows, replacement=True, generator=g) for j in range(k)], 1)
    target, draft_probs = p.repeat(rows, 1).cuda(), q.repeat(rows, 1).cuda()
    gen = torch.Generator(device="cuda").manual_seed(1)
    out = verify_drafts(target, drafts.reshape(-1).cuda(), [k] * rows, draft_probs, generator=gen,
                        use_triton=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    ref = verify_drafts(target, drafts.reshape(-1).cuda(), [k] * rows, draft_probs, generator=gen,
                        use_triton=False)
    assert torch.equal(out, ref)
    first = out[:, 0].cpu()
    counts = torch.bincount(first, minlength=vocab).double()
    expected = rows * p[0].double()
    assert torch.all((counts - expected).abs() <= 6 * torch.sqrt(expected * (1 - p[0].double())) + 5)
