"""FlashInfer Trace for the engine (chapters 21-23).

- runtime.py   the Runtime that LLM installs as the op registry's hook (minisgl.ops.hook)
- session.py   starting and closing it for `trace_dir=` / `trace_set=`
- ops.py       one OpSpec per registry op: call site, Definition (references.py), Workload
- capture.py   the Recorder: workloads from the live engine (`trace_dir=`, `--trace-dir`)
- solutions.py the registry's torch / Triton / CUDA implementations per op, `register` for more
- bench.py     every solution on every workload: correctness, latency, Traces
- report.py    the per-definition table and a plot
- apply.py     the fastest verified solution per op and shape bucket (`trace_set=`)

`python -m minisgl.trace bench DIR` / `report DIR`. The package sits above the engine, like
benchmark/: nothing in the engine imports it. LLM imports session.py on every start (cheap), the
rest only when a trace is asked for.
"""
