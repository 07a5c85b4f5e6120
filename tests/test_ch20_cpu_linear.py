"""Chapter 20 on the CPU: linear layers over weights packed for oneDNN (ops/cpu_impls.py,
layers/cpu_pack.py), against torch's F.linear on the same plain weights."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minisgl import ops
from minisgl.kernel import cpu_ops
from minisgl.ops import cpu_impls

pytestmark = pytest.mark.skipif(not cpu_impls.onednn_available(),
                                reason="this torch has no oneDNN linear")


def fresh(*shape: int, dtype: torch.dtype = torch.float32, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


@pytest.mark.parametrize("rows", [1, 3, 40])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_matches_f_linear_fp32(rows: int, bias: bool) -> None:
    x, w = fresh(rows, 96, seed=rows), fresh(200, 96, seed=7 + rows)
    b = fresh(200, seed=11) if bias else None
    packed = cpu_impls.pack_weight(w)
    assert packed.is_mkldnn and packed.shape == w.shape and packed.dtype == w.dtype
    assert ops.linear.kind_for(x, packed, b) == "onednn"
    # a plain weight goes to the C++ linear (kernel/cpu_ops.py) where it builds, else torch
    assert ops.linear.kind_for(x, w, b) == ("cpp" if cpu_ops.available() else "torch")
    got = ops.linear(x, packed, b)
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not cpu_impls.packs(torch.bfloat16),
                    reason="oneDNN multiplies bf16 only with AVX-512 BW/VL/DQ or AVX-NE-CONVERT")
def test_packed_linear_bf16_and_strided_and_3d_inputs() -> None:
    w = fresh(64, 48, dtype=torch.bfloat16, seed=1)
    packed = cpu_impls.pack_weight(w)
    x = fresh(48, 5, dtype=torch.bfloat16, seed=2).t()  # not contiguous
    torch.testing.assert_close(ops.linear(x, packed), F.linear(x, w), rtol=1e-2, atol=1e-2)
    x3 = fresh(2, 3, 48, dtype=torch.bfloat16, seed=3)
    assert ops.linear(x3, packed).shape == (2, 3, 64)


def test_bf16_stays_plain_where_onednn_cannot_multiply_it(monkeypatch) -> None:
    """On a CPU without the instructions oneDNN's bf16 path needs, torch raises at packing time:
    the engine must leave those weights plain and still compute the layer."""
    monkeypatch.setattr(cpu_impls, "packs", lambda dtype: dtype == torch.float32)
    w = fresh(24, 16, dtype=torch.bfloat16, seed=12)
    assert not cpu_impls.can_pack(w) and cpu_impls.can_pack(w.float())
    x = fresh(3, 16, dtype=torch.bfloat16, seed=13)
    assert ops.linear.kind_for(x, w) == ("cpp" if cpu_ops.available() else "torch")
    torch.testing.assert_close(ops.linear(x, w), F.linear(x, w), rtol=1.6e-2, atol=2e-2)


def test_the_probe_agrees_with_torch() -> None:
    """`packs` asks oneDNN itself; torch's own check of the bf16 instructions must agree."""
    assert cpu_impls.packs(torch.float32)
    assert not cpu_impls.packs(torch.float16)
    if hasattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported"):
        assert cpu_impls.packs(torch.bfloat16) == torch.ops.mkldnn._is_mkldnn_bf16_supported()


def test_packed_linear_refuses_a_dtype_mismatch() -> None:
    packed = cpu_impls.pack_weight(fresh(8, 8, seed=4))
    with pytest.raises(TypeError, match="differ"):
        ops.linear(fresh(1, 8, dtype=torch.bfloat16, seed=5), packed)


def test_only_plain_2d_float_cpu_weights_are_packed() -> None:
    assert cpu_impls.can_pack(fresh(4, 4, seed=6))
    assert not cpu_impls.can_pack(fresh(4, 4, dtype=torch.float16, seed=6))
    assert not cpu_impls.can_pack(fresh(4, seed=6))
    assert not cpu_impls.can_pack(cpu_impls.pack_weight(fresh(4, 4, seed=6)))


def test_the_switch_turns_packing_off(monkeypatch) -> None:
    monkeypatch.setenv("MINISGL_DISABLE_ONEDNN", "1")
    cpu_impls.onednn_available.cache_clear()
    try:
        assert not cpu_impls.can_pack(fresh(4, 4, seed=8))
    finally:
        monkeypatch.delenv("MINISGL_DISABLE_ONEDNN")
        cpu_impls.onednn_available.cache_clear()


def test_a_packed_model_gives_the_plain_models_logits(smollm2_dir, monkeypatch) -> None:
    """Every linear of SmolLM2 packed (and a copy for its tied LM head): the same logits as the
    plain model on random tokens, within fp32 rounding, and the embedding still reads rows."""
    from minisgl.layers.cpu_pack import pack_linears
    from minisgl.models.weight import load_model

    # fp32 weights stay plain for the C++ linear, or go to its panels (AVX-512), where it
    # builds: pack them all for oneDNN all the same
    monkeypatch.setattr("minisgl.ops.cpu_impls.keep_plain", lambda weight: False)
    monkeypatch.setattr("minisgl.kernel.cpu_ops.panel_dtypes", lambda: ())
    plain = load_model(smollm2_dir)
    model = load_model(smollm2_dir)
    n_linear = sum(name.endswith("proj.weight") for name, _ in plain.named_weights())
    assert pack_linears(model) == n_linear + 1  # + the tied LM head
    assert not model.model.embed_tokens.weight.is_mkldnn and model.lm_head._packed_weight.is_mkldnn
    assert pack_linears(model) == 0  # packed weights are not packed twice
    ids = torch.randint(0, plain.config.vocab_size, (9,), generator=torch.Generator().manual_seed(9))
    positions = torch.arange(9)
    want = plain.forward(ids, positions)
    got = model.forward(ids, positions)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-3)
    assert got.argmax(-1).tolist() == want.argmax(-1).tolist()
