"""Chapter 3: load the bundled SmolLM2 into our model and compare it with Hugging Face's."""

from __future__ import annotations

import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.models.weight import load_model
from minisgl.utils.hf import resolve_model
from minisgl.utils.misc import run_main


def main() -> None:
    path = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    start = time.perf_counter()
    ours = load_model(path)
    print(f"loaded {type(ours).__name__} from {path.name} in {time.perf_counter() - start:.1f} s")
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)

    ids = tokenizer.encode("The capital of France is")
    with torch.no_grad():
        expected = hf_model(torch.tensor([ids])).logits[0]
    got = ours.forward(torch.tensor(ids), torch.arange(len(ids)))
    print(f"{len(ids)} tokens, max |logit diff| vs transformers: {(got - expected).abs().max():.2e}")
    top = got[-1].softmax(-1).topk(5)
    words = [repr(tokenizer.decode([int(i)])) for i in top.indices]
    print("next-token top 5:", ", ".join(f"{w} {p:.2f}" for w, p in zip(words, top.values)))


if __name__ == "__main__":
    began = time.perf_counter()
    run_main(main)
    print(f"took {time.perf_counter() - began:.1f} s")
