"""Runs a script written for the official mini-sglang (sgl-project/mini-sglang at 20fcd7f), such
as its benchmark/offline/bench.py, unchanged, with two defaults of its `LLM` changed:

    cd <a folder holding Qwen/Qwen3-0.6B>
    PYTHONPATH=<mini-sglang>/python:<flashinfer folder> python <repo>/benchmarks/peers/official_fi.py
        <mini-sglang>/benchmark/offline/bench.py

- attention_backend "fi" (the default is "auto"): on Hopper its engine turns "auto" into "fa,fi"
  (engine/engine.py, `_adjust_config`: `"fa,fi" if is_sm90_supported()`), FA3 prefill through
  sgl_kernel, which is not on the device; "fi" is FlashInfer for prefill and decode.
- use_dummy_weight True (the default is False): EngineConfig's own switch for random weights
  (engine/engine.py, `_load_weight_state_dict`: `torch.randn_like` for every tensor, so N(0, 1),
  where this engine's --dummy-weight draws N(0, 0.02) with norms 1; the benchmark's work does not
  depend on the values: ignore_eos, fixed lengths). bench.py names Qwen/Qwen3-0.6B, whose weights
  are not on the device: run it from a folder that holds Qwen/Qwen3-0.6B (config and tokenizer),
  which transformers' from_pretrained takes before the hub.

Keywords the script passes itself win. The caller's `random` state is also kept across `LLM()`:
bench.py seeds it, builds the LLM and only then draws its workload, and on the H200 a library drew
from it during this engine's start-up (python/minisgl/llm/llm.py), which changed the workload;
keeping it makes the official engine run the same 133,966 output tokens.

This file imports only what the official package provides; it is run with the official python/
folder first on PYTHONPATH (benchmarks/peers/run_peers_gpu.sh does that), and stops if `minisgl`
is this repository's package instead.
"""

from __future__ import annotations

import random
import runpy
import sys
from pathlib import Path

OFFICIAL_DEFAULTS = {"attention_backend": "fi", "use_dummy_weight": True}


def official_llm_class():
    """The official `minisgl.llm.LLM`, checked to be the official package (its EngineConfig names
    the random-weight switch `use_dummy_weight`; this repository's calls it `dummy_weight`)."""
    import dataclasses

    import minisgl
    from minisgl.engine.config import EngineConfig
    from minisgl.llm import LLM

    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    if "use_dummy_weight" not in fields:
        sys.exit(f"minisgl at {list(minisgl.__path__)} is not the official mini-sglang: put its "
                 "python/ folder first on PYTHONPATH")
    return LLM


def patch_defaults(llm_class: type, defaults: dict[str, object]) -> None:
    """LLM(...) gets `defaults` for the keywords its caller leaves out, and leaves the caller's
    `random` state as it found it."""
    original = llm_class.__init__

    def __init__(self, *args, **kwargs):
        for key, value in defaults.items():
            kwargs.setdefault(key, value)
        state = random.getstate()
        original(self, *args, **kwargs)
        random.setstate(state)

    llm_class.__init__ = __init__


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) > 1 else 2
    script = Path(sys.argv[1])
    patch_defaults(official_llm_class(), OFFICIAL_DEFAULTS)
    print(f"official mini-sglang LLM defaults: {OFFICIAL_DEFAULTS}; running {script}", flush=True)
    sys.argv = [str(script), *sys.argv[2:]]
    runpy.run_path(str(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
