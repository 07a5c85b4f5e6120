"""A whole decode step on a CPU in one C++ call (chapter 20): the CPU's answer to CUDA graphs.

A CUDA graph (chapter 15) takes the cost of launching each kernel out of a GPU decode step by
replaying a recorded one. A CPU launches nothing, but a decode step there pays the same kind of
tax one level up: SmolLM2's 30 layers make about 400 op calls through Python, and at batch 1 the
calls cost a third as much as reading the weights. kernel/cpu_ops.py's `decode_step` runs every
layer in C++ (the same linear, norm, RoPE and attention functions the ops call one by one), from
pointers gathered here once: the weights and the K/V pool never move.

It takes a decode batch of a dense Llama/Qwen2/Qwen3 model whose weights and pool are plain fp32
or bf16, in one process (no tensor parallelism), when the cpu attention backend decodes with its
C++ kernel and no trace watches the ops (a trace must see each op: chapter 21). `build` says why
not otherwise, and the engine runs the model's forward op by op, as before.
"""

from __future__ import annotations

import ctypes

import torch

from minisgl.attention.cpu import CpuBackend, CpuKernelMetadata
from minisgl.core import Batch
from minisgl.distributed import get_tp_info
from minisgl.kernel import cpu_attention, cpu_ops
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.models.base import MLP, CausalLM
from minisgl.ops import hook


def plain(t: object, dtype: torch.dtype, shape: tuple[int, ...]) -> bool:
    """t is None or a contiguous, unpacked CPU tensor of this dtype and shape (not an int8
    weight packed for fbgemm, chapter 26, which is no tensor at all)."""
    return t is None or (isinstance(t, torch.Tensor) and t.device.type == "cpu"
                         and not t.is_mkldnn and t.dtype == dtype and t.is_contiguous()
                         and tuple(t.shape) == shape)


def weight_fits(t: object, dtype: torch.dtype, shape: tuple[int, int], packed: bool) -> bool:
    """A layer's [out, in] weight as the step reads it: plain, or (all layers alike) in
    pack_panels' panels [out / 16, in / kIn, 16, kIn]."""
    if not packed:
        return plain(t, dtype, shape)
    step = cpu_ops.PANEL_INPUTS[dtype]
    return (cpu_ops.is_panels(t) and t.dtype == dtype
            and tuple(t.shape) == (shape[0] // cpu_ops.PANEL, shape[1] // step,
                                   cpu_ops.PANEL, step))


class CpuStepRunner:
    def __init__(self, model: CausalLM, kv_cache: MHAKVCache, page_table: torch.Tensor,
                 backend: CpuBackend, dtype: torch.dtype) -> None:
        """Use `build`, which checks that the model fits; this gathers the pointers."""
        c = model.config
        self.model, self.backend, self.dtype = model, backend, dtype
        self.widths = {"qkv": (c.num_qo_heads + 2 * c.num_kv_heads) * c.head_dim,
                       "q": c.num_qo_heads * c.head_dim, "k": c.num_kv_heads * c.head_dim,
                       "attn": c.num_qo_heads * c.head_dim, "gate_up": 2 * c.intermediate_size,
                       "act": c.intermediate_size, "out": c.hidden_size,
                       "residual": c.hidden_size}

        def ptr(t: torch.Tensor | None) -> int | None:
            return None if t is None else t.data_ptr()

        layers = model.model.layers.ops
        self._layers = (cpu_ops.LayerWeights * len(layers))()
        for i, layer in enumerate(layers):
            attn = layer.self_attn
            norms = (attn.attn.q_norm.weight, attn.attn.k_norm.weight) \
                if hasattr(attn.attn, "q_norm") else (None, None)
            self._layers[i] = cpu_ops.LayerWeights(
                ptr(layer.input_layernorm.weight), ptr(attn.qkv_proj.weight),
                ptr(attn.qkv_proj.bias), ptr(norms[0]), ptr(norms[1]), ptr(attn.o_proj.weight),
                ptr(layer.post_attention_layernorm.weight), ptr(layer.mlp.gate_up_proj.weight),
                ptr(layer.mlp.down_proj.weight), ptr(kv_cache.k_cache(i)),
                ptr(kv_cache.v_cache(i)))
        rotary = layers[0].self_attn.attn._rotary
        attention = getattr(cpu_attention._default_library(), cpu_attention.SYMBOLS[dtype])
        self._model = cpu_ops.DecodeModel(
            len(layers), c.hidden_size, c.intermediate_size, c.num_qo_heads, c.num_kv_heads,
            c.head_dim, c.rms_norm_eps, c.head_dim ** -0.5, self._layers,
            ptr(model.model.norm.weight), ptr(rotary._cos), ptr(rotary._sin),
            rotary._cos.shape[0], kv_cache.k_cache(0).shape[0], ptr(page_table),
            page_table.stride(0), page_table.shape[0],
            ctypes.cast(attention, ctypes.c_void_p).value,
            int(cpu_ops.is_panels(layers[0].self_attn.qkv_proj.weight)))
        self._keep = (model, kv_cache, page_table, rotary)  # what the pointers point into

    @classmethod
    def build(cls, model: CausalLM, kv_cache: MHAKVCache, page_table: torch.Tensor,
              backend: object, dtype: torch.dtype) -> tuple[CpuStepRunner | None, str]:
        """(a runner, "") when the model and engine fit the C++ step, else (None, why not)."""
        if not cpu_ops.available() or not cpu_attention.available():
            return None, "the C++ CPU kernels are not built or are switched off"
        if not isinstance(backend, CpuBackend) or not backend.kernel_runs:
            return None, "the attention backend is not the cpu one with its C++ decode"
        if dtype not in cpu_ops.DTYPES or get_tp_info().size != 1:
            return None, "it needs fp32 or bf16 in one process"
        if not isinstance(model, CausalLM) or page_table.dtype != torch.int32:
            return None, "the model is not a decoder of models/base.py"
        c = model.config
        h, d = c.hidden_size, c.head_dim
        widths = ((c.num_qo_heads + 2 * c.num_kv_heads) * d, c.num_qo_heads * d)
        packed = cpu_ops.is_panels(model.model.layers.ops[0].self_attn.qkv_proj.weight)
        for layer in model.model.layers.ops:
            attn, mlp = layer.self_attn, layer.mlp
            if not isinstance(mlp, MLP):
                return None, "a layer has a mixture of experts"
            norms = [(layer.input_layernorm, h), (layer.post_attention_layernorm, h)]
            if hasattr(attn.attn, "q_norm"):
                norms += [(attn.attn.q_norm, d), (attn.attn.k_norm, d)]
            weights = [(attn.qkv_proj.weight, (widths[0], h)),
                       (attn.o_proj.weight, (h, widths[1])),
                       (mlp.gate_up_proj.weight, (2 * c.intermediate_size, h)),
                       (mlp.down_proj.weight, (h, c.intermediate_size))]
            vectors = [(attn.qkv_proj.bias, (widths[0],)),
                       *((norm.weight, (size,)) for norm, size in norms)]
            if not all(weight_fits(t, dtype, shape, packed) for t, shape in weights) \
                    or not all(plain(t, dtype, shape) for t, shape in vectors) \
                    or any(norm.eps != c.rms_norm_eps for norm, _ in norms) \
                    or any(p.bias is not None for p in (attn.o_proj, mlp.gate_up_proj,
                                                        mlp.down_proj)):
                return None, "a weight is packed for oneDNN, quantized, biased or shaped unlike " \
                    "the config"
        rotary = model.model.layers.ops[0].self_attn.attn._rotary
        if not plain(rotary._cos, torch.float32, (rotary._cos.shape[0], d)) \
                or not plain(model.model.norm.weight, dtype, (h,)):
            return None, "the rotary tables or the final norm are not plain"
        return cls(model, kv_cache, page_table, backend, dtype), ""

    def can_run(self, batch: Batch) -> bool:
        # >>> ch21
        if hook.installed is not None:  # a trace records (or swaps) each op: run them one by one
            return False
        # <<< ch21
        # one new token per request (a speculative verify batch is a "prefill" of several)
        return not batch.is_prefill and len(batch.input_ids) == batch.size

    def run(self, batch: Batch, last: torch.Tensor) -> torch.Tensor:
        """The logits [len(last), V] fp32 of a decode batch, as CausalLM.forward gives them."""
        self.backend.prepare_metadata(batch)
        meta = batch.attn_metadata
        assert isinstance(meta, CpuKernelMetadata)
        hidden = self.model.model.embed_tokens.forward(batch.input_ids).contiguous()
        n = hidden.shape[0]
        buffers = {name: torch.empty(n, width, dtype=self.dtype)
                   for name, width in self.widths.items()}
        index = [t.to(torch.int64).contiguous() for t in (batch.positions, batch.out_loc,
                                                          meta.table_rows, meta.kv_lens)]
        if any(t.shape != (n,) for t in index):
            raise ValueError(f"a decode batch of {n} tokens needs {n} positions, slots and rows")
        step = cpu_ops.DecodeBatch(n, hidden.data_ptr(),
                                   *(buffers[name].data_ptr() for name in (
                                       "out", "residual", "qkv", "q", "k", "attn", "gate_up",
                                       "act")),
                                   *(t.data_ptr() for t in index), torch.get_num_threads())
        cpu_ops.decode_step(self._model, step, self.dtype)
        # the LM head: its packed panels where it has them; else the plain weight, which the C++
        # linear reads faster than oneDNN reads the packed copy the op-by-op path uses
        head = getattr(self.model.lm_head, "_packed_weight", None)
        if not cpu_ops.is_panels(head):
            head = self.model.lm_head.logits_weight()
        return cpu_ops.linear(buffers["out"][last], head).float()
