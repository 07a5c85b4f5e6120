"""`python -m minisgl`: answer one prompt with the default (or given) model.

Until the server chapters (12-14) land, this is the whole front door: resolve the model, load
it, and generate an answer to --prompt through the chat template.
"""

from __future__ import annotations

import argparse
import sys

from minisgl.core import SamplingParams
from minisgl.engine.naive import naive_generate
from minisgl.models.weight import load_model
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import default_model, resolve_model
from minisgl.utils.misc import MinisglError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m minisgl", description=__doc__.splitlines()[0])
    parser.add_argument("--model", "--model-path", dest="model", default=None,
                        help="local folder or Hugging Face id (default: Qwen/Qwen3-0.6B if its "
                             "weights are available, else the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--dummy-weight", action="store_true",
                        help="random weights with the real architecture (no checkpoint needed)")
    parser.add_argument("--prompt", default="What is the capital of France?")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.model is None:
            path = default_model(dummy_weight=args.dummy_weight).path
        else:
            path = resolve_model(args.model, dummy_weight=args.dummy_weight)
        params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens)
        model, tokenizer = load_model(path, dummy_weight=args.dummy_weight), load_tokenizer(path)
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}])
        tokens = naive_generate(model, prompt, params, eos_token_ids=tokenizer.eos_token_ids)
    except (MinisglError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(tokenizer.decode(tokens, skip_special_tokens=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
