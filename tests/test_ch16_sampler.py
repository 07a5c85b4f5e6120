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
from minisgl.engine.device_sample import DeviceSampler
from minisgl.ops.sampling import fold_seed, inverse_cdf_sample, uniform_from

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


# ---- penalties and log-probabilities (issue 16) ------------------------------------------------


def _reference_penalties(logits: list[float], prompt: list[int], generated: list[int],
                         presence: float, frequency: float, repetition: float) -> list[float]:
    """The definitions, token by token: repetition over prompt + generated tokens (divide a
    positive logit, multiply a negative one), then OpenAI's presence and frequency over the
    generated ones."""
    out = []
    for token, x in enumerate(logits):
        if token in prompt or token in generated:
            x = x / repetition if x > 0 else x * repetition
        count = generated.count(token)
        out.append(x - presence * (count > 0) - frequency * count)
    return out


def test_penalties_follow_the_reference_step_after_step():
    """Greedy rows with random penalties, decoded for a few steps: each step's tokens are the
    argmax of the reference formula over the tokens seen so far (the sampler counts its own
    tokens on the device)."""
    gen = torch.Generator().manual_seed(3)
    vocab, rows = 40, [5, 1, 6, 2]
    sampler = DeviceSampler(8, CPU, seed=0, vocab_size=vocab)
    params = [SamplingParams(presence_penalty=1.5, frequency_penalty=0.7, repetition_penalty=1.3),
              SamplingParams(presence_penalty=-0.5, frequency_penalty=2.0),
              SamplingParams(repetition_penalty=0.6),  # below 1 favours seen tokens
              SamplingParams()]  # no penalty, in the same batch
    prompts = [torch.randint(0, vocab, (int(n),), generator=gen).tolist() for n in (6, 3, 9, 4)]
    generated = [torch.randint(0, vocab, (int(n),), generator=gen).tolist() for n in (3, 5, 0, 2)]
    sampler.set_rows(rows, params, uids=[0, 1, 2, 3])
    sampler.reset_counts(rows[:3], prompts[:3], generated[:3])
    for step in range(6):
        logits = torch.randn(4, vocab, generator=gen) * 3
        tokens = sample(sampler, logits, rows, [20 + step] * 4).tolist()
        for i, p in enumerate(params):
            ref = _reference_penalties(logits[i].tolist(), prompts[i], generated[i],
                                       p.presence_penalty, p.frequency_penalty,
                                       p.repetition_penalty)
            assert tokens[i] == max(range(vocab), key=ref.__getitem__), (step, i)
            generated[i].append(tokens[i])
    for i, row in enumerate(rows[:3]):  # the device counts are the Python counts
        assert sampler.counts[row].tolist() == [generated[i].count(t) for t in range(vocab)]
        assert sampler.in_prompt[row].tolist() == [t in prompts[i] for t in range(vocab)]


def test_apply_penalties_on_random_values_matches_the_formula():
    from minisgl.engine.device_sample import apply_penalties

    gen = torch.Generator().manual_seed(4)
    b, vocab = 6, 30
    logits = torch.randn(b, vocab, generator=gen) * 4
    counts = torch.randint(0, 4, (b, vocab), generator=gen).float() * \
        (torch.rand(b, vocab, generator=gen) < 0.3)
    in_prompt = torch.rand(b, vocab, generator=gen) < 0.2
    presence = torch.rand(b, generator=gen) * 4 - 2
    frequency = torch.rand(b, generator=gen) * 4 - 2
    repetition = torch.rand(b, generator=gen) * 2 + 0.1
    got = apply_penalties(logits, counts, in_prompt, presence, frequency, repetition)
    for i in range(b):
        generated = [t for t in range(vocab) for _ in range(int(counts[i, t]))]
        prompt = [t for t in range(vocab) if in_prompt[i, t]]
        ref = _reference_penalties(logits[i].tolist(), prompt, generated, presence[i].item(),
                                   frequency[i].item(), repetition[i].item())
        assert torch.allclose(got[i], torch.tensor(ref), atol=1e-5)


def test_a_reset_row_forgets_the_previous_request():
    vocab = 10
    s = DeviceSampler(3, CPU, seed=0, vocab_size=vocab)
    s.set_rows([1], [SamplingParams(frequency_penalty=1.0)], uids=[0])
    s.reset_counts([1], [[1, 2]], [[3, 3, 3]])
    s.set_rows([1], [SamplingParams(presence_penalty=1.0)], uids=[1])
    s.reset_counts([1], [[4]], [[5]])
    assert s.counts[1].tolist() == [1.0 if t == 5 else 0.0 for t in range(vocab)]
    assert s.in_prompt[1].nonzero().flatten().tolist() == [4]
    with pytest.raises(RuntimeError, match="vocab_size"):
        DeviceSampler(2, CPU).reset_counts([0], [[1]], [[]])


def test_logprobs_only_for_the_rows_that_asked():
    gen = torch.Generator().manual_seed(6)
    vocab = 50
    s = DeviceSampler(6, CPU, seed=0, vocab_size=vocab)
    params = [SamplingParams(logprobs=3), SamplingParams(), SamplingParams(logprobs=0),
              SamplingParams(temperature=0.5, repetition_penalty=2.0, logprobs=20)]
    rows = [4, 0, 2, 5]
    s.set_rows(rows, params, uids=[0, 1, 2, 3])
    s.reset_counts([5], [[1, 2, 3]], [[]])
    logits = torch.randn(4, vocab, generator=gen) * 3
    tokens = sample(s, logits, rows, [1, 1, 1, 1])
    got = s.logprobs(logits, torch.tensor(rows), tokens)
    assert got.index == [0, 2, 3] and got.top_k == [3, 0, 20]
    for n, i in enumerate(got.index):
        row = logits[i].double().tolist()
        total = math.log(sum(math.exp(x) for x in row))  # of the raw logits, not penalized
        ref = [x - total for x in row]
        assert abs(got.chosen[n].item() - ref[tokens[i]]) < 1e-5
        k = got.top_k[n]
        top = sorted(range(vocab), key=lambda t: -ref[t])[:k]
        assert got.top_ids[n, :k].tolist() == top
        assert all(abs(got.top_logprobs[n, j].item() - ref[t]) < 1e-5 for j, t in enumerate(top))
    s.set_rows(rows, [SamplingParams()] * 4, uids=[4, 5, 6, 7])
    assert s.logprobs(logits, torch.tensor(rows), tokens) is None


@pytest.mark.parametrize("bad", [dict(presence_penalty=2.5), dict(frequency_penalty=-2.01),
                                 dict(frequency_penalty=math.nan), dict(repetition_penalty=0),
                                 dict(repetition_penalty=-1), dict(repetition_penalty=1e9),
                                 dict(logprobs=-1), dict(logprobs=21)])
def test_sampling_params_refuse_out_of_range_penalties_and_logprobs(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SamplingParams(**bad)
