"""The two memory ops of the paged KV pool (chapter 5): writing new K/V rows at their slots, and
the embedding lookup (reading rows of a table). Their torch code is kernel/torch_ops.py; chapter
19 adds a CUDA kernel for each (ops/cuda_impls.py)."""

from __future__ import annotations

from minisgl.kernel import torch_ops

from .registry import Op

# store_kv(k_cache, v_cache, indices, k, v): k_cache[indices[i]] = k[i], the same for v
store_kv = Op("store_kv", torch_ops.store_cache)
# embedding(weight, ids, start=0, length=None): weight[ids - start] for the ids of this rank's
# rows [start, start + length) of a vocabulary-sharded table, zeros for the others
embedding = Op("embedding", torch_ops.indexing)
