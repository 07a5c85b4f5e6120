"""`python -m minisgl`: serve a model over an OpenAI-compatible API, or chat with --shell.

Without --model it serves Qwen/Qwen3-0.6B when its weights can be had, else the bundled
SmolLM2-135M-Instruct (one log line says which), on http://127.0.0.1:1919. All flags:
`python -m minisgl --help` (server/args.py).
"""

import sys

from minisgl.server.launch import main

if __name__ == "__main__":
    sys.exit(main())
