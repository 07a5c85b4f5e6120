"""The reference `run()` of every Definition, as the Python source a FlashInfer Trace stores.

Each is plain torch written for clarity, not speed, and is the ground truth the benchmark checks
every solution against (chapter 22). Model constants (heads, head size, top-k) are written into
the source as upper-case names, as flashinfer-bench's own definitions do; `render` fills them in.
"""

from __future__ import annotations

RMSNORM = '''import torch


def run(hidden_states, weight, eps):
    """weight * (x / sqrt(mean(x^2) + eps)), normalised in fp32 and rounded to x's dtype before
    the weight multiplies it (Hugging Face's order of operations)."""
    x = hidden_states.float()
    normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * normed.to(hidden_states.dtype)
'''

FUSED_ADD_RMSNORM = '''import torch


def run(hidden_states, residual, weight, eps):
    """The residual stream s = hidden_states + residual, and RMSNorm(s) (as rmsnorm_h*)."""
    total = hidden_states + residual
    x = total.float()
    normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * normed.to(total.dtype), total
'''

SILU_AND_MUL = '''import torch
import torch.nn.functional as F


def run(x):
    """silu(gate) * up, where x holds gate (first half of the last axis) then up."""
    half = x.shape[-1] // 2
    return F.silu(x[:, :half]) * x[:, half:]
'''

ROPE = '''import torch

NUM_QO_HEADS = {num_qo_heads}
NUM_KV_HEADS = {num_kv_heads}
HEAD_DIM = {head_dim}


def _norm(x, weight, eps):
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x, cos, sin):
    """Rotate each channel pair (i, i + HEAD_DIM / 2) by the token's angle ("neox" layout)."""
    half = HEAD_DIM // 2
    pair = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + pair * sin[:, None, :]


def run({signature}):
    """q and k of every token from the merged q|k|v projection: {what}."""
    q_end = NUM_QO_HEADS * HEAD_DIM
    k_end = q_end + NUM_KV_HEADS * HEAD_DIM
    q = qkv[:, :q_end].reshape(-1, NUM_QO_HEADS, HEAD_DIM)
    k = qkv[:, q_end:k_end].reshape(-1, NUM_KV_HEADS, HEAD_DIM)
{norm}    cos = cos_cache[positions.long()].to(qkv.dtype)
    sin = sin_cache[positions.long()].to(qkv.dtype)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)
'''
ROPE_NORM_LINES = ("    q = _norm(q, q_norm_weight, eps)\n"
                   "    k = _norm(k, k_norm_weight, eps)\n")

STORE_KV = '''import torch


def run(k_cache, v_cache, indices, k, v):
    """The pool after writing token i's K and V rows into slot indices[i] (distinct slots)."""
    k_cache_out, v_cache_out = k_cache.clone(), v_cache.clone()
    k_cache_out[indices.long()] = k
    v_cache_out[indices.long()] = v
    return k_cache_out, v_cache_out
'''

EMBEDDING = '''import torch


def run(weight, ids, start):
    """Row ids[t] - start of this shard's table for ids in [start, start + vocab_shard), else 0."""
    local = ids.long() - start
    owned = (local >= 0) & (local < weight.shape[0])
    out = torch.zeros(ids.shape[0], weight.shape[1], dtype=weight.dtype, device=weight.device)
    out[owned] = weight[local[owned]]
    return out
'''

MOE = '''import torch
import torch.nn.functional as F

TOP_K = {top_k}


def run(hidden_states, router_logits, w13, w2, normalize):
    """Each token's TOP_K most probable experts (softmax in fp32, weights renormalised to sum 1
    when `normalize`), each a SiLU-gated MLP (w13: gate rows then up rows; w2: down), summed
    with the routing weights in fp32."""
    probs = router_logits.float().softmax(dim=-1)
    weights, experts = probs.topk(TOP_K, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros(hidden_states.shape, dtype=torch.float32, device=hidden_states.device)
    for t in range(hidden_states.shape[0]):
        for j in range(TOP_K):
            e = int(experts[t, j])
            h = w13[e] @ hidden_states[t]
            gate, up = h[: h.shape[0] // 2], h[h.shape[0] // 2:]
            out[t] += weights[t, j] * (w2[e] @ (F.silu(gate) * up)).float()
    return out.to(hidden_states.dtype)
'''

SAMPLING = '''import torch


def run(logits, top_k, top_p, u):
    """One token per row from softmax(logits) cut to the row's top-k (k <= 0: no cut) and top-p
    (p == 1: no cut) sets, drawn by inverse CDF with the row's uniform number u in [0, 1): the
    first token (in vocabulary order) whose cumulative probability exceeds u * total."""
    sorted_logits, order = logits.float().sort(dim=-1, descending=True)
    rank = torch.arange(logits.shape[1], device=logits.device).expand_as(sorted_logits)
    drop = rank >= torch.where(top_k > 0, top_k, logits.shape[1])[:, None]
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # the mass of the more likely tokens
    drop |= (before >= top_p[:, None]) & (top_p[:, None] < 1)
    drop[:, 0] = False  # the most likely token always stays
    kept = torch.empty_like(sorted_logits).scatter_(-1, order,
                                                    sorted_logits.masked_fill(drop, float("-inf")))
    p = kept.softmax(dim=-1)
    cdf = p.cumsum(dim=-1)
    token = torch.searchsorted(cdf, (u[:, None] * cdf[:, -1:]), right=True).squeeze(1)
    token = token.clamp(max=logits.shape[1] - 1)
    ok = p.gather(1, token[:, None]).squeeze(1) > 0
    return torch.where(ok, token, kept.argmax(dim=-1))
'''

GQA_PAGED_DECODE = '''import torch


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    """Each request's one new query attends over its whole sequence: the KV rows at pages
    kv_indices[kv_indptr[b]:kv_indptr[b + 1]] (page size 1). The query heads that share a KV
    head are its group (grouped-query attention). Computed in fp32."""
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    out = torch.zeros_like(q)
    for b in range(batch):
        pages = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        k = k_cache[pages, 0].float()  # [L, kv_heads, dim]
        v = v_cache[pages, 0].float()
        qb = q[b].float().view(kv_heads, group, dim)
        scores = torch.einsum("hgd,lhd->hgl", qb, k) * sm_scale
        out[b] = torch.einsum("hgl,lhd->hgd", scores.softmax(dim=-1), v).reshape(heads, dim)
    return out
'''

GQA_PAGED_PREFILL = '''import torch


def run(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    """Request b's new queries q[qo_indptr[b]:qo_indptr[b + 1]] attend over its sequence (pages
    kv_indices[kv_indptr[b]:kv_indptr[b + 1]], page size 1), of which they are the last tokens:
    query i of n may see keys 0 .. L - n + i (causal). fp32 inside."""
    heads, dim = q.shape[1], q.shape[2]
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    out = torch.zeros_like(q)
    for b in range(qo_indptr.shape[0] - 1):
        q0, q1 = int(qo_indptr[b]), int(qo_indptr[b + 1])
        pages = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        k = k_cache[pages, 0].float()
        v = v_cache[pages, 0].float()
        n, length = q1 - q0, pages.shape[0]
        qb = q[q0:q1].float().view(n, kv_heads, group, dim)
        scores = torch.einsum("nhgd,lhd->hgnl", qb, k) * sm_scale
        visible = torch.arange(length)[None, :] <= (length - n + torch.arange(n))[:, None]
        scores = scores.masked_fill(~visible.to(scores.device), float("-inf"))
        o = torch.einsum("hgnl,lhd->nhgd", scores.softmax(dim=-1), v)
        out[q0:q1] = o.reshape(n, heads, dim).to(q.dtype)
    return out
'''


def render(template: str, **constants: object) -> str:
    """The template with its {name} fields filled in (other braces are not used)."""
    return template.format(**constants)
