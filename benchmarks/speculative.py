"""Speculative decoding (chapter 24): batch-1 ms per output token with and without guesses, in
one run, and the acceptance each variant reached.

    python benchmarks/speculative.py                      # CPU: bundled SmolLM2, fp32
    python benchmarks/speculative.py --device cuda --model Qwen/Qwen3-0.6B --dummy-weight \
        --draft-layers 2                                  # the H200 call of issue 34

Variants, each its own LLM in this process, timed on the same greedy prompts:
- plain: no speculation (the reference of the ratios and of the tokens);
- NGRAM: guesses from the request's own tokens;
- STANDALONE self: the target as its own draft (every guess accepted: the upper bound of the
  mechanics, and their cost: k draft steps plus one verification per k + 1 tokens);
- STANDALONE truncated (--draft-layers N): the target's first N layers with its embedding and LM
  head as the draft. Random weights are drawn in the order of the parameters from one seed, so
  the truncated model's embedding and first N layers equal the target's (checked and printed);
  Qwen3-0.6B ties its LM head to the embedding.

ms per output token = (time for 1 + N tokens - time for 1 token) / N, median of --repeat runs,
so the prefill is left out. Every variant's tokens must equal plain's (greedy is lossless).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.utils.hf import resolve_model

# A prompt that repeats itself (code with a pattern), and one that does not (prose).
PROMPTS = {
    "repetitive": "def f0(x):\n    return x + 0\n\n\ndef f1(x):\n    return x + 1\n\n\n"
                  "def f2(x):\n    return x + 2\n\n\ndef f3(x):\n    return x + 3\n\n\ndef f4(",
    "prose": "The history of the printing press begins in the fifteenth century, when",
}


def truncated_draft(model: Path, layers: int) -> str:
    """A folder whose config.json is the target's with only the first `layers` layers, and
    (real weights) a checkpoint of the target's tensors that such a model has."""
    config = json.loads((model / "config.json").read_text())
    config["num_hidden_layers"] = layers
    if "layer_types" in config:
        config["layer_types"] = config["layer_types"][:layers]
    folder = Path(tempfile.mkdtemp(prefix=f"draft-{layers}l-"))
    (folder / "config.json").write_text(json.dumps(config))
    kept = {}
    for file in sorted(model.glob("*.safetensors")):
        for name, tensor in load_file(file).items():
            parts = name.split(".")
            if "layers" in parts and int(parts[parts.index("layers") + 1]) >= layers:
                continue
            kept[name] = tensor
    if kept:
        save_file(kept, folder / "model.safetensors")
    return str(folder)


def per_token_ms(llm: LLM, prompt: str, tokens: int, repeat: int) -> tuple[float, list[int]]:
    """Median over `repeat` of (t(1 + tokens) - t(1)) / tokens, and the generated tokens."""
    def run(n: int) -> tuple[float, list[int]]:
        params = SamplingParams(max_tokens=n, ignore_eos=True)
        if llm.scheduler.engine.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = llm.generate([prompt], params, use_tqdm=False)[0]["token_ids"]
        if llm.scheduler.engine.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, out

    run(tokens + 1)  # warm-up: kernels compiled, caches filled
    times, ids = [], []
    for _ in range(repeat):
        llm.scheduler.flush_cache()  # every run computes its prompt
        one, _ = run(1)
        llm.scheduler.flush_cache()
        many, ids = run(tokens + 1)
        times.append((many - one) / tokens * 1000)
    return statistics.median(times), ids


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--dummy-weight", action="store_true")
    p.add_argument("--draft-layers", type=int, default=0,
                   help="also run a STANDALONE draft of the target's first N layers (0: no)")
    p.add_argument("--k", type=int, default=4, help="speculative_num_draft_tokens")
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    if args.dtype == "auto":
        args.dtype = "bfloat16" if args.device == "cuda" else "float32"
    model = resolve_model(args.model, dummy_weight=args.dummy_weight)
    base = dict(dtype=args.dtype, device=args.device, dummy_weight=args.dummy_weight,
                max_seq_len=1024, num_pages=4096, max_running_reqs=8)
    variants = {"plain": {}, "NGRAM": {"speculative_algorithm": "NGRAM"},
                "STANDALONE self": {"speculative_algorithm": "STANDALONE",
                                    "speculative_draft_model_path": str(model)}}
    if args.draft_layers:
        variants[f"STANDALONE {args.draft_layers}-layer"] = {
            "speculative_algorithm": "STANDALONE",
            "speculative_draft_model_path": truncated_draft(model, args.draft_layers)}
    print(f"model {args.model} ({'random weights' if args.dummy_weight else 'real weights'}), "
          f"{args.dtype} on {args.device}; batch 1, greedy, {args.tokens} tokens after the "
          f"first, median of {args.repeat}; k = {args.k}")
    plain: dict[str, tuple[float, list[int]]] = {}
    for name, kwargs in variants.items():
        if kwargs:
            kwargs = {**kwargs, "speculative_num_draft_tokens": args.k}
        llm = LLM(str(model), **base, **kwargs)
        if name.endswith("-layer"):
            target, draft = llm.scheduler.engine.model, llm.scheduler.spec.draft.engine.model
            weights = dict(target.named_weights())
            # (oneDNN's packed CPU weights cannot be compared: the embedding and norms can)
            same = {n: torch.equal(t, weights[n]) for n, t in draft.named_weights()
                    if n.startswith(("model.embed_tokens", "model.layers.0.", "lm_head"))
                    and not t.is_mkldnn}
            print(f"  {name}: draft weights equal to the target's: "
                  f"{sum(same.values())}/{len(same)} (embedding, layer 0, LM head)")
        for label, prompt in PROMPTS.items():
            before = llm.scheduler.stats()
            ms, ids = per_token_ms(llm, prompt, args.tokens, args.repeat)
            after = llm.scheduler.stats()
            line = f"{name:<24} {label:<11} {ms:8.3f} ms/token"
            if name == "plain":
                plain[label] = (ms, ids)
            else:
                steps = after.spec_verify_reqs - before.spec_verify_reqs
                accepted = after.spec_accepted_tokens - before.spec_accepted_tokens
                drafted = after.spec_draft_tokens - before.spec_draft_tokens
                line += (f"  speedup {plain[label][0] / ms:5.2f}x  accept length "
                         f"{1 + accepted / max(steps, 1):4.2f}  accepted {accepted}/{drafted}  "
                         f"tokens equal plain: {ids == plain[label][1]}")
            print(line, flush=True)
        llm.shutdown()
        del llm
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
