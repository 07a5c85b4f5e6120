"""Which proposed tokens the target model keeps (chapter 24).

One forward pass of the target over [last, d_1, ..., d_k] gives its distribution p_0 .. p_k for
the token after each of them. Every proposal here is deterministic (the n-gram lookup, or the draft
model's greedy tokens), which makes the rules short:

- greedy requests keep d_1 .. d_j while each equals the target's argmax, then add the target's
  own token at the first disagreement (or after d_k): exactly the tokens plain greedy decoding
  would produce, whatever the proposal was;
- sampled requests keep d_i with probability p_{i-1}(d_i); at the first rejection the token is
  drawn from p_{i-1} with d_i removed (renormalized), and after k acceptances one more is drawn
  from p_k. For a proposal that is a fixed token d, P(emit x) = p(d)·[x = d] + (1 - p(d)) ·
  p(x)·[x != d] / (1 - p(d)) = p(x): the output has exactly the target's distribution. (With a
  random draft of distribution q the rule is min(1, p/q) and the residual max(0, p - q); q is a
  point mass here.)
"""

from __future__ import annotations

import torch

from minisgl.ops.sampling import inverse_cdf_sample


def accept_greedy(target: list[int], drafts: list[int]) -> list[int]:
    """target: the target's argmax after each of the k+1 verified tokens; drafts: the k proposed
    tokens. The tokens this step emits: the agreed prefix of drafts, then the target's own."""
    out: list[int] = []
    for want, draft in zip(target, drafts):
        if want != draft:
            break
        out.append(draft)
    out.append(target[len(out)])
    return out


def accepted_lengths(p_drafts: list[list[float]], u_accept: list[list[float]]) -> list[int]:
    """Per request: how many proposals survive, keeping d_i while u_i < p_{i-1}(d_i)."""
    kept = []
    for probs, draws in zip(p_drafts, u_accept):
        j = 0
        while j < len(probs) and draws[j] < probs[j]:
            j += 1
        kept.append(j)
    return kept


def draw_last(probs: torch.Tensor, rejected: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token after the accepted ones, one per row: probs [R, V] is p_j of each request,
    rejected [R] the proposal that p_j turned down (-1 when all were accepted: a plain draw from
    p_k), u [R] the uniform number of the draw."""
    probs = probs.clone()
    hit = rejected >= 0
    rows = hit.nonzero().squeeze(1)
    probs[rows, rejected[rows]] = 0.0  # the residual: p without the rejected token
    # a residual with no mass left (the target gave the rejected token probability 1, which
    # u < p always accepts, so only rounding gets here) falls back to the target's argmax
    return inverse_cdf_sample(probs, u, fallback=probs.argmax(dim=-1))
