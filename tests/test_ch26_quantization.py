"""Chapter 26: linear weights in 8 bits (int8 weight-only, fp8 e4m3 weights and activations).

- The quantizers: an int8 weight comes back within half a step, an fp8 one within 1/16 of
  itself (or half the subnormal step); each row's largest |w| maps to the top of the range; a row
  of zeros gets the scale 1, never 0 or NaN.
- The kernels against the ops' torch references, under Triton's interpreter on a CPU (fp32 and
  fp16: the interpreter mishandles bf16, which is checked on a GPU): the int8 GEMV alone and with
  its RMSNorm and SiLU-and-mul prologues, the int8 GEMM, shapes off the tile sizes, fresh random
  inputs, outputs poisoned with NaN. fbgemm's int8 product on a CPU (activations split into two
  exact 7-bit rows) against the reference, within the bound of that split.
- The op registry: a quantized model's projections go through linear_int8 and its fused
  variants, never the plain linear; the one-token GEMVs through the whole decoder layer give
  the reference's logits. fp8's reference quantizes per token (each row's scale its own).
- SmolLM2 on a CPU: int8 weights take <= 0.45 of fp32's bytes; greedy continuations of 8 chat
  prompts agree with fp32 on >= 85% of their first 16 tokens; perplexity on the opening of Pride
  and Prejudice (tests/data) within 3% of fp32's.
- The settings: int4 and fp8 on a CPU are refused with the choices named; the server flag.
- On a GPU (skipped without CUDA): the bf16 kernels, the fp8 quantizer and torch._scaled_mm,
  Qwen3-0.6B's logits with int8 and fp8 weights against bf16 (tolerances below), and a KV pool
  that grows by the bytes the weights gave back.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import CHAT_PROMPTS

from minisgl import ops
from minisgl.core import SamplingParams
from minisgl.kernel.triton import gemm_int8, gemv_int8, gemv_int8_rmsnorm, gemv_int8_silu_and_mul
from minisgl.ops import INT8, hook
from minisgl.ops.activation import silu_and_mul_torch
from minisgl.ops.norm import rms_norm_torch
from minisgl.ops.quant_cpu import linear_int8_fbgemm, pack_int8
from minisgl.ops.quant_linear import (
    FP8_MAX,
    linear_fp8_torch,
    linear_int8_torch,
    quantize_fp8_rows_torch,
)
from minisgl.quant import QUANTIZATIONS, check_quantization
from minisgl.quant.model import pack_int8_linears, weight_bytes
from minisgl.quant.quantize import dequantize, quantize_fp8, quantize_int8

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
PASSAGE = Path(__file__).parent / "data" / "pride_and_prejudice.txt"


def randn(*shape: int, gen: torch.Generator, dtype=torch.float32, scale: float = 1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def fresh_gen() -> torch.Generator:
    """A generator from fresh entropy: every run sees other inputs (the seed is printed)."""
    seed = torch.seed()
    print(f"seed {seed}")
    return torch.Generator().manual_seed(seed)


def int8_weight(n: int, k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_int8(randn(n, k, gen=gen, scale=k ** -0.5))


@pytest.fixture
def poisoned_outputs(monkeypatch):
    """Every new float tensor starts as NaN: an output element a kernel forgets stays NaN."""
    empty = torch.empty

    def nan_empty(*args, **kwargs):
        t = empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", nan_empty)


def close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype,
          terms: torch.Tensor | None = None) -> None:
    """fp32 within 1e-5 (relative); fp16 / bf16 within about one rounding of the output.

    terms: for a sum of products, sum |terms| of each output. Two fp32 sums of the same terms in
    different orders differ by a few roundings (2^-24) of that, however small the result is
    (cancellation): each output may also be off by 2^-20 of it, 16 such roundings."""
    tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    got, expected = got.float().cpu(), expected.float().cpu()
    atol = torch.full_like(expected, tol)
    if terms is not None:
        atol = torch.maximum(atol, terms.float().cpu() * 2.0 ** -20)
    bad = (got - expected).abs() > atol + tol * expected.abs()
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} outside the tolerance:\n" \
        f"got {got[bad][:8].tolist()}\nexpected {expected[bad][:8].tolist()}"


def sum_of_terms(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """sum_k |x_k q_nk| * scale_n: the size of what each output of x @ q.T * scale adds up."""
    return linear_int8_torch(x.abs(), q.abs(), scale, None)


# ------------------------------------------------------------------------------ quantizers


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_round_trip_is_within_half_a_step(dtype):
    gen = fresh_gen()
    w = randn(67, 300, gen=gen, dtype=dtype)
    w[3] *= 100  # one row of large weights: the other rows keep their own resolution
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (67,)
    assert q.abs().amax(dim=1).eq(127).all()  # symmetric: each row's largest |w| is +-127
    error = (dequantize(q, scale) - w.float()).abs()
    assert (error <= scale[:, None] / 2 * (1 + 1e-4)).all()  # fp32 rounding of q * scale
    assert scale[0] < scale[3] / 20  # per channel: row 0's step does not grow with row 3


def test_fp8_round_trip_is_within_its_relative_step():
    gen = fresh_gen()
    w = randn(40, 257, gen=gen) * torch.logspace(-4, 1, 257)  # many binades, subnormals too
    q, scale = quantize_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and q.float().abs().amax(dim=1).eq(FP8_MAX).all()
    error = (dequantize(q, scale) - w).abs()
    bound = torch.maximum(w.abs() / 16, 2.0**-10 * scale[:, None])
    assert (error <= bound * (1 + 1e-6)).all()


def test_a_row_of_zeros_gets_scale_one_and_stays_zero():
    w = torch.randn(4, 32)
    w[2] = 0
    for quantize in (quantize_int8, quantize_fp8):
        q, scale = quantize(w)
        assert scale[2] == 1 and torch.isfinite(scale).all() and (scale > 0).all()
        assert (q[2].float() == 0).all()
    q, scale = quantize_int8(w)
    y = linear_int8_fbgemm(torch.randn(3, 32), pack_int8(q, scale), scale, None)
    assert torch.isfinite(y).all() and (y[:, 2] == 0).all()
    # an activation row of zeros (a padding token) too: finite zeros, not 0/0
    assert linear_int8_fbgemm(torch.zeros(2, 32), pack_int8(q, scale), scale, None).eq(0).all()
    xq, sx = quantize_fp8_rows_torch(torch.zeros(2, 32))
    assert (sx > 0).all() and xq.float().eq(0).all()


# ------------------------------------------------------------------------------- kernels

# (n, k): ragged last tiles of every tiling, a long row (the norm's mean square loops)
GEMV_SHAPES = [(37, 300), (64, 512), (5, 1030), (3, 8192 + 40)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n,k", GEMV_SHAPES)
def test_int8_gemv_matches_the_reference(n, k, dtype, poisoned_outputs):
    gen = fresh_gen()
    q, scale = int8_weight(n, k, gen)
    x = randn(1, k, gen=gen, dtype=dtype, scale=2.0)
    b = randn(n, gen=gen, dtype=dtype)
    for bias in (None, b):
        got = gemv_int8(x.to(DEVICE), q.to(DEVICE), scale.to(DEVICE),
                        None if bias is None else bias.to(DEVICE))
        close(got, linear_int8_torch(x, q, scale, bias), dtype, sum_of_terms(x, q, scale))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n,k", GEMV_SHAPES)
def test_int8_gemv_prologues_match_norm_then_linear(n, k, dtype, poisoned_outputs):
    gen = fresh_gen()
    q, scale = int8_weight(n, k, gen)
    x, r = randn(1, k, gen=gen, dtype=dtype, scale=3.0), randn(1, k, gen=gen, dtype=dtype)
    norm_w = randn(k, gen=gen, dtype=dtype)
    qd, sd = q.to(DEVICE), scale.to(DEVICE)
    for residual in (None, r):
        total = x if residual is None else x + residual
        normed = rms_norm_torch(total, norm_w, 1e-6)
        expected = linear_int8_torch(normed, q, scale, None)
        got, got_total = gemv_int8_rmsnorm(x.to(DEVICE), qd, sd, None, norm_w.to(DEVICE), 1e-6,
                                           None if residual is None else residual.to(DEVICE))
        close(got, expected, dtype, sum_of_terms(normed, q, scale))
        assert torch.equal(got_total.cpu(), total)
    gate_up = randn(1, 2 * k, gen=gen, dtype=dtype, scale=4.0)
    got = gemv_int8_silu_and_mul(gate_up.to(DEVICE), qd, sd, None)
    act = silu_and_mul_torch(gate_up)
    close(got, linear_int8_torch(act, q, scale, None), dtype, sum_of_terms(act, q, scale))


@pytest.mark.parametrize("m,n,k", [(2, 37, 300), (17, 130, 200), (70, 64, 96), (5, 3, 1030)])
def test_int8_gemm_matches_the_reference(m, n, k, poisoned_outputs):
    """fp32 activations (tl.dot in exact fp32): the interpreter cannot convert int8 to bf16."""
    gen = fresh_gen()
    q, scale = int8_weight(n, k, gen)
    x, b = randn(m, k, gen=gen, scale=2.0), randn(n, gen=gen)
    for bias in (None, b):
        got = gemm_int8(x.to(DEVICE), q.to(DEVICE), scale.to(DEVICE),
                        None if bias is None else bias.to(DEVICE))
        close(got, linear_int8_torch(x, q, scale, bias), torch.float32, sum_of_terms(x, q, scale))
    # rows of a wider tensor, through the op (what a prefill's strided slice would hand it)
    wide = randn(m, k + 24, gen=gen)
    x = wide[:, 8 : 8 + k]
    got = ops.linear_int8.implementation("triton")(x.to(DEVICE), q.to(DEVICE),
                                                    scale.to(DEVICE), None)
    close(got, linear_int8_torch(x, q, scale, None), torch.float32, sum_of_terms(x, q, scale))


def test_int8_kernels_reject_what_they_cannot_compute():
    q, scale = int8_weight(8, 16, torch.Generator().manual_seed(0))
    q, scale = q.to(DEVICE), scale.to(DEVICE)
    x = torch.randn(1, 16, device=DEVICE)
    with pytest.raises(ValueError, match="int8 weight"):
        gemv_int8(x, q.float(), scale)
    with pytest.raises(ValueError, match="scale"):
        gemv_int8(x, q, scale.double())
    with pytest.raises(ValueError, match="bias"):
        gemv_int8(x, q, scale, torch.randn(7, device=DEVICE))
    with pytest.raises(ValueError, match="K = 16"):
        gemm_int8(torch.randn(3, 15, device=DEVICE), q, scale)
    with pytest.raises(ValueError, match=r"\[1, 2K\]"):
        gemv_int8_silu_and_mul(x, q, scale)


@pytest.mark.parametrize("m", [1, 6])
def test_fbgemm_int8_is_the_weight_only_product_within_its_split(m):
    """Each row of x reaches fbgemm as two exact 7-bit rows, so x is rounded to max|x_row| / 7938
    at most (ops/quant_cpu.py): |y - y_ref| <= that times sum_k |q s|, plus fp32 rounding.
    fbgemm alone (8-bit activations) is off by far more."""
    gen = fresh_gen()
    n, k = 96, 576
    q, scale = int8_weight(n, k, gen)
    x = randn(m, k, gen=gen)
    x[:, 7] *= 40  # an outlier channel, as real activations have
    bias = randn(n, gen=gen)
    packed = pack_int8(q, scale)
    got = linear_int8_fbgemm(x, packed, scale, bias)
    want = linear_int8_torch(x, q, scale, bias)
    row_step = x.abs().amax(dim=1, keepdim=True) / (63 * 126)
    bound = row_step / 2 * (q.float().abs() * scale[:, None]).sum(dim=1) + 1e-4 * want.abs() \
        + 1e-5
    assert ((got - want).abs() <= bound).all()
    plain = torch.ops.quantized.linear_dynamic(x, packed, True) + bias
    assert (plain - want).abs().max() > 20 * (got - want).abs().max()


def test_fp8_reference_quantizes_each_token_with_its_own_scale():
    """Per token: a row scaled by 1000 gives its output scaled by 1000 (its scale grows with it)
    and leaves the other rows' outputs exactly as they were."""
    gen = fresh_gen()
    q, scale = quantize_fp8(randn(24, 64, gen=gen))
    x = randn(3, 64, gen=gen)
    y = linear_fp8_torch(x, q, scale, None)
    x2 = x.clone()
    x2[1] *= 1024  # a power of two: x / sx is unchanged bit for bit
    y2 = linear_fp8_torch(x2, q, scale, None)
    assert torch.equal(y2[[0, 2]], y[[0, 2]])
    torch.testing.assert_close(y2[1], y[1] * 1024, rtol=1e-6, atol=0)
    xq, sx = quantize_fp8_rows_torch(x)
    assert torch.equal(sx[:, 0], x.abs().amax(dim=1) / FP8_MAX)
    exact = x @ dequantize(q, scale).T
    assert ((y - exact).abs() <= exact.abs().max() * 0.1).all()  # e4m3: a few % per product


def test_fp8_quantizer_kernel_matches_torch():
    """One program per token: its scale exactly torch's; its e4m3 values torch's too, except, under
    Triton's interpreter, where rounding carries into the exponent and among the subnormals (the
    interpreter's fp32 -> e4m3 conversion gets those wrong: it writes half the right power of
    two, or a neighbouring subnormal). On a GPU only a value on an exact rounding tie may
    differ."""
    from minisgl.kernel.triton import quantize_fp8_rows

    gen = fresh_gen()
    x = randn(6, 300, gen=gen, scale=3.0)
    x[2] = 0  # a padding row: scale MIN_SCALE, values 0
    xq, sx = quantize_fp8_rows(x.to(DEVICE))
    want_q, want_s = quantize_fp8_rows_torch(x)
    torch.testing.assert_close(sx.cpu(), want_s, rtol=1e-6, atol=0)
    got, want = xq.cpu().float(), want_q.float()
    differ = got != want
    if DEVICE == "cpu":
        expected, written = want[differ], got[differ]
        carried = (expected.abs().log2().frac() == 0) & (written * 2 == expected)
        subnormal = (expected.abs() < 2.0**-6) & ((written - expected).abs() <= 2.0**-8)
        assert (carried | subnormal).all()
    assert differ.float().mean().item() <= (0.05 if DEVICE == "cpu" else 1e-3)


def test_scaled_mm_matches_the_fp8_reference():
    """The fp8 implementation the GPU picks (per-token quantization, then torch._scaled_mm with
    row-wise scales and a bf16 result), here on DEVICE (torch has a CPU _scaled_mm too), within
    bf16 rounding of the reference."""
    gen = fresh_gen()
    q, scale = quantize_fp8(randn(48, 128, gen=gen, scale=0.05))
    b = randn(48, gen=gen, dtype=torch.bfloat16)
    for m in (1, 7):
        x = randn(m, 128, gen=gen, dtype=torch.bfloat16, scale=3.0).to(DEVICE)
        for bias in (None, b.to(DEVICE)):
            got = ops.linear_fp8.implementation("scaled_mm")(x, q.to(DEVICE), scale.to(DEVICE),
                                                             bias)
            want = linear_fp8_torch(x, q.to(DEVICE), scale.to(DEVICE), bias)
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_the_registry_picks_by_device_and_format():
    """On a CPU every 8-bit op runs its reference, except linear_int8 over a weight packed for
    fbgemm; the fused ops' checks look at x only (their second argument may be None)."""
    q, scale = quantize_int8(torch.randn(16, 32))
    x, norm_w = torch.randn(1, 32), torch.ones(32)
    assert ops.INT8.norm_linear.kind_for(x, None, norm_w, 1e-6, q, scale, None) == "torch"
    assert ops.INT8.silu_linear.kind_for(torch.randn(1, 64), q, scale, None) == "torch"
    assert ops.INT8.linear.kind_for(x, q, scale, None) == "torch"
    assert ops.INT8.linear.kind_for(x, pack_int8(q, scale), scale, None) == "fbgemm"
    assert ops.FP8.linear.kind_for(x, *quantize_fp8(torch.randn(16, 32)), None) == "torch"


# ------------------------------------------------------------------ the registry and models


class OpNames:
    """A hook that counts op calls by name and runs each as the rule picks (ops/hook.py)."""

    def __init__(self) -> None:
        self.calls: Counter = Counter()

    def run(self, op, args):
        self.calls[op.name] += 1
        return op.pick(*args)(*args)

    def pause_recording(self) -> None: ...

    def resume_recording(self) -> None: ...

    def wants_eager(self, batch) -> bool:
        return False


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from test_ch03_models import CASES, save_random_hf_model

    paths = {}
    for case in ("qwen2-bias", "qwen3-qknorm"):
        paths[case] = tmp_path_factory.mktemp(case)
        model_type, arch, overrides = CASES[case]
        save_random_hf_model(paths[case], model_type, arch, **overrides)
    return paths


@pytest.mark.parametrize("case", ["qwen2-bias", "qwen3-qknorm"])
def test_quantized_projections_run_the_schemes_ops(case, tiny_models, monkeypatch):
    from minisgl.models.weight import load_model

    model = load_model(tiny_models[case], quantization="int8")
    layers = len(model.model.layers)
    names = dict(model.named_weights())
    assert all(names[f"model.layers.{i}.{p}.weight"].dtype == torch.int8
               for i in range(layers) for p in ("self_attn.qkv_proj", "self_attn.o_proj",
                                                "mlp.gate_up_proj", "mlp.down_proj"))
    assert names["model.embed_tokens.weight"].dtype == torch.float32  # embedding, norms: fp32
    assert names["model.norm.weight"].dtype == torch.float32
    counter = OpNames()
    monkeypatch.setattr(hook, "installed", counter)
    ids = torch.tensor([3, 17, 5])
    model.forward(ids, torch.arange(3))
    assert counter.calls["linear"] == 0  # no projection reaches the plain op
    assert counter.calls["fused_add_rmsnorm_linear_int8"] == 2 * layers  # qkv, gate_up
    assert counter.calls["silu_and_mul_linear_int8"] == layers  # down_proj
    assert counter.calls["linear_int8"] == 4 * layers  # o_proj + the three above, inside them


def one_token_anywhere(x: torch.Tensor, *_) -> bool:
    return x.dim() == 2 and x.shape[0] == 1 and x.is_contiguous()


@pytest.mark.parametrize("case", ["qwen2-bias", "qwen3-qknorm"])
def test_one_token_int8_decoder_path_equals_the_reference(case, tiny_models, monkeypatch):
    """One token through the int8 GEMVs with their prologues (the GPU's batch-1 path; on a CPU
    under the interpreter) against the torch references, fp32, within 1e-5 (1e-4 on a GPU, where
    the other kernels of chapter 20 run too)."""
    from minisgl.models.weight import load_model

    reference = load_model(tiny_models[case], quantization="int8")  # the torch code, on a CPU
    model = reference if DEVICE == "cpu" else load_model(tiny_models[case], device=DEVICE,
                                                         quantization="int8")
    ids, positions = torch.tensor([17]), torch.tensor([29])
    expected = reference.forward(ids, positions)
    calls: Counter = Counter()
    for op in (INT8.linear, INT8.norm_linear, INT8.silu_linear):
        (kernel,) = [impl for impl in op.faster if impl.kind == "triton"]

        def counted(*args, _name=op.name, _fn=kernel.fn):
            calls[_name] += 1
            return _fn(*args)

        monkeypatch.setattr(op, "faster", [replace(kernel, fn=counted, takes=one_token_anywhere)])
    got = model.forward(ids.to(DEVICE), positions.to(DEVICE)).cpu()
    layers = len(model.model.layers)
    assert calls == {INT8.norm_linear.name: 2 * layers, INT8.silu_linear.name: layers,
                     INT8.linear.name: layers}
    assert (got - expected).abs().max().item() <= (1e-5 if DEVICE == "cpu" else 1e-4)


# ----------------------------------------------------------------------------- SmolLM2


@pytest.fixture(scope="module")
def smollm2_pair(smollm2_dir):
    """fp32 and int8 SmolLM2 engines, each with 16 greedy tokens for the first 8 chat prompts."""
    from minisgl.llm import LLM

    runs = {}
    for name in ("fp32", "int8"):
        llm = LLM(str(smollm2_dir), dtype="float32", device="cpu", num_pages=2048,
                  max_seq_len=512, quantization=None if name == "fp32" else name)
        prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": p}])
                   for p in CHAT_PROMPTS[:8]]
        out = llm.generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True),
                           use_tqdm=False)
        runs[name] = (llm, [r["token_ids"] for r in out])
    yield runs
    for llm, _ in runs.values():
        llm.shutdown()


def test_int8_smollm2_weights_take_under_045_of_fp32(smollm2_dir, smollm2_pair):
    from minisgl.models.weight import load_model

    plain = weight_bytes(load_model(smollm2_dir))
    model = load_model(smollm2_dir, quantization="int8")
    assert weight_bytes(model) <= 0.45 * plain
    # the engine packs those int8 weights for fbgemm (no plain copy stays), the LM head for oneDNN
    engine_model = smollm2_pair["int8"][0].scheduler.engine.model
    assert all(name.startswith(("model.embed_tokens", "model.norm")) or "layernorm" in name
               or name.endswith("weight_scale") for name, _ in engine_model.named_weights())
    assert pack_int8_linears(model) == 4 * len(model.model.layers)


def test_int8_greedy_tokens_agree_with_fp32(smollm2_pair):
    plain, quantized = smollm2_pair["fp32"][1], smollm2_pair["int8"][1]
    same = sum(a == b for p, q in zip(plain, quantized) for a, b in zip(p, q))
    print(f"int8 greedy tokens equal to fp32: {same}/{16 * len(plain)}")
    assert all(len(p) == 16 for p in plain + quantized)
    assert same >= 0.85 * 16 * len(plain)


def test_int8_perplexity_is_within_3_percent_of_fp32(smollm2_pair):
    def perplexity(llm) -> float:
        ids = torch.tensor(llm.tokenizer.encode(PASSAGE.read_text(encoding="utf-8")))
        logits = llm.scheduler.engine.model.forward(ids, torch.arange(len(ids)))
        return float(F.cross_entropy(logits[:-1], ids[1:]).exp())

    plain, quantized = (perplexity(smollm2_pair[name][0]) for name in ("fp32", "int8"))
    print(f"perplexity fp32 {plain:.3f}, int8 {quantized:.3f}")
    assert abs(quantized / plain - 1) <= 0.03


# ---------------------------------------------------------------------------- settings


def test_quantization_settings_are_checked():
    from minisgl.engine.config import EngineConfig

    assert set(QUANTIZATIONS) == set(ops.SCHEMES)
    with pytest.raises(ValueError, match="quantization must be one of int8, fp8"):
        check_quantization("int4", "cpu")
    with pytest.raises(ValueError, match="needs a GPU with FP8"):
        check_quantization("fp8", "cpu")
    assert check_quantization("INT8", "cpu") == "int8"
    assert check_quantization("fp8", "cuda") == "fp8"  # a GPU's FP8 is checked at load time
    with pytest.raises(ValueError, match="int8, fp8"):
        EngineConfig(model_path="x", quantization="int4")


def test_llm_and_server_flags_refuse_before_loading(smollm2_dir):
    from minisgl.llm import LLM
    from minisgl.server.args import parse_args

    with pytest.raises(ValueError, match="int8, fp8"):
        LLM(str(smollm2_dir), device="cpu", quantization="int4")
    with pytest.raises(ValueError, match="FP8"):
        LLM(str(smollm2_dir), device="cpu", quantization="fp8")
    args, _ = parse_args(["--model", str(smollm2_dir), "--device", "cpu", "--quantization",
                          "INT8"])
    assert args.quantization == "int8"
    with pytest.raises(SystemExit):
        parse_args(["--model", str(smollm2_dir), "--quantization", "int4"])


# ------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_bfloat16_int8_kernels_on_gpu():
    gen = fresh_gen()
    for m, n, k in [(1, 4096, 1024), (1, 1024, 3072), (7, 130, 200), (300, 6144, 1024)]:
        q, scale = int8_weight(n, k, gen)
        x, b = randn(m, k, gen=gen, dtype=torch.bfloat16), randn(n, gen=gen, dtype=torch.bfloat16)
        got = ops.linear_int8.implementation("triton")(x.cuda(), q.cuda(), scale.cuda(), b.cuda())
        close(got, linear_int8_torch(x, q, scale, b), torch.bfloat16)


@pytest.mark.gpu
def test_fp8_quantizer_kernel_and_scaled_mm_on_gpu():
    from minisgl.kernel.triton import quantize_fp8_rows

    gen = fresh_gen()
    x = randn(37, 1024, gen=gen, dtype=torch.bfloat16, scale=3.0)
    xq, sx = quantize_fp8_rows(x.cuda())
    # torch on the same GPU converts to e4m3 as the kernel does: equal, bit for bit
    same_q, same_s = quantize_fp8_rows_torch(x.cuda())
    assert torch.equal(sx, same_s) and torch.equal(xq.float(), same_q.float())
    # torch on the CPU rounds some exact ties the other way (x / s = 76 between 72 and 80, on
    # an H100 0.13% of these bf16 inputs): where they differ, both are equally near
    want_q, want_s = quantize_fp8_rows_torch(x)
    torch.testing.assert_close(sx.cpu(), want_s, rtol=1e-6, atol=0)
    differ = xq.cpu().float() != want_q.float()
    exact = (x.float() / want_s)[differ]
    torch.testing.assert_close((exact - xq.cpu().float()[differ]).abs(),
                               (exact - want_q.float()[differ]).abs(), rtol=1e-5, atol=0)
    q, scale = quantize_fp8(randn(512, 1024, gen=gen, scale=0.05))
    for m in (1, 37):
        xs = x[:m].cuda()
        got = ops.linear_fp8.implementation("scaled_mm")(xs, q.cuda(), scale.cuda(), None)
        want = linear_fp8_torch(xs, q.cuda(), scale.cuda(), None)  # the torch reference
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def qwen3_logits(qwen3_dir, quantization: str | None, ids: torch.Tensor) -> torch.Tensor:
    from minisgl.models.weight import load_model

    model = load_model(qwen3_dir, dtype=torch.bfloat16, device="cuda", dummy_weight=True,
                       quantization=quantization)
    prefill = model.forward(ids, torch.arange(len(ids), device="cuda"))
    step = model.forward(ids[-1:], torch.tensor([len(ids)], device="cuda"))  # the GEMV path
    return torch.cat([prefill, step]).float().cpu()


@pytest.mark.gpu
@pytest.mark.parametrize("quantization,tolerance", [("int8", 0.08), ("fp8", 0.3)])
def test_qwen3_logits_against_bf16(qwen3_dir, quantization, tolerance):
    """Qwen3-0.6B, random bf16 weights (the same draw each load), 24 prompt tokens and one
    decode step: ||logits - bf16's|| / ||bf16's|| within the tolerance. On the CPU in fp32 the
    same comparison gave 0.016 for bf16 itself, 0.034 for int8 and 0.14 for fp8 (random weights
    give nearly flat logits; fp8 rounds weights and activations to 3 mantissa bits)."""
    ids = torch.randint(0, 150000, (24,), generator=torch.Generator().manual_seed(0)).cuda()
    plain = qwen3_logits(qwen3_dir, None, ids)
    torch.cuda.empty_cache()
    got = qwen3_logits(qwen3_dir, quantization, ids)
    error = ((got - plain).norm() / plain.norm()).item()
    print(f"{quantization}: relative logit error {error:.4f}")
    assert error <= tolerance


@pytest.mark.gpu
def test_the_kv_pool_gets_the_bytes_the_weights_gave_back(qwen3_dir):
    """The pool is sized from the memory free after loading (memory_ratio of it): the bytes the
    int8 weights save (the bf16 matrices freed and handed back to the driver) become KV pages.
    (Runs after the tests above in the same process: CUDA, cuBLAS and Triton have already taken
    their memory, which would otherwise count against the first engine only.)"""
    import gc

    from minisgl.engine.config import EngineConfig
    from minisgl.engine.engine import Engine

    pages, weights = {}, {}
    for q in (None, "int8"):
        gc.collect()
        torch.cuda.empty_cache()
        engine = Engine(EngineConfig(model_path=str(qwen3_dir), dtype=torch.bfloat16,
                                     device="cuda", dummy_weight=True, memory_ratio=0.5,
                                     cuda_graph_max_bs=0, max_running_reqs=8,
                                     max_seq_len=1024, quantization=q))
        pages[q], weights[q] = engine.num_pages, weight_bytes(engine.model)
        per_page = engine.page_size * engine._kv_bytes_per_token()
        engine.shutdown()
        del engine
    expected = (weights[None] - weights["int8"]) * 0.5 / per_page
    print(f"pages {pages}, weights {weights}, expected gain {expected:.0f} pages")
    assert pages["int8"] - pages[None] >= 0.7 * expected
