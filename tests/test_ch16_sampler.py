"""Chapter 16: the device sampler (per-row parameters, counter-based random numbers).

References: plain Python for the top-k/top-p keep set (tests/test_ch04_sampling.py) and for the
softmax the frequencies must follow; torch's argmax for greedy rows.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_ch04_sampling import _reference_keep_set

from minisgl.core import SamplingParams
from minisgl.engine.device_sample import (
    DeviceSampler,
    fold_seed,
    inverse_cdf_sample,
    uniform_from,
)

CPU = torch.device("cpu")


def sample(sampler: DeviceSampler, logits: torch.Tensor, rows: list[int],
           positions: list[int]) -> torch.Tensor:
    r = torch.tensor(rows)
    return sampler.sample(logits, r, r, torch.tensor(positions))


def test_uniform_numbers_are_in_range_and_evenly_spread():
    seeds = torch.tensor([fold_seed(s) for s in range(50)]).repeat_interleave(400)
    positions = torch.arange(400).repeat(50)
    u = uniform_from(seeds, positions)
    assert u.dtype == torch.float32 and u.min() >= 0 and u.max() < 1
    counts = torch.histc(u, bins=20, min=0, max=1)
    expected = len(u) / 20
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 45  # 19 degrees of freedom: p < 0.001 above 43.8
    assert abs(u.mean().item() - 0.5) < 0.01
    # neighbours (same seed, next position; next seed, same position) are not correlated
    grid = u.view(50, 400)
    for a, b in ((grid[:, :-1], grid[:, 1:]), (grid[:-1], grid[1:])):
        corr = torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].item()
        assert abs(corr) < 0.03


def test_seeds_use_all_64_bits_and_reject_nothing():
    assert fold_seed(1) != fold_seed(1 << 32 | 1) != fold_seed(1 << 40)
    assert 0 <= fold_seed(-1) < 2**32 and 0 <= fold_seed(2**70 + 5) < 2**32


def test_frequencies_follow_the_filtered_softmax():
    """Many rows with the same logits and parameters but their own seeds: the share of each
    token is the softmax of the kept logits / temperature (plain Python)."""
    vocab, rows = 12, 20000
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(5)) * 2
    params = SamplingParams(temperature=0.8, top_k=6, top_p=0.9)
    sampler = DeviceSampler(rows, CPU, seed=0)
    sampler.set_rows(list(range(rows)), [params] * rows, uids=list(range(rows)))
    tokens = sample(sampler, logits.expand(rows, vocab).clone(), list(range(rows)), [7] * rows)
    freq = torch.bincount(tokens, minlength=vocab).double() / rows
    scaled = [x / 0.8 for x in logits.tolist()]
    keep = _reference_keep_set(scaled, 6, 0.9)
    total = sum(math.exp(scaled[i]) for i in keep)
    for t in range(vocab):
        expected = math.exp(scaled[t]) / total if t in keep else 0.0
        assert abs(freq[t].item() - expected) < 0.015
    assert all(freq[t] == 0 for t in range(vocab) if t not in keep)


def test_same_seed_same_tokens_whatever_the_row_and_batch():
    vocab = 500
    logits = torch.randn(6, vocab, generator=torch.Generator().manual_seed(1))
    params = [SamplingParams(temperature=1.0, seed=42), SamplingParams(temperature=0.7, seed=7),
              SamplingParams(), SamplingParams(temperature=1.3, top_k=50, seed=42)]
    a = DeviceSampler(16, CPU, seed=1)
    a.set_rows([3, 9, 4, 11], params, uids=[0, 1, 2, 3])
    first = sample(a, logits[:4], [3, 9, 4, 11], [10, 20, 30, 40])
    b = DeviceSampler(16, CPU, seed=99)  # another engine seed: seeded requests do not care
    b.set_rows([0, 5], [params[1], params[0]], uids=[8, 9])
    second = sample(b, torch.stack([logits[1], logits[5], logits[0]]), [0, 1, 5], [20, 3, 10])
    assert second[0] == first[1] and second[2] == first[0]
    assert first[2] == logits[2].argmax()  # the greedy row
    # the position is the counter: the next position draws another number
    draws = {int(sample(a, logits[:1], [3], [p])[0]) for p in range(40)}
    assert len(draws) > 5


def test_unseeded_requests_follow_the_engine_seed_and_their_uid():
    logits = torch.randn(1, 1000)
    tokens = []
    for engine_seed, uid in ((5, 1), (5, 1), (5, 2), (6, 1)):
        s = DeviceSampler(2, CPU, seed=engine_seed)
        s.set_rows([1], [SamplingParams(temperature=1.0)], uids=[uid])
        tokens.append([int(sample(s, logits, [1], [p])[0]) for p in range(30)])
    assert tokens[0] == tokens[1] and tokens[0] != tokens[2] and tokens[0] != tokens[3]


def test_a_reused_row_takes_the_new_parameters():
    s = DeviceSampler(4, CPU, seed=0)
    s.set_rows([2], [SamplingParams(temperature=2.0, top_p=0.5, seed=1)], uids=[0])
    s.set_rows([2], [SamplingParams()], uids=[1])  # greedy now
    logits = torch.randn(3, 100)
    assert torch.equal(sample(s, logits, [2, 2, 2], [1, 2, 3]), logits.argmax(-1))
    assert not s.filtered_host[2] and s.greedy_host[2]


def test_inverse_cdf_never_picks_a_removed_token():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0],
                          [0.2, 0.0, 0.0, 0.0, 0.0]])
    fallback = torch.tensor([1, 4, 0])
    for u in (0.0, 0.25, 0.4999, 0.5, 0.75, 1 - 2**-24):
        got = inverse_cdf_sample(probs, torch.full((3,), u), fallback)
        assert all(probs[i, t] > 0 for i, t in enumerate(got.tolist()))
    assert inverse_cdf_sample(probs, torch.tensor([0.0, 0.9, 0.9]), fallback).tolist() == [1, 4, 0]


@pytest.mark.gpu
def test_device_and_cpu_agree_on_a_gpu():
    logits = torch.randn(8, 3000)
    params = [SamplingParams(temperature=0.6, seed=s) for s in range(4)] + \
        [SamplingParams(temperature=1.0, top_k=20, top_p=0.8, seed=s) for s in range(4)]
    got = {}
    for device in (CPU, torch.device("cuda")):
        s = DeviceSampler(8, device, seed=0)
        s.set_rows(list(range(8)), params, uids=list(range(8)))
        rows = torch.arange(8)
        got[device.type] = s.sample(logits.to(device), rows, rows.to(device),
                                    torch.arange(8, device=device)).cpu()
    # the numbers are the same; a token differs only where two cdf sums round differently
    assert (got["cpu"] == got["cuda"]).float().mean() >= 0.75
