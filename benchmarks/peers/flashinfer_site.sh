# Shared by benchmarks/peers/run_*_gpu.sh (sourced after benchmarks/gpu_steps.sh, with ROOT, OUT
# and LOG set): unpacks what benchmarks/peers/prepare.sh put in .cache/peers,
# and builds FlashInfer's JIT modules for Qwen3-0.6B's shapes in one parallel run (otherwise
# whoever imports them first builds them one after another).
#
# Sets PEERS (.cache/peers), SITE (.cache/peers-site: FlashInfer and apache-tvm-ffi, a folder
# only the PYTHONPATH of the steps that want them names) and MODELS (.cache/models, where
# Qwen3-0.6B's config and tokenizer are unpacked).
PEERS=$ROOT/.cache/peers
SITE=$ROOT/.cache/peers-site
MODELS=$ROOT/.cache/models

echo "+++ [$SECONDS s] unpacking .cache/peers"
rm -rf "$SITE"
mkdir -p "$SITE" "$MODELS"
python -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$PEERS"/flashinfer-*-slim.zip "$SITE"
python -m pip install -q --no-index --no-deps --target "$SITE" "$PEERS"/apache_tvm_ffi-*.whl 2>&1 \
  | grep -v -i warning

pstep flashinfer 240 env PYTHONPATH="$SITE" python -c 'import time; t = time.time()
import flashinfer, torch, tvm_ffi
print(f"flashinfer {flashinfer.__version__} apache-tvm-ffi {tvm_ffi.__version__} from {flashinfer.__file__}: imported in {time.time() - t:.1f} s", flush=True)
from flashinfer.jit.activation import gen_act_and_mul_module
from flashinfer.jit.attention.modules import gen_batch_decode_module, gen_batch_prefill_module
from flashinfer.jit.core import build_jit_specs
from flashinfer.jit.norm import gen_norm_module
from flashinfer.jit.rope import gen_rope_module
from flashinfer.jit.sampling import gen_sampling_module
bf, i32 = torch.bfloat16, torch.int32
# the arguments the wrappers pass for Qwen3-0.6B in bf16 (int32 indices, head dim 128, no RoPE
# inside attention, no window, no soft cap); decode with tensor cores uses the prefill module
specs = [gen_batch_decode_module(bf, bf, bf, i32, 128, 128, 0, False, False),
         gen_batch_prefill_module("fa2", bf, bf, bf, i32, 128, 128, 0, False, False, False),
         gen_norm_module(), gen_rope_module(), gen_act_and_mul_module("silu"), gen_sampling_module()]
# The official engine also loads the prefill variant for K and V of equal strides ("..._kv_stride
# _equal"), and built it at its start-up (2026-12-06, h100_peers_run2_steps.txt), which cost the
# later rounds. It has no public generator in 0.7.2.post1; guarded, so a rename only skips it.
try:
    from flashinfer.jit.attention.modules import _gen_batch_prefill_module
    specs.append(_gen_batch_prefill_module("fa2", bf, bf, bf, i32, 128, 128, 0, False, False,
                                           False, paged_kv_stride_mode="equal",
                                           module_surface="full"))
except Exception as e:
    print(f"the equal-stride prefill module is not built ahead: {e!r}", flush=True)
t = time.time()
build_jit_specs(specs)
print(f"built {len(specs)} FlashInfer JIT modules in {time.time() - t:.0f} s:", ", ".join(s.name for s in specs))'
