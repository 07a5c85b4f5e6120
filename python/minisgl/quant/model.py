"""Which layers of a model are quantized, and the device check (chapter 26).

Every projection of the decoder layers is: q/k/v, o_proj, gate/up and down_proj, each a big
matrix read once per decode step. The embedding table, the norms and the LM head (often the
embedding itself, tied) keep the model's dtype, as in SGLang and vLLM; so do the MoE experts and
router of chapter 18 (their weights are not linear layers of this kind).

On a CPU the engine then packs the int8 weights for fbgemm (pack_int8_linears), in place of
the plain int8 tensors.

Each weight is quantized where it lies, one at a time after loading: the full-precision matrix is
freed as soon as its 8-bit copy exists. On a GPU the 8-bit copies are parked on the host until
all of them exist, the freed blocks are handed back to the driver (torch.cuda.empty_cache), and
then the copies come back: the KV pool, sized afterwards from the free memory, gets the savings.
"""

from __future__ import annotations

import torch

from minisgl.layers.base import BaseOP
from minisgl.layers.cpu_pack import sub_ops
from minisgl.layers.linear import LinearColParallelMerged, LinearQKVMerged, LinearRowParallel
from minisgl.ops import SCHEMES, hook
from minisgl.ops.quant_cpu import can_pack_int8, pack_int8
from minisgl.utils.misc import MinisglError

from .quantize import QUANTIZERS

QUANTIZED_LAYERS = (LinearQKVMerged, LinearColParallelMerged, LinearRowParallel)


def require_fp8(device: torch.device) -> None:
    """FP8 GEMMs need FP8 tensor cores (compute capability 8.9+) and torch._scaled_mm with
    row-wise scales there; a tiny product tells, and its failure becomes one clear error."""
    if device.type != "cuda":
        raise MinisglError("quantization 'fp8' needs a GPU with FP8 tensor cores; on a CPU use "
                           "'int8'")
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    if (major, minor) < (8, 9):
        raise MinisglError(f"quantization 'fp8' needs FP8 tensor cores (compute capability 8.9 "
                           f"or higher); {name} has {major}.{minor}: use 'int8'")
    a = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(a, a.t(), scale_a=torch.ones(16, 1, device=device),
                         scale_b=torch.ones(1, 16, device=device), out_dtype=torch.bfloat16)
    except RuntimeError as e:
        raise MinisglError(f"quantization 'fp8': torch._scaled_mm with row-wise scales does not "
                           f"run on {name} with this torch: {e}") from None


def quantize_model(model: BaseOP, name: str) -> int:
    """Quantize the model's decoder projections in place to `name` ("int8" or "fp8"); returns
    how many weights were quantized."""
    scheme, quantize = SCHEMES[name], QUANTIZERS[name]
    layers = [op for op in sub_ops(model) if isinstance(op, QUANTIZED_LAYERS)]
    if name == "fp8" and layers:
        require_fp8(layers[0].weight.device)
    device = layers[0].weight.device if layers else None
    on_gpu = device is not None and device.type == "cuda"
    for layer in layers:
        q, scale = quantize(layer.weight)
        # On a GPU the 8-bit copies wait on the host until every full-precision matrix (and the
        # fp32 temporaries of quantizing it) is gone: made in place, they would sit in the middle
        # of the freed blocks, which could then not be handed back (the KV pool grew by 56% of
        # the saved bytes on an H100 that way).
        layer.weight, layer.weight_scale = (q.cpu(), scale.cpu()) if on_gpu else (q, scale)
        layer.quant = scheme
    if on_gpu:
        torch.cuda.empty_cache()
        for layer in layers:
            layer.weight = layer.weight.to(device)
            layer.weight_scale = layer.weight_scale.to(device)
        torch.cuda.empty_cache()
    return len(layers)


def weight_bytes(model: BaseOP) -> int:
    """Bytes of the model's weights as it holds them: parameters and buffers, scales included
    (a tied LM head shares the embedding's bytes)."""
    return sum(t.numel() * t.element_size() for _, t in model.named_weights())


def pack_int8_linears(model: BaseOP) -> int:
    """On a CPU: each int8 weight replaced by fbgemm's packed form, scales inside
    (ops/quant_cpu.py), as chapter 20 packs fp32 weights for oneDNN; the number packed. Not while
    a trace watches the ops (it replays calls with the torch reference, on plain weights)."""
    if hook.installed is not None:
        return 0
    layers = [op for op in sub_ops(model)
              if isinstance(op, QUANTIZED_LAYERS) and can_pack_int8(op.weight)]
    for layer in layers:
        layer.weight = pack_int8(layer.weight, layer.weight_scale)
    return len(layers)
