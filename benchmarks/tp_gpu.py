"""Tensor parallelism on GPUs (chapter 17): parity of TP=N with TP=1, and the offline throughput.

    python benchmarks/tp_gpu.py parity --model qwen3-4layer --tp 2 [--device cuda]
    python benchmarks/tp_gpu.py parity --model qwen3-moe-2layer --tp 2
    python benchmarks/tp_gpu.py offline --tp 2

`parity` writes a random checkpoint (normal, std 0.02; norms 1) of the real Qwen3-0.6B config cut
to 4 layers, or of Qwen3-30B-A3B cut to 2 layers, in Hugging Face's names, then generates greedy
tokens for the same requests at TP=1 and at TP=N (fp32 by default) from that one file and prints
how many sequences are identical and where the others first differ. Partial sums are added in
another order at TP=N, so two near-equal logits can swap late in a long sequence; the first tokens
must agree.

`offline` runs the official offline workload (benchmark/offline/bench.py's: 256 requests, lengths
100-1024, Qwen3-0.6B with random bf16 weights) at the given TP and prints output tokens per second.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.models.config import ModelConfig
from minisgl.models.register import create_model
from minisgl.utils.offline import prepare_qwen3, prepare_qwen3_moe

MODELS = {"qwen3-4layer": (prepare_qwen3, 4), "qwen3-moe-2layer": (prepare_qwen3_moe, 2)}


def hf_names(name: str, tensor: torch.Tensor, config: ModelConfig) -> dict[str, torch.Tensor]:
    """One of our (merged, stacked) weights -> the checkpoint tensors it is made of."""
    if ".qkv_proj." in name:
        q = config.num_qo_heads * config.head_dim
        kv = config.num_kv_heads * config.head_dim
        parts = tensor.split([q, kv, kv])
        return {name.replace(".qkv_proj.", f".{p}_proj."): t.clone()
                for p, t in zip("qkv", parts)}
    if ".gate_up_proj." in name:
        gate, up = tensor.chunk(2)
        return {name.replace(".gate_up_proj.", ".gate_proj."): gate.clone(),
                name.replace(".gate_up_proj.", ".up_proj."): up.clone()}
    if name.endswith(".experts.gate_up_proj"):
        out = {}
        for e, w in enumerate(tensor):
            gate, up = w.chunk(2)
            out[f"{name[: -len('gate_up_proj')]}{e}.gate_proj.weight"] = gate.clone()
            out[f"{name[: -len('gate_up_proj')]}{e}.up_proj.weight"] = up.clone()
        return out
    if name.endswith(".experts.down_proj"):
        return {f"{name[: -len('down_proj')]}{e}.down_proj.weight": w.clone()
                for e, w in enumerate(tensor)}
    return {name: tensor}


def write_checkpoint(source: Path, layers: int, folder: Path, seed: int = 0) -> None:
    raw = json.loads((source / "config.json").read_text())
    raw["num_hidden_layers"] = layers
    raw.pop("mlp_only_layers", None)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    for item in source.iterdir():
        if item.name != "config.json" and not item.name.endswith(".safetensors"):
            shutil.copy(item, folder / item.name)
    config = ModelConfig.from_path(folder)
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name, meta in create_model(config, torch.float32, "meta").named_weights():
        if name.endswith("norm.weight"):
            value = torch.ones(meta.shape)
        else:
            value = torch.randn(meta.shape, generator=gen) * 0.02
        weights.update(hf_names(name, value, config))
    save_file(weights, str(folder / "model.safetensors"))


def greedy(folder: Path, tp: int, device: str, dtype: str, prompts: list[list[int]],
           max_tokens: int) -> list[list[int]]:
    llm = LLM(str(folder), dtype=dtype, device=device, tp_size=tp, memory_ratio=0.3,
              max_seq_len=2048)
    try:
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        return [r["token_ids"] for r in llm.generate(prompts, params, use_tqdm=False)]
    finally:
        llm.shutdown()
        del llm
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def parity(args: argparse.Namespace) -> int:
    prepare, layers = MODELS[args.model]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 10000, (int(n),), generator=gen).tolist()
               for n in torch.randint(16, 400, (args.num_requests,), generator=gen)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / args.model
        start = time.perf_counter()
        write_checkpoint(prepare(), layers, folder)
        print(f"{args.model}: random checkpoint written in {time.perf_counter() - start:.0f} s")
        runs = {}
        for tp in (1, args.tp):
            start = time.perf_counter()
            runs[tp] = greedy(folder, tp, args.device, args.dtype, prompts, args.max_tokens)
            print(f"TP={tp}: {len(prompts)} requests x {args.max_tokens} tokens in "
                  f"{time.perf_counter() - start:.1f} s (load included)")
    same = sum(a == b for a, b in zip(runs[1], runs[args.tp]))
    first = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
             for a, b in zip(runs[1], runs[args.tp])]
    diverged = sorted(i for i in first if i is not None)
    print(f"parity {args.model} {args.dtype} TP={args.tp} vs TP=1: {same}/{len(prompts)} "
          f"sequences identical; first differing token index of the others: {diverged}")
    early = [i for i in diverged if i < 8]
    print("PASS" if not early else f"FAIL: {len(early)} sequences differ in their first 8 tokens")
    return 1 if early else 0


def offline(args: argparse.Namespace) -> int:
    from minisgl.benchmark.offline import (
        OFFICIAL_ENGINE,
        OFFICIAL_MODEL,
        official_workload,
        run_minisgl,
    )

    llm = LLM(OFFICIAL_MODEL, dtype="bfloat16", dummy_weight=True, tp_size=args.tp,
              memory_ratio=0.5, **OFFICIAL_ENGINE)
    work = official_workload(256)
    elapsed = run_minisgl(llm, work)
    print(f"official offline workload TP={args.tp}: {work.output_tokens} output tokens in "
          f"{elapsed:.2f} s = {work.output_tokens / elapsed:.0f} tok/s")
    llm.shutdown()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parity", help="greedy tokens at TP=N vs TP=1 on one random checkpoint")
    p.add_argument("--model", choices=sorted(MODELS), default="qwen3-4layer")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--num-requests", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=64)
    o = sub.add_parser("offline", help="the official offline workload at --tp")
    o.add_argument("--tp", type=int, default=1)
    args = parser.parse_args()
    return parity(args) if args.command == "parity" else offline(args)


if __name__ == "__main__":
    raise SystemExit(main())
