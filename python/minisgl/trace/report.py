"""The benchmark's report (chapter 22): a table per Definition and a plot of the speedups."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from flashinfer_bench.data import EvaluationStatus, TraceSet


@dataclass
class Row:
    definition: str
    solution: str  # the suffix: torch, triton, cuda, ...
    workloads: int
    passed: int
    statuses: str  # e.g. "PASSED 4" or "INCORRECT_NUMERICAL 4"
    latency_ms: float | None  # mean over passed workloads
    speedup: float | None  # mean reference latency / latency


def rows(trace_set: TraceSet) -> list[Row]:
    out = []
    for name in sorted(trace_set.traces):
        by_solution: dict[str, list] = defaultdict(list)
        for t in trace_set.traces[name]:
            by_solution[t.solution.removeprefix(f"{name}_")].append(t)
        for suffix, traces in sorted(by_solution.items()):
            counts: dict[str, int] = defaultdict(int)
            for t in traces:
                counts[t.evaluation.status.value] += 1
            ok = [t for t in traces if t.evaluation.status == EvaluationStatus.PASSED]
            out.append(Row(
                name, suffix, len(traces), len(ok),
                ", ".join(f"{s} {n}" for s, n in sorted(counts.items())),
                mean(t.evaluation.performance.latency_ms for t in ok) if ok else None,
                mean(t.evaluation.performance.speedup_factor for t in ok) if ok else None))
    return out


def table(rows_: list[Row]) -> str:
    head = f"{'definition':<46} {'solution':<10} {'passed':>7} {'latency ms':>11} " \
           f"{'vs ref':>8}  status"
    lines = [head, "-" * len(head)]
    for r in rows_:
        lat = f"{r.latency_ms:11.4f}" if r.latency_ms is not None else f"{'-':>11}"
        spd = f"{r.speedup:7.2f}x" if r.speedup is not None else f"{'-':>8}"
        lines.append(f"{r.definition:<46} {r.solution:<10} {r.passed:>3}/{r.workloads:<3} "
                     f"{lat} {spd}  {r.statuses}")
    return "\n".join(lines)


def plot(rows_: list[Row], path: str | Path, title: str = "") -> Path:
    """Bars: each solution's mean latency relative to the torch solution of its Definition
    (below 1 is faster); missing bars did not pass."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r.definition for r in rows_})
    solutions = sorted({r.solution for r in rows_})
    torch_ms = {r.definition: r.latency_ms for r in rows_ if r.solution == "torch"}
    width = 0.8 / max(len(solutions), 1)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(names) + 2), 4.5))
    for i, suffix in enumerate(solutions):
        xs, ys = [], []
        for j, name in enumerate(names):
            r = next((r for r in rows_ if r.definition == name and r.solution == suffix), None)
            base = torch_ms.get(name)
            if r is not None and r.latency_ms and base:
                xs.append(j + i * width)
                ys.append(base / r.latency_ms)
        ax.bar(xs, ys, width, label=suffix)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("speedup over the torch solution")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))], names, rotation=60,
                  ha="right", fontsize=7)
    ax.legend()
    ax.set_title(title or "minisgl solutions per definition")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
