"""Every op the engine runs, described as a FlashInfer Trace Definition (chapter 21).

An `OpSpec` ties three views of one op of the registry (minisgl.ops, same name) together:

- the engine's call (`site`): the op's arguments, which are already its canonical arguments (the
  signature every solution of the op takes), become a `Call`, or None where a call is not an
  instance of the Definition;
- the Definition (`definition`): name, axes (model constants fixed, batch-like axes variable),
  inputs, outputs and the reference `run()` of references.py;
- a Workload (`workload`): the variable axes of one call and its input tensors, ready to save, and
  the way back (`run`): a solution called on a saved workload's inputs.

Definition names follow flashinfer-bench where it has the op (gqa_paged_decode_h32_kv8_d128_ps1,
rmsnorm_h4096, fused_add_rmsnorm_h4096, ...); the engine's own ops get names in the same style.
Only numbers that never change for a model are constant axes; the rest are variables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from flashinfer_bench.data import AxisConst, AxisVar, Definition, TensorSpec

from . import references as ref

Inputs = dict[str, Any]  # input name -> tensor or Python scalar


@dataclass
class Call:
    """One call of an op: its canonical arguments, and what the call site needs to finish."""

    args: tuple
    keep: Any = None


def pow2_bucket(n: int) -> int:
    """The shape bucket of a size: the next power of two (0 stays 0)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def const(value: int, description: str | None = None) -> AxisConst:
    return AxisConst(type="const", value=value, description=description)


def var(description: str) -> AxisVar:
    return AxisVar(type="var", description=description)


def spec(shape: list[str] | None, dtype: torch.dtype | str, description: str | None = None
         ) -> TensorSpec:
    name = dtype if isinstance(dtype, str) else dtype_name(dtype)
    return TensorSpec(shape=shape, dtype=name, description=description)


@dataclass
class OpSpec:
    """Base class: subclasses fill in the op's call site, Definition and Workload."""

    op: str  # the key of OPS and of the solution registry
    op_type: str  # the Definition's op_type (FlashInfer Trace's category)
    bucket_axis: str  # the variable axis whose power-of-two bucket `apply` keys its choice on
    exact: bool = False  # outputs must equal the reference bit for bit (copies, token ids)
    low_precision_atol: float = 1e-2  # bf16/fp16 atol (FlashInfer-Bench's); see tolerance()
    opaque: bool = True  # ops called inside this one are part of it
    record_after: bool = False  # record after the call (inputs it reads are written by it)
    shared_inputs: tuple[str, ...] = ()  # weights and tables: saved once, not per workload
    tags: list[str] = field(default_factory=list)

    # --- the engine's side -------------------------------------------------------------------
    def site(self, *args: Any, **kwargs: Any) -> Call | None:
        return Call(args)

    def finish(self, call: Call, out: Any) -> Any:
        """What the call site returns, from the canonical output of a solution."""
        return out

    def outputs(self, call: Call, out: Any) -> tuple:
        """The Definition's outputs from what the call site returned (saved with a workload,
        so a test can check the reference against what the engine computed)."""
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    # --- the Definition ----------------------------------------------------------------------
    def name(self, call: Call) -> str:
        raise NotImplementedError

    def definition(self, call: Call) -> Definition:
        raise NotImplementedError

    def axes(self, call: Call) -> dict[str, int]:
        """The variable axes of this call (cheap: shapes only)."""
        raise NotImplementedError

    def inputs(self, call: Call) -> Inputs:
        """The Definition's inputs for this call (tensors may still live on the device)."""
        raise NotImplementedError

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        """Call a solution (canonical signature) on a workload's inputs; its outputs as a tuple
        in the Definition's output order."""
        raise NotImplementedError

    # --- shared helpers ----------------------------------------------------------------------
    def dedup_key(self, axes: dict[str, int]) -> tuple:
        """Workloads whose variable axes fall in the same buckets count as one."""
        return tuple(pow2_bucket(v) for k, v in sorted(axes.items()) if k in self.dedup_axes())

    def dedup_axes(self) -> tuple[str, ...]:
        return (self.bucket_axis,)

    def bucket(self, axes: dict[str, int]) -> int:
        return pow2_bucket(axes[self.bucket_axis])

    def make(self, call: Call, name: str, description: str, axes: dict, inputs: dict,
             outputs: dict, reference: str, constraints: list[str] | None = None
             ) -> Definition:
        return Definition(name=name, op_type=self.op_type, description=description,
                          tags=["minisgl", f"minisgl:op={self.op}", *self.tags], axes=axes,
                          inputs=inputs, outputs=outputs, reference=reference,
                          constraints=constraints or [])


def tolerance(spec_: OpSpec, dtype: torch.dtype) -> tuple[float, float] | None:
    """(atol, rtol) for comparing a solution's float outputs, None when they must be equal.

    FlashInfer-Bench compares bf16/fp16 kernels at atol = rtol = 1e-2; fp32 (the CPU) is held to
    1e-5, the bound chapter 20's kernel tests use. An op may widen the bf16/fp16 atol where
    correct kernels differ by more than 1e-2 through rounding alone (RopeOp says why)."""
    if spec_.exact:
        return None
    if dtype == torch.float32:
        return 1e-5, 1e-5
    return spec_.low_precision_atol, 1e-2


# ----------------------------------------------------------------------------------------------
# Normalisation and activation
# ----------------------------------------------------------------------------------------------
class RMSNormOp(OpSpec):
    """ops.rms_norm(x, weight, eps)."""

    def site(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> Call | None:
        if x.dim() != 2:
            return None  # only the hidden-state norms; q/k norms belong to RoPE
        return Call((x, weight, eps))

    def name(self, call: Call) -> str:
        return f"rmsnorm_h{call.args[0].shape[1]}"

    def axes(self, call: Call) -> dict[str, int]:
        return {"batch_size": call.args[0].shape[0]}

    def definition(self, call: Call) -> Definition:
        x = call.args[0]
        rows = ["batch_size", "hidden_size"]
        return self.make(
            call, self.name(call), "RMSNorm of each token's hidden state (final norm, layer norms "
            "without a residual yet).",
            {"batch_size": var("tokens in the batch"), "hidden_size": const(x.shape[1])},
            {"hidden_states": spec(rows, x.dtype), "weight": spec(["hidden_size"], x.dtype),
             "eps": spec(None, "float32")},
            {"output": spec(rows, x.dtype)}, ref.RMSNORM)

    def inputs(self, call: Call) -> Inputs:
        x, weight, eps = call.args
        return {"hidden_states": x, "weight": weight, "eps": float(eps)}

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        return (fn(inputs["hidden_states"], inputs["weight"], inputs["eps"]),)


class FusedAddRMSNormOp(OpSpec):
    """ops.fused_add_rms_norm(x, residual, weight, eps) -> (norm(x + residual), x + residual)."""

    def site(self, x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
             eps: float) -> Call | None:
        if residual is None:
            return None  # the first layer's norm has no residual to add: runs as written
        return Call((x, residual, weight, eps))

    def name(self, call: Call) -> str:
        return f"fused_add_rmsnorm_h{call.args[0].shape[1]}"

    def axes(self, call: Call) -> dict[str, int]:
        return {"batch_size": call.args[0].shape[0]}

    def definition(self, call: Call) -> Definition:
        x = call.args[0]
        rows = ["batch_size", "hidden_size"]
        return self.make(
            call, self.name(call), "Add the residual stream, then RMSNorm: one pass over memory "
            "in a fused kernel. Returns the normalised states and the new residual.",
            {"batch_size": var("tokens in the batch"), "hidden_size": const(x.shape[1])},
            {"hidden_states": spec(rows, x.dtype), "residual": spec(rows, x.dtype),
             "weight": spec(["hidden_size"], x.dtype), "eps": spec(None, "float32")},
            {"output": spec(rows, x.dtype), "residual_out": spec(rows, x.dtype)},
            ref.FUSED_ADD_RMSNORM)

    def inputs(self, call: Call) -> Inputs:
        x, residual, weight, eps = call.args
        return {"hidden_states": x, "residual": residual, "weight": weight, "eps": float(eps)}

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        return tuple(fn(inputs["hidden_states"], inputs["residual"], inputs["weight"],
                        inputs["eps"]))


class SiluAndMulOp(OpSpec):
    """ops.silu_and_mul(x) on the merged gate|up projection."""

    def site(self, x: torch.Tensor) -> Call | None:
        return Call((x,)) if x.dim() == 2 else None

    def name(self, call: Call) -> str:
        return f"silu_and_mul_i{call.args[0].shape[1] // 2}"

    def axes(self, call: Call) -> dict[str, int]:
        return {"num_tokens": call.args[0].shape[0]}

    def definition(self, call: Call) -> Definition:
        x = call.args[0]
        return self.make(
            call, self.name(call), "The gated activation of the MLP: silu(gate) * up.",
            {"num_tokens": var("tokens in the batch"),
             "two_intermediate": const(x.shape[1], "gate and up halves"),
             "intermediate_size": const(x.shape[1] // 2)},
            {"x": spec(["num_tokens", "two_intermediate"], x.dtype)},
            {"out": spec(["num_tokens", "intermediate_size"], x.dtype)}, ref.SILU_AND_MUL)

    def inputs(self, call: Call) -> Inputs:
        return {"x": call.args[0]}

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        return (fn(inputs["x"]),)


class RopeOp(OpSpec):
    """ops.rope(qkv, positions, cos, sin, num_qo_heads, num_kv_heads, head_dim, q_norm_weight,
    k_norm_weight, eps) -> (q, k), the arguments of kernel.triton.qk_norm_rope."""

    # An output is x1 * cos - x2 * sin: two products of a normalised head (values up to ~4) that
    # cancel where the output is near 0. The reference and the torch path (like Hugging Face)
    # round each product to bf16, the fused kernel only their sum; the two differ by up to one
    # bf16 step of the products (1/32 for products in [2, 4)) however small the output. At
    # atol 1e-2 that failed the correct Triton kernel on 1 element of 33 million (a 16384-token
    # prefill on the H200, 2026-12-02; reproduced on a CPU by rounding once vs three times).
    # 5e-2 covers it (OPS below sets it); a wrong rotation, position or norm is off by order 1
    # and still fails.

    def name(self, call: Call) -> str:
        h, kv, d, qw = call.args[4], call.args[5], call.args[6], call.args[7]
        return f"{'qk_norm_rope' if qw is not None else 'rope'}_h{h}_kv{kv}_d{d}"

    def axes(self, call: Call) -> dict[str, int]:
        return {"num_tokens": call.args[0].shape[0]}

    def definition(self, call: Call) -> Definition:
        qkv, _, cos, _, h, kv, d, qw, _, _ = call.args
        norm = qw is not None
        inputs = {"qkv": spec(["num_tokens", "qkv_size"], qkv.dtype,
                              "q | k | v projection of each token"),
                  "positions": spec(["num_tokens"], "int64"),
                  "cos_cache": spec(["max_position", "head_dim"], cos.dtype,
                                    "cos of position * frequency (neox layout)"),
                  "sin_cache": spec(["max_position", "head_dim"], cos.dtype)}
        if norm:
            inputs |= {"q_norm_weight": spec(["head_dim"], qkv.dtype),
                       "k_norm_weight": spec(["head_dim"], qkv.dtype),
                       "eps": spec(None, "float32")}
        signature = ", ".join(inputs)
        what = ("normalised per head (Qwen3's q_norm/k_norm), then rotated" if norm
                else "rotated by RoPE")
        source = ref.render(ref.ROPE, num_qo_heads=h, num_kv_heads=kv, head_dim=d,
                            signature=signature, what=what,
                            norm=ref.ROPE_NORM_LINES if norm else "")
        return self.make(
            call, self.name(call), f"Rotary position embedding of q and k: {what}.",
            {"num_tokens": var("tokens in the batch"), "num_qo_heads": const(h),
             "num_kv_heads": const(kv), "head_dim": const(d),
             "qkv_size": const((h + 2 * kv) * d), "max_position": const(cos.shape[0])},
            inputs,
            {"q": spec(["num_tokens", "num_qo_heads", "head_dim"], qkv.dtype),
             "k": spec(["num_tokens", "num_kv_heads", "head_dim"], qkv.dtype)},
            source)

    def inputs(self, call: Call) -> Inputs:
        qkv, positions, cos, sin, _, _, _, qw, kw, eps = call.args
        out = {"qkv": qkv, "positions": positions.long(), "cos_cache": cos, "sin_cache": sin}
        if qw is not None:
            out |= {"q_norm_weight": qw, "k_norm_weight": kw, "eps": float(eps)}
        return out

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        c = consts
        norm = "q_norm_weight" in inputs
        q, k = fn(inputs["qkv"], inputs["positions"], inputs["cos_cache"], inputs["sin_cache"],
                  c["num_qo_heads"], c["num_kv_heads"], c["head_dim"],
                  inputs.get("q_norm_weight"), inputs.get("k_norm_weight"),
                  inputs["eps"] if norm else 0.0)
        return q, k


# ----------------------------------------------------------------------------------------------
# Memory ops (chapter 19's kernels)
# ----------------------------------------------------------------------------------------------
def compact_slots(slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct slots in ascending order, and each entry's index among them: a pool of
    only the rows a call touches, so a workload saves kilobytes, not the whole KV pool."""
    rows, where = torch.unique(slots.long(), return_inverse=True)
    return rows, where.to(torch.int32)


class StoreKVOp(OpSpec):
    """ops.store_kv(k_cache, v_cache, indices, k, v): writes the pool in place."""

    def outputs(self, call: Call, out: Any) -> tuple:
        k_cache, v_cache, indices = call.args[:3]
        rows, _ = compact_slots(indices)
        return k_cache[rows], v_cache[rows]

    def name(self, call: Call) -> str:
        k = call.args[3]
        return f"minisgl_store_kv_{dtype_name(k.dtype).replace('bfloat16', 'bf16')}" \
               f"_h{k.shape[1]}_d{k.shape[2]}"

    def axes(self, call: Call) -> dict[str, int]:
        n = call.args[2].shape[0]
        return {"num_tokens": n, "num_slots": n}

    def definition(self, call: Call) -> Definition:
        k = call.args[3]
        row = ["num_slots", "num_kv_heads", "head_dim"]
        new = ["num_tokens", "num_kv_heads", "head_dim"]
        return self.make(
            call, self.name(call), "Write the new tokens' K and V rows into the paged KV pool "
            "(k_cache[indices[i]] = k[i]); the engine writes in place, the Definition returns "
            "the pool after. Workloads keep only the slots a call writes.",
            {"num_slots": var("rows (token slots) in the pool"),
             "num_tokens": var("new tokens"), "num_kv_heads": const(k.shape[1]),
             "head_dim": const(k.shape[2])},
            {"k_cache": spec(row, k.dtype), "v_cache": spec(row, k.dtype),
             "indices": spec(["num_tokens"], "int32", "distinct slot of each new token"),
             "k": spec(new, k.dtype), "v": spec(new, k.dtype)},
            {"k_cache_out": spec(row, k.dtype), "v_cache_out": spec(row, k.dtype)},
            ref.STORE_KV, ["num_tokens <= num_slots"])

    def inputs(self, call: Call) -> Inputs:
        k_cache, v_cache, indices, k, v = call.args
        rows, where = compact_slots(indices)
        return {"k_cache": k_cache[rows], "v_cache": v_cache[rows], "indices": where,
                "k": k, "v": v}

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        k_cache, v_cache = inputs["k_cache"].clone(), inputs["v_cache"].clone()
        fn(k_cache, v_cache, inputs["indices"], inputs["k"], inputs["v"])
        return k_cache, v_cache


class EmbeddingOp(OpSpec):
    """ops.embedding(weight, ids, start=0, length=None)."""

    def site(self, weight: torch.Tensor, ids: torch.Tensor, start: int = 0,
             length: int | None = None) -> Call | None:
        return Call((weight, ids, start, weight.shape[0] if length is None else length))

    def finish(self, call: Call, out: Any) -> Any:
        return out.view(*call.args[1].shape, -1)

    def outputs(self, call: Call, out: Any) -> tuple:
        return (out.reshape(-1, out.shape[-1]),)

    def name(self, call: Call) -> str:
        w = call.args[0]
        return f"minisgl_embedding_{dtype_name(w.dtype).replace('bfloat16', 'bf16')}" \
               f"_d{w.shape[1]}"

    def axes(self, call: Call) -> dict[str, int]:
        return {"num_tokens": call.args[1].numel(), "vocab_shard": call.args[3]}

    def definition(self, call: Call) -> Definition:
        w = call.args[0]
        return self.make(
            call, self.name(call), "Vocabulary-parallel embedding lookup: weight[ids - start] "
            "for the ids this rank owns, zeros for the others.",
            {"vocab_shard": var("rows of the table on this rank"),
             "num_tokens": var("tokens to look up"), "hidden_size": const(w.shape[1])},
            {"weight": spec(["vocab_shard", "hidden_size"], w.dtype),
             "ids": spec(["num_tokens"], "int32"),
             "start": spec(None, "int64", "first vocabulary id of this rank's rows")},
            {"out": spec(["num_tokens", "hidden_size"], w.dtype)}, ref.EMBEDDING)

    def inputs(self, call: Call) -> Inputs:
        weight, ids, start, length = call.args
        return {"weight": weight[:length], "ids": ids.flatten().int(), "start": int(start)}

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        w = inputs["weight"]
        return (fn(w, inputs["ids"], inputs["start"], w.shape[0]),)


# ----------------------------------------------------------------------------------------------
# MoE (chapter 18) and sampling (chapters 4 and 16)
# ----------------------------------------------------------------------------------------------
class MoEOp(OpSpec):
    """ops.moe(x, router_logits, w13, w2, top_k, normalize) (moe.fused_moe with a backend asked
    for by name, in tests and benchmarks, skips the registry and is not traced)."""

    def name(self, call: Call) -> str:
        x, _, w13, _, top_k, _ = call.args
        return f"moe_topk{top_k}_e{w13.shape[0]}_h{x.shape[1]}_i{w13.shape[1] // 2}"

    def axes(self, call: Call) -> dict[str, int]:
        return {"num_tokens": call.args[0].shape[0]}

    def definition(self, call: Call) -> Definition:
        x, logits, w13, _, top_k, _ = call.args
        return self.make(
            call, self.name(call), "Mixture-of-Experts block (Qwen3-MoE): softmax top-k routing "
            "and SiLU-gated expert MLPs, weighted sum per token.",
            {"num_tokens": var("tokens in the batch"), "num_experts": const(w13.shape[0]),
             "top_k": const(top_k), "hidden_size": const(x.shape[1]),
             "two_intermediate": const(w13.shape[1]),
             "intermediate_size": const(w13.shape[1] // 2)},
            {"hidden_states": spec(["num_tokens", "hidden_size"], x.dtype),
             "router_logits": spec(["num_tokens", "num_experts"], logits.dtype),
             "w13": spec(["num_experts", "two_intermediate", "hidden_size"], w13.dtype),
             "w2": spec(["num_experts", "hidden_size", "intermediate_size"], w13.dtype),
             "normalize": spec(None, "bool", "renormalise the top-k weights to sum 1")},
            {"output": spec(["num_tokens", "hidden_size"], x.dtype)},
            ref.render(ref.MOE, top_k=top_k))

    def inputs(self, call: Call) -> Inputs:
        x, logits, w13, w2, _, normalize = call.args
        return {"hidden_states": x, "router_logits": logits, "w13": w13, "w2": w2,
                "normalize": bool(normalize)}

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        return (fn(inputs["hidden_states"], inputs["router_logits"], inputs["w13"], inputs["w2"],
                   consts["top_k"], inputs["normalize"]),)


class SamplingOp(OpSpec):
    """ops.top_k_top_p_sampling(logits, top_k, top_p, u): the rows that sample with a top-k or
    top-p cut (greedy batches take the argmax and never get here)."""

    def name(self, call: Call) -> str:
        return f"top_k_top_p_sampling_from_logits_v{call.args[0].shape[1]}"

    def axes(self, call: Call) -> dict[str, int]:
        return {"batch_size": call.args[0].shape[0]}

    def definition(self, call: Call) -> Definition:
        logits = call.args[0]
        return self.make(
            call, self.name(call), "Top-k / top-p sampling from temperature-scaled logits, "
            "drawn by inverse CDF from one uniform number per row (the engine's counter-based "
            "random numbers), so the result is deterministic.",
            {"batch_size": var("requests"), "vocab_size": const(logits.shape[1])},
            {"logits": spec(["batch_size", "vocab_size"], "float32"),
             "top_k": spec(["batch_size"], "int64", "<= 0: no top-k cut"),
             "top_p": spec(["batch_size"], "float32", "1: no top-p cut"),
             "u": spec(["batch_size"], "float32", "uniform number in [0, 1) per row")},
            {"samples": spec(["batch_size"], "int64")}, ref.SAMPLING)

    def inputs(self, call: Call) -> Inputs:
        logits, top_k, top_p, u = call.args
        return {"logits": logits.float(), "top_k": top_k.long(), "top_p": top_p.float(),
                "u": u.float()}

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        return (fn(inputs["logits"], inputs["top_k"], inputs["top_p"], inputs["u"]),)


# ----------------------------------------------------------------------------------------------
# Attention (chapters 6 and 20): recorded at ops.attention, after the backend stored the K/V
# ----------------------------------------------------------------------------------------------
class AttentionOp(OpSpec):
    """ops.attention(backend, q, k, v, layer_id, batch), recorded only: the backend (torch or
    Triton) is chosen once per engine, so `apply` picks it at start-up (apply.py).

    Canonical solution signature: the Definition's inputs, in order (FlashInfer's paged layout
    with page size 1: the engine's page table maps positions to token slots)."""

    def site(self, backend: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             layer_id: int, batch: Any) -> Call | None:
        return Call((backend, q, layer_id, batch), keep=batch.is_prefill)

    def name(self, call: Call) -> str:
        backend, q = call.args[0], call.args[1]
        kind = "prefill_causal" if call.keep else "decode"
        return f"gqa_paged_{kind}_h{q.shape[1]}_kv{backend.num_kv_heads}_d{q.shape[2]}_ps1"

    def axes(self, call: Call) -> dict[str, int]:
        batch = call.args[3]
        total = sum(r.seq_len for r in batch.reqs)
        axes = {"batch_size": batch.size, "num_kv_indices": total, "len_indptr": batch.size + 1,
                "num_pages": total}
        if call.keep:
            axes["total_q"] = call.args[1].shape[0]
        return axes

    def dedup_axes(self) -> tuple[str, ...]:
        return ("batch_size", "num_kv_indices", "total_q")

    def definition(self, call: Call) -> Definition:
        backend, q = call.args[0], call.args[1]
        h, d, kv = q.shape[1], q.shape[2], backend.num_kv_heads
        cache = ["num_pages", "page_size", "num_kv_heads", "head_dim"]
        prefill = call.keep
        rows = "total_q" if prefill else "batch_size"
        inputs = {"q": spec([rows, "num_qo_heads", "head_dim"], q.dtype),
                  "k_cache": spec(cache, q.dtype), "v_cache": spec(cache, q.dtype)}
        if prefill:
            inputs["qo_indptr"] = spec(["len_indptr"], "int32", "new tokens of request b: "
                                       "q[qo_indptr[b]:qo_indptr[b + 1]]")
        inputs |= {"kv_indptr": spec(["len_indptr"], "int32"),
                   "kv_indices": spec(["num_kv_indices"], "int32", "page of each token"),
                   "sm_scale": spec(None, "float32")}
        axes = {"batch_size": var("requests"), "num_qo_heads": const(h),
                "num_kv_heads": const(kv), "head_dim": const(d), "page_size": const(1),
                "len_indptr": var("batch_size + 1"), "num_kv_indices": var("KV tokens"),
                "num_pages": var("pages in the (compacted) pool")}
        if prefill:
            axes["total_q"] = var("new tokens of all requests")
        what = ("new tokens of each request over its cached prefix and each other (causal)"
                if prefill else "one new token per request over its whole sequence")
        return self.make(
            call, self.name(call), f"Grouped-query paged attention: {what}. The engine stores "
            "this step's K/V first (store_kv); workloads keep only the pages a call reads.",
            axes, inputs, {"output": spec([rows, "num_qo_heads", "head_dim"], q.dtype)},
            ref.GQA_PAGED_PREFILL if prefill else ref.GQA_PAGED_DECODE,
            ["len_indptr == batch_size + 1"])

    def inputs(self, call: Call) -> Inputs:
        backend, q, layer_id, batch = call.args
        lens = [r.seq_len for r in batch.reqs]
        slots = torch.cat([backend.page_table[r.table_idx, :n] for r, n in zip(batch.reqs, lens)])
        rows, where = compact_slots(slots)
        k_cache = backend.kv_cache.k_cache(layer_id)[rows].unsqueeze(1)
        v_cache = backend.kv_cache.v_cache(layer_id)[rows].unsqueeze(1)
        indptr = torch.tensor([0, *_cumsum(lens)], dtype=torch.int32)
        out = {"q": q, "k_cache": k_cache, "v_cache": v_cache}
        if call.keep:
            out["qo_indptr"] = torch.tensor([0, *_cumsum([r.extend_len for r in batch.reqs])],
                                            dtype=torch.int32)
        return out | {"kv_indptr": indptr, "kv_indices": where,
                      "sm_scale": 1.0 / math.sqrt(q.shape[2])}

    def run(self, fn: Any, inputs: Inputs, consts: dict[str, int]) -> tuple:
        return (fn(**inputs),)


def _cumsum(values: list[int]) -> list[int]:
    out, total = [], 0
    for v in values:
        total += v
        out.append(total)
    return out


OPS: dict[str, OpSpec] = {spec_.op: spec_ for spec_ in [
    RMSNormOp("rmsnorm", "rmsnorm", "batch_size"),
    FusedAddRMSNormOp("fused_add_rmsnorm", "rmsnorm", "batch_size"),
    SiluAndMulOp("silu_and_mul", "activation", "num_tokens"),
    RopeOp("rope", "rope", "num_tokens", low_precision_atol=5e-2,
           shared_inputs=("cos_cache", "sin_cache", "q_norm_weight", "k_norm_weight")),
    StoreKVOp("store_kv", "store_kv", "num_tokens", exact=True, opaque=False),
    EmbeddingOp("embedding", "embedding", "num_tokens", exact=True, shared_inputs=("weight",)),
    MoEOp("moe", "moe", "num_tokens", shared_inputs=("w13", "w2")),
    SamplingOp("sampling", "sampling", "batch_size", exact=True),
    AttentionOp("attention", "gqa_paged", "batch_size", opaque=False, record_after=True),
]}
# rmsnorm weights are small (one row) and saved with each workload.


def spec_for(definition: Definition) -> OpSpec:
    """The OpSpec a Definition was made from (its `minisgl:op=` tag)."""
    for tag in definition.tags:
        if tag.startswith("minisgl:op="):
            return OPS[tag.removeprefix("minisgl:op=")]
    raise KeyError(f"definition {definition.name} was not made by minisgl.trace (no op tag)")
