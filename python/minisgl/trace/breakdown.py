"""Where the time goes, per op (chapter 23): the calls a capture counted, times the latency the
benchmark measured for the same Definition and shape bucket.

capture.json (chapter 21) holds, per Definition and bucket, how many times the engine ran the op;
the Traces (chapter 22) hold each solution's latency per workload. The estimate per Definition is
the sum over buckets of calls x latency, taking the fastest solution that passed the bucket (what
`apply` chooses, except that apply keeps the engine's default when it is within apply.MIN_GAIN of
the fastest: for a share of the time that makes little difference) or a named one, and the nearest benchmarked bucket when a bucket has no
trace. It leaves out everything that is not a traced op (the GEMMs, the scheduler, Python), so
the shares are of the traced ops' time only. On a GPU, steps replayed from a CUDA graph run no
Python and are not counted: there the profile of a decode step tells the rest.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from flashinfer_bench.data import EvaluationStatus, TraceSet

from .ops import spec_for


@dataclass
class OpTime:
    definition: str
    calls: int
    solution: str  # the suffix whose latencies were used (per bucket it may vary: the first)
    total_ms: float


def latencies(trace_set: TraceSet) -> dict[str, dict[int, dict[str, float]]]:
    """Definition -> bucket -> solution suffix -> mean latency, over solutions that passed every
    workload of the bucket."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for name, traces in trace_set.traces.items():
        spec = spec_for(trace_set.definitions[name])
        groups: dict[tuple[int, str], list] = defaultdict(list)
        for t in traces:
            if t.solution is not None and t.evaluation is not None:
                groups[(spec.bucket(t.workload.axes), t.solution)].append(t)
        for (bucket, solution), ts in groups.items():
            if all(t.evaluation.status == EvaluationStatus.PASSED for t in ts):
                suffix = solution.removeprefix(f"{name}_")
                out.setdefault(name, {}).setdefault(bucket, {})[suffix] = mean(
                    t.evaluation.performance.latency_ms for t in ts)
    return out


def op_times(root: str | Path, solution: str | None = None) -> list[OpTime]:
    """The estimate per Definition, largest first. `solution`: a suffix (torch, triton, ...);
    None: the fastest that passed, bucket by bucket."""
    root = Path(root)
    calls = json.loads((root / "capture.json").read_text()).get("calls", {})
    measured = latencies(TraceSet.from_path(str(root)))
    rows = []
    for name, per_bucket in calls.items():
        table = measured.get(name)
        if not table:
            continue  # never benchmarked
        total, used = 0.0, ""
        for bucket_text, n in per_bucket.items():
            bucket = int(bucket_text)
            nearest = min(table, key=lambda b: (abs(b - bucket), b))
            options = table[nearest]
            if solution is not None:
                if solution not in options:
                    continue
                pick = solution
            else:
                pick = min(options, key=options.get)
            total += n * options[pick]
            used = used or pick
        rows.append(OpTime(name, sum(per_bucket.values()), used, total))
    return sorted(rows, key=lambda r: -r.total_ms)


def format_times(rows: list[OpTime]) -> str:
    whole = sum(r.total_ms for r in rows) or 1.0
    lines = [f"{'definition':<44} {'calls':>6} {'solution':<8} {'ms':>9} {'share':>6}"]
    for r in rows:
        lines.append(f"{r.definition:<44} {r.calls:>6} {r.solution:<8} {r.total_ms:9.2f} "
                     f"{100 * r.total_ms / whole:5.1f}%")
    return "\n".join(lines)
