"""FlashInfer Trace for the engine (chapters 21-23).

- runtime.py   the `@traced(op)` dispatch point of every engine op
- ops.py       one OpSpec per op: call site, Definition (references.py), Workload
- capture.py   the Recorder: workloads from the live engine (`trace_dir=`, `--trace-dir`)
- solutions.py torch / Triton / CUDA implementations per op, and `register` for more
- bench.py     every solution on every workload: correctness, latency, Traces
- report.py    the per-definition table and a plot
- apply.py     the fastest verified solution per op and shape bucket (`trace_set=`)

`python -m minisgl.trace bench DIR` / `report DIR`. Importing this package is cheap: the engine
imports runtime.py on every start, the rest only when a trace is asked for.
"""
