"""Chapter 21: FlashInfer Trace workloads captured from the live engine.

The bundled SmolLM2 serves 8 chat prompts (half greedy, half top-k/top-p sampled) with
LLM(..., trace_dir=DIR): every op call goes through the op registry, whose hook is the trace's
recorder, and it keeps a deduplicated sample of them as Workloads. Then the folder is loaded with flashinfer-bench's
own TraceSet, and every Definition's reference run() is replayed on every saved workload and
compared with what the engine computed at that call.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import safetensors.torch
import torch
from flashinfer_bench.data import TraceSet

from minisgl.llm import LLM
from minisgl.trace.capture import output_path
from minisgl.trace.demo import chat_prompts, mixed_params
from minisgl.trace.ops import spec_for, tolerance
from minisgl.trace.replay import load_inputs, reference_fn
from minisgl.utils.offline import prepare_smollm2


def capture(root: Path) -> list[dict]:
    llm = LLM(str(prepare_smollm2()), trace_dir=str(root), max_running_reqs=8)
    prompts = chat_prompts(llm)
    outputs = llm.generate(prompts, mixed_params(len(prompts), 4), use_tqdm=False)
    llm.shutdown()  # writes capture.json and uninstalls the recorder
    return outputs


def replay(root: Path, ts: TraceSet) -> tuple[int, int]:
    """Every workload through its Definition's reference; (matches, workloads)."""
    ok = total = 0
    for name, definition in sorted(ts.definitions.items()):
        spec, reference = spec_for(definition), reference_fn(definition)
        for wl in ts.workloads[name]:
            inputs = load_inputs(root, wl, torch.device("cpu"), {})
            engine = safetensors.torch.load_file(str(output_path(root, definition,
                                                                 wl.workload.uuid)))
            got = reference(**inputs)
            got = got if isinstance(got, tuple) else (got,)
            same = True
            for out_name, g in zip(definition.outputs, got):
                w, tol = engine[out_name], tolerance(spec, engine[out_name].dtype)
                same &= torch.equal(g, w) if tol is None else \
                    torch.allclose(g, w, atol=tol[0], rtol=tol[1])
            ok, total = ok + same, total + 1
    return ok, total


def main() -> int:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "set"
        outputs = capture(root)
        print(f"served {len(outputs)} chat requests; first answer: "
              f"{outputs[0]['text']!r}")
        info = json.loads((root / "capture.json").read_text())
        ts = TraceSet.from_path(str(root))
        print(f"\n{info['op_calls_seen']} op calls seen -> {sum(info['workloads'].values())} "
              f"workloads of {len(ts.definitions)} definitions (TraceSet.from_path loads it)")
        print(f"{'definition':<44} {'op_type':<10} {'calls':>6} {'kept':>5}  const axes")
        for name, d in sorted(ts.definitions.items()):
            calls = sum(info["calls"].get(name, {}).values())
            consts = ", ".join(f"{k}={v}" for k, v in d.const_axes.items())
            print(f"{name:<44} {d.op_type:<10} {calls:>6} {len(ts.workloads[name]):>5}  "
                  f"{consts}")
        ran = set(info["definitions_run"])
        missing = sorted(n for n in ran if not ts.workloads.get(n))
        ok, total = replay(root, ts)
        print(f"\nreferences reproduce the engine on {ok}/{total} saved workloads")
        print(f"every op the engine ran has workloads: {not missing}")
    print(f"ch21 main took {time.perf_counter() - start:.1f} s")
    return 0 if ok == total and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
