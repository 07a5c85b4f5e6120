"""Chapter 20: the sampler's draw in one kernel (kernel/triton/sampling.py) against ops.sample's
torch reference (ops/sampling.py: sample_torch).

The kernel sums the probabilities in another order than torch's softmax and cumsum, so a draw
that lands within rounding distance of the boundary between two tokens may pick the neighbour;
the tests therefore check each drawn token against the exact (float64) inverse CDF of the row's
random number (uniform_from, so the kernel's hash is checked too) with a margin of 1e-5, require
most rows to agree with the reference bit for bit, and greedy rows always. On a
CPU the kernel runs under Triton's interpreter (small shapes); bf16 logits only on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from minisgl import ops
from minisgl.kernel.triton import sample
from minisgl.kernel.triton.sampling import BLOCK, CHUNK
from minisgl.ops.sampling import sample_torch, uniform_from

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def draw_inputs(rows: int, vocab: int, seed: int, scale: float = 3.0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen) * scale
    temperature = torch.rand(rows, generator=gen) * 1.5 + 0.2
    temperature[::4] = 0.0  # every fourth row greedy
    seed32 = torch.randint(0, 2**32, (rows,), generator=gen)
    positions = torch.randint(0, 2**40, (rows,), generator=gen)
    return logits, temperature, seed32, positions


def on_device(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.to(DEVICE) for t in tensors]


def check_inverse_cdf(logits, temperature, seed32, positions, got) -> None:
    """Each hot row's token lies where u falls in the float64 CDF of softmax(logits / T), within
    1e-5; each greedy row's token is the argmax (the first one on ties)."""
    u = uniform_from(seed32, positions).double()
    for b in range(logits.shape[0]):
        t = int(got[b])
        if temperature[b] == 0:
            assert t == int(logits[b].float().argmax()), b
            continue
        probs = (logits[b].double() / float(temperature[b])).softmax(dim=0)
        assert probs[t] > 0, f"row {b} drew token {t} of probability zero"
        before = float(probs[:t].sum())
        assert before - 1e-5 <= float(u[b]) <= before + float(probs[t]) + 1e-5, b


# one chunk, exactly one block, and three chunks of one block (the last one short)
@pytest.mark.parametrize("vocab,chunk", [(7, CHUNK), (BLOCK, CHUNK), (2 * BLOCK + 901, BLOCK)])
def test_sample_kernel_draws_the_inverse_cdf(vocab, chunk):
    inputs = draw_inputs(12, vocab, seed=vocab)
    got = sample(*on_device(*inputs), chunk=chunk).cpu()
    assert got.dtype == torch.int64 and got.shape == (12,)
    check_inverse_cdf(*inputs, got)
    want = sample_torch(*inputs)
    assert (got == want).float().mean() >= 0.9
    greedy = inputs[1] == 0
    assert torch.equal(got[greedy], want[greedy])


def test_sample_kernel_never_draws_a_masked_token_and_picks_the_first_maximum():
    logits, temperature, seed32, positions = draw_inputs(8, 300, seed=5)
    logits[1, 40:] = float("-inf")  # a row cut to its first 40 tokens
    logits[2, :] = float("-inf")
    logits[2, 123] = 0.0  # one token left
    logits[4, 7] = logits[4, 200] = logits[4].max() + 1  # a tie: torch.argmax takes 7
    temperature[1] = temperature[2] = 0.9
    got = sample(*on_device(logits, temperature, seed32, positions)).cpu()
    assert got[1] < 40 and got[2] == 123 and got[4] == 7
    check_inverse_cdf(logits, temperature, seed32, positions, got)


def test_sample_kernel_across_chunks_with_masked_chunks():
    """Rows cut into four chunks of one block: a row whose only live tokens sit in its last
    chunk, one whose maximum is in a middle chunk and repeated in a later one (the first index
    wins), and rows whose draw must cross from chunk to chunk."""
    vocab = 4 * BLOCK
    logits, temperature, seed32, positions = draw_inputs(8, vocab, seed=31, scale=1.0)
    logits[1, : 3 * BLOCK + 5] = float("-inf")  # chunks 0-2 masked, chunk 3 nearly so
    logits[2, BLOCK + 17] = logits[2, 3 * BLOCK + 2] = 50.0  # the maximum twice
    temperature[1], temperature[2] = 0.7, 0.0  # row 2 greedy: the first maximum
    got = sample(*on_device(logits, temperature, seed32, positions), chunk=BLOCK).cpu()
    assert got[1] >= 3 * BLOCK + 5 and got[2] == BLOCK + 17
    check_inverse_cdf(logits, temperature, seed32, positions, got)
    one = sample(*on_device(logits, temperature, seed32, positions), chunk=vocab).cpu()
    assert (got == one).float().mean() >= 0.75  # chunks change only the order of the sums
    with pytest.raises(ValueError, match="chunk"):
        sample(*on_device(logits, temperature, seed32, positions), chunk=BLOCK + 1)


def test_sample_kernel_reads_strided_rows_and_half_precision():
    logits, temperature, seed32, positions = draw_inputs(6, 500, seed=8)
    wide = torch.randn(6, 700)
    wide[:, 100:600] = logits
    got = sample(*on_device(wide[:, 100:600], temperature, seed32, positions)).cpu()
    assert torch.equal(got, sample(*on_device(logits, temperature, seed32, positions)).cpu())
    half = logits.half()
    got = sample(*on_device(half, temperature, seed32, positions)).cpu()
    check_inverse_cdf(half, temperature, seed32, positions, got)


@pytest.mark.gpu
def test_sample_kernel_bfloat16_on_gpu():
    logits, temperature, seed32, positions = draw_inputs(64, 151936, seed=3)
    bf16 = logits.bfloat16()
    got = sample(*on_device(bf16, temperature, seed32, positions)).cpu()
    check_inverse_cdf(bf16, temperature, seed32, positions, got)
    assert (got == sample_torch(bf16, temperature, seed32, positions)).float().mean() >= 0.9


def test_sample_kernel_rejects_mismatched_rows():
    logits, temperature, seed32, positions = on_device(*draw_inputs(4, 50, seed=1))
    with pytest.raises(ValueError, match="temperature"):
        sample(logits, temperature[:3], seed32, positions)
    with pytest.raises(ValueError, match="positions"):
        sample(logits, temperature, seed32, positions[:, None])


def test_the_op_takes_the_kernel_for_gpu_tensors_only():
    assert ops.sample.kind_for(torch.zeros(2, 5)) == "torch"
    if DEVICE == "cuda":
        assert ops.sample.kind_for(torch.zeros(2, 5, device="cuda")) == "triton"
