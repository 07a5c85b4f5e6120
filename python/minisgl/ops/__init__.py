"""Every op the engine runs, by name: `ops.rms_norm(x, weight, eps)`.

Each op is declared once with its torch reference (one small file per kind of op), and later
chapters add faster implementations to it: the CUDA extension (cuda_impls.py, chapter 19) and
Triton kernels (moe.py, chapter 18; triton_impls.py, chapter 20), and on a CPU oneDNN's linear
over packed weights (cpu_impls.py, chapter 20). registry.py holds the rule that
picks one for each call; hook.py the one point where a trace sees every call (chapter 21).
Layers and models call these by name and never choose an implementation themselves.
"""
# ruff: noqa: F401, I001  (the ops are this package's interface; cuda_impls and triton_impls add
# implementations to the ops imported before them)

from .registry import ALL, Impl, Op
from .activation import silu_and_mul
from .linear import linear
from .norm import fused_add_rms_norm, rms_norm
from .rope import rope
from .kv import embedding, store_kv
from .attention import attention
from .sampling import sample, top_k_top_p_sampling
from .moe import moe
# >>> ch25
from .bitmask import apply_token_bitmask
# <<< ch25
from . import cuda_impls  # adds the CUDA kernels to store_kv and embedding
from .fused_linear import fused_add_rms_norm_linear, silu_and_mul_linear
from . import triton_impls  # adds the Triton kernels to the ops above
from . import cpu_impls  # adds oneDNN's packed-weight linear (CPU)
# >>> ch26
from .quant_linear import FP8, INT8, SCHEMES, QuantScheme, linear_fp8, linear_int8
from . import quant_gpu  # adds the Triton int8 kernels and torch._scaled_mm (GPU)
from . import quant_cpu  # adds fbgemm's int8 matrix multiply over packed weights (CPU)
# <<< ch26
