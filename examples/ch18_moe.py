"""Chapter 18: Mixture of Experts, a tiny random Qwen3-MoE on the CPU.

Writes a tiny Qwen3-MoE with Hugging Face transformers (random weights, one dense layer among the
MoE ones), loads it into our model, and runs one forward pass three ways: HF, our model with the
torch MoE (a loop over the experts that got tokens) and our model with the fused Triton MoE (under
Triton's interpreter on a CPU). Then it shows one layer's routing: which experts the tokens
chose, and how the pairs are sorted by expert into blocks of BLOCK_M rows for the grouped GEMM.
Finally the arithmetic of the real Qwen3-30B-A3B: weights held vs weights read per token.
"""

from __future__ import annotations

import tempfile
import time

import torch

import minisgl.kernel.triton  # noqa: F401  (before transformers: the interpreter needs it first)
from minisgl.kernel.triton.fused_moe import align_triton
from minisgl.layers.moe import SparseMoeBlock
from minisgl.models.config import ModelConfig
from minisgl.models.register import create_model
from minisgl.models.weight import load_model
from minisgl.moe import route
from minisgl.moe.align import align_pairs
from minisgl.moe.tiny import write_tiny_qwen3_moe
from minisgl.utils.hf import resolve_model


def set_backend(model, backend: str) -> None:
    for layer in model.model.layers:
        if isinstance(layer.mlp, SparseMoeBlock):
            layer.mlp.backend = backend


def compare_with_hf(folder: str, hf_model) -> None:
    ours = load_model(folder)
    kinds = ["MoE" if isinstance(layer.mlp, SparseMoeBlock) else "dense"
             for layer in ours.model.layers]
    print(f"tiny Qwen3-MoE: {len(kinds)} layers ({', '.join(kinds)}), "
          f"{ours.config.moe.num_experts} experts, top {ours.config.moe.num_experts_per_tok}")
    ids = torch.randint(0, ours.config.vocab_size, (12,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf_model(ids[None]).logits[0]
    for backend in ("torch", "triton"):
        set_backend(ours, backend)
        start = time.perf_counter()
        got = ours.forward(ids, torch.arange(len(ids)))
        ms = (time.perf_counter() - start) * 1000
        print(f"  MoE backend {backend:6s}: max |logits - HF| = "
              f"{(got - expected).abs().max().item():.2e}  ({ms:7.1f} ms)")


def show_routing(folder: str) -> None:
    ours = load_model(folder)
    block = ours.model.layers[0].mlp
    x = torch.randn(5, ours.config.hidden_size, generator=torch.Generator().manual_seed(1))
    weights, ids = route(block.gate.forward(x), block.top_k, block.normalize)
    print("layer 0 routing of 5 tokens (expert: weight):")
    for t in range(5):
        print(f"  token {t}: " + "  ".join(f"{e}: {w:.2f}" for e, w in
                                         zip(ids[t].tolist(), weights[t].tolist())))
    block_m = 4
    aligned = align_pairs(ids, ours.config.moe.num_experts, block_m)
    assert torch.equal(align_triton(ids, ours.config.moe.num_experts, block_m).block_expert,
                       aligned.block_expert)
    pairs = ids.numel()
    print(f"pairs sorted by expert in blocks of {block_m} ('.' = padding, sentinel {pairs}):")
    for b, expert in enumerate(aligned.block_expert.tolist()):
        if expert < 0:
            break
        rows = aligned.sorted_pairs[b * block_m:(b + 1) * block_m].tolist()
        shown = " ".join(f"t{p // block.top_k}" if p < pairs else " ." for p in rows)
        print(f"  block {b} -> expert {expert}: {shown}")


def qwen3_30b_arithmetic() -> None:
    mc = ModelConfig.from_path(resolve_model("Qwen/Qwen3-30B-A3B", dummy_weight=True))
    model = create_model(mc, torch.bfloat16, "meta")  # shapes only, no memory
    total = sum(t.numel() for _, t in model.named_weights())
    experts = sum(t.numel() for n, t in model.named_weights() if ".experts." in n)
    active = total - experts + experts * mc.moe.num_experts_per_tok // mc.moe.num_experts
    print(f"Qwen3-30B-A3B: {total / 1e9:.2f}B weights ({total * 2 / 1e9:.1f} GB in bf16), "
          f"{experts / total:.0%} of them in experts; a token uses {active / 1e9:.2f}B "
          f"({active * 2 / 1e9:.1f} GB read per decode step at batch 1, "
          f"{active * 2 / 4.2e12 * 1e3:.2f} ms at 4.2 TB/s)")


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        hf_model = write_tiny_qwen3_moe(folder, mlp_only_layers=[1])
        compare_with_hf(folder, hf_model)
        show_routing(folder)
    qwen3_30b_arithmetic()
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
