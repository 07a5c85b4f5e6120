"""Chapter 4: sampling against plain-Python references."""

from __future__ import annotations

import math
import random

import pytest
import torch

from minisgl.core import SamplingParams
from minisgl.engine.sample import Sampler
from minisgl.ops.sampling import top_k_top_p_filter


def _reference_keep_set(row: list[float], top_k: int, top_p: float) -> set[int]:
    """Indices kept by top-k then top-p, written with Python lists and sorted()."""
    order = sorted(range(len(row)), key=lambda i: -row[i])
    if top_k > 0:
        order = order[:top_k]
    peak = max(row[i] for i in order)
    weights = [math.exp(row[i] - peak) for i in order]
    total = sum(weights)
    kept, mass = [], 0.0
    for i, w in zip(order, weights):
        if kept and mass >= top_p:
            break
        kept.append(i)
        mass += w / total
    return set(kept)


def test_filter_matches_python_reference_per_row():
    rng = random.Random(0)
    for trial in range(20):
        batch, vocab = 6, 50
        logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(trial)) * 3
        top_k = torch.tensor([rng.choice([-1, 1, 3, 10, 50]) for _ in range(batch)])
        top_p = torch.tensor([rng.choice([1.0, 0.9, 0.5, 0.05]) for _ in range(batch)])
        out = top_k_top_p_filter(logits, top_k, top_p)
        for b in range(batch):
            kept = set(torch.isfinite(out[b]).nonzero().flatten().tolist())
            # ties at the cut-off mass are measure-zero with random floats, but allow fp slack
            assert kept == _reference_keep_set(logits[b].tolist(), int(top_k[b]), float(top_p[b]))
            assert torch.equal(out[b][list(kept)], logits[b][list(kept)])


def test_greedy_rows_take_argmax_in_a_mixed_batch():
    logits = torch.randn(4, 1000)
    params = [SamplingParams(), SamplingParams(temperature=1.0),
              SamplingParams(temperature=0.5, top_k=1), SamplingParams(temperature=2.0, top_p=0.3)]
    tokens = Sampler(seed=3).sample(logits, params)
    argmax = logits.argmax(-1)
    assert tokens[0] == argmax[0] and tokens[2] == argmax[2]
    assert tokens.dtype == torch.int64 and tokens.shape == (4,)


def test_sampled_frequencies_follow_the_filtered_softmax():
    vocab, draws = 12, 20000
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(5)) * 2
    params = SamplingParams(temperature=0.8, top_k=6, top_p=0.9)
    sampler = Sampler(seed=11)
    tokens = sampler.sample(logits.expand(draws, vocab).clone(), [params] * draws)
    freq = torch.bincount(tokens, minlength=vocab).float() / draws
    keep = _reference_keep_set((logits / 0.8).tolist(), 6, 0.9)
    expected = torch.zeros(vocab)
    scaled = (logits / 0.8)[list(keep)].softmax(-1)
    expected[list(keep)] = scaled
    assert (freq - expected).abs().max() < 0.015
    assert freq[[i for i in range(vocab) if i not in keep]].sum() == 0


def test_seeded_sampler_is_reproducible():
    logits = torch.randn(8, 300)
    params = [SamplingParams(temperature=1.0)] * 8
    assert torch.equal(Sampler(seed=1).sample(logits, params), Sampler(seed=1).sample(logits, params))


@pytest.mark.parametrize("bad", [dict(temperature=-0.1), dict(temperature=float("nan")),
                                 dict(top_p=0.0), dict(top_p=1.5), dict(top_k=0),
                                 dict(top_k=-2), dict(max_tokens=0)])
def test_bad_sampling_params_are_rejected(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SamplingParams(**bad)


def test_row_count_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 rows"):
        Sampler(seed=0).sample(torch.randn(2, 5), [SamplingParams()])
