"""The judge's terminal output."""

from __future__ import annotations

from .exercises import Exercise, by_chapter
from .progress import ExerciseStatus
from .runner import VERDICTS, JudgeResult
from .text import safe_text

DETAIL_TITLES = [
    ("input", "输入"),
    ("expected", "期望输出"),
    ("actual", "实际输出"),
    ("traceback", "错误信息"),
    ("stdout", "程序输出（stdout）"),
    ("stderr", "程序输出（stderr）"),
]


def _indent(text: str, pad: str = "    ") -> str:
    return "\n".join(pad + line for line in safe_text(text).splitlines())


def _width(text: str) -> int:
    return sum(2 if ord(ch) > 0x2E7F else 1 for ch in text)


def sandbox_line(result: JudgeResult) -> str:
    s = result.sandbox
    if not s:
        return ""
    who = f"uid {s['uid']}（无任何 capability）" if s.get("uid") is not None else "当前用户"
    if s.get("namespaces"):
        who += " · 独立的网络/挂载命名空间"
    lock = f"Landlock ABI {s['landlock_abi']}" if s.get("landlock_abi") else "无 Landlock"
    return (f"沙箱：{who} · {lock} · seccomp · 每个用例 CPU {s['cpu_s']:g} s（{_cpu_how(s)}）· "
            f"墙钟 {s.get('wall_s', 0):g} s · 内存 {s['memory_mb']} MB（{_memory_how(s)}）· "
            f"进程 {s['max_processes']} · 单个文件 {s['output_mb']} MB")


def _cpu_how(s: dict) -> str:
    how = s.get("cpu_accounting", "proc")
    if how.startswith("cgroup"):
        return f"{how}，统计全部进程"
    return "按进程树估计，不含被内核自动回收的子进程；墙钟时间兜底"


def _memory_how(s: dict) -> str:
    how = s.get("memory_accounting", "rlimit_as")
    if how.startswith("cgroup"):
        return f"{how}，全部进程合计"
    return "RLIMIT_AS，每个进程分别计"


def format_result(result: JudgeResult, source_name: str = "") -> str:
    ex = result.exercise
    lines = [f"{ex.label} · 第 {ex.chapter} 章"]
    if source_name:
        lines.append(f"文件：{safe_text(source_name)}")
    if sandbox_line(result):
        lines.append(sandbox_line(result))
    lines.append("")
    names = [f"#{c.index + 1} {c.name}{'' if c.visible else '（隐藏）'}" for c in result.cases]
    width = max((_width(n) for n in names), default=0)
    for case, name in zip(result.cases, names):
        time = f"{case.cpu_s:.3f}s" if isinstance(case.cpu_s, (int, float)) else ""
        message = safe_text(case.message)
        first_line = message.splitlines()[0] if message else ""
        note = f"  {first_line}" if case.verdict != "AC" and first_line else ""
        if len(note) > 90:
            note = note[:90] + "…"
        lines.append(f"  {name}{' ' * (width - _width(name))}  {case.verdict:<3}  {time:>8}{note}")
    failure = result.first_failure
    if failure is not None:
        lines += ["", f"第一个未通过的用例：#{failure.index + 1} {failure.name}",
                  f"  结论：{failure.verdict}（{VERDICTS[failure.verdict]}）"
                  + safe_text(failure.message).replace("\n", "\n    ")]
        for key, title in DETAIL_TITLES:
            if failure.details.get(key):
                lines += [f"  {title}：", _indent(failure.details[key])]
    if result.sandbox.get("stray_killed"):
        lines.append(f"\n评测结束时清理了 {result.sandbox['stray_killed']} 个残留进程。")
    lines += ["", f"结果：{result.passed}/{len(result.cases)} 通过",
              f"{result.passed} passed, {result.failed} failed"]
    return "\n".join(lines)


def format_list(passed: set[int] | None = None, chapter: int | None = None) -> str:
    passed = passed or set()
    lines = []
    for number, exercises in by_chapter().items():
        if chapter not in (None, number):
            continue
        lines.append(f"第 {number} 章")
        for ex in exercises:
            mark = "✓" if ex.id in passed else " "
            lines.append(f"  {mark} {ex.label}  [{ex.language}]  {ex.dir.name}")
    return "\n".join(lines)


def format_progress(statuses: dict[int, ExerciseStatus]) -> str:
    """One row per chapter: exercises passed of all, submissions, and each exercise's mark
    (✓ passed, ✗ tried and not yet passed with its best result, · not tried)."""
    header = ["章", "通过", "提交次数", "题目"]
    rows = []
    done = total = attempts = 0
    for number, exercises in by_chapter().items():
        marks, passed, tries = [], 0, 0
        for ex in exercises:
            status = statuses.get(ex.id)
            if status is None:
                marks.append(f"·{ex.id}")
            elif status.passed:
                marks.append(f"✓{ex.id}")
                passed += 1
            else:
                marks.append(f"✗{ex.id}({status.best})")
            tries += status.attempts if status else 0
        rows.append([f"{number}", f"{passed}/{len(exercises)}", f"{tries}", " ".join(marks)])
        done, total, attempts = done + passed, total + len(exercises), attempts + tries
    rows.append(["合计", f"{done}/{total}", f"{attempts}", ""])
    widths = [max(_width(r[i]) for r in [header, *rows]) for i in range(3)]

    def line(cells: list[str]) -> str:
        padded = [c + " " * (w - _width(c)) for c, w in zip(cells, widths)]
        return "  ".join([*padded, cells[3]]).rstrip()

    return "\n".join([line(header), *map(line, rows), "", "✓ 已通过  ✗ 做过、还没通过（括号里是最好成绩）  · 还没做"])


def exercise_json(ex: Exercise) -> dict:
    return {"id": ex.id, "chapter": ex.chapter, "title": ex.title, "difficulty": ex.difficulty,
            "language": ex.language, "file": ex.file, "label": ex.label,
            "time_limit_s": ex.time_limit_s, "memory_mb": ex.memory_mb}
