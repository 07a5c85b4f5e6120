"""Judge a solution to a minisgl exercise, in the terminal or in the browser.

    python practice/judge.py --list               exercises by chapter (✓ = passed)
    python practice/judge.py 201                  judge practice/workspace/201/solution.py
    python practice/judge.py 201 my_rmsnorm.py    judge another file
    python practice/judge.py --progress           passed and attempted exercises, per chapter
    python practice/judge.py --serve [--port P]   the page at http://127.0.0.1:P/

Every judged submission is kept (practice/judgekit/progress.py: a SQLite database in the minisgl
cache folder). Old exercise ids still work (202 is now 1901). Exit status 0 only when every case
is AC.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from judgekit import progress  # noqa: E402
from judgekit.exercises import by_chapter, find_exercise  # noqa: E402
from judgekit.report import (  # noqa: E402
    exercise_json,
    format_list,
    format_progress,
    format_result,
)
from judgekit.runner import judge  # noqa: E402


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds like Ctrl+C: the sandbox is stopped, folders removed


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(description="minisgl 练习题评测",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("id", nargs="?", help="题号，例如 201")
    parser.add_argument("file", nargs="?",
                        help="要评测的文件（不给时用 practice/workspace/<题号>/<文件名>）")
    parser.add_argument("--list", action="store_true", help="按章节列出练习题")
    parser.add_argument("--chapter", type=int, help="和 --list 一起用：只列这一章（不给时列全部）")
    parser.add_argument("--progress", action="store_true",
                        help=f"按章节列出通过情况（记录在 {progress.database_path()}）")
    parser.add_argument("--json", action="store_true", help="以 JSON 输出（--list 或评测结果）")
    parser.add_argument("--serve", action="store_true", help="启动本地网页（只监听 127.0.0.1）")
    parser.add_argument("--port", type=int, default=8790, help="网页端口")
    args = parser.parse_args(argv)

    if args.serve:
        from judgekit.web import serve

        serve(args.port)
        return 0
    if args.progress:
        print(format_progress(progress.statuses()))
        return 0
    if args.list:
        if args.json:
            groups = {str(ch): [exercise_json(e) for e in exs] for ch, exs in by_chapter().items()
                      if args.chapter in (None, ch)}
            print(json.dumps(groups, ensure_ascii=False, indent=2))
        else:
            print(format_list(progress.passed_ids(), args.chapter) or "没有练习题")
        return 0
    if not args.id:
        parser.print_help()
        return 2

    ex = find_exercise(args.id)
    if ex is None:
        print(f"没有题号为 {args.id} 的练习题；用 --list 查看全部", file=sys.stderr)
        return 2
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            print(f"找不到文件 {path}", file=sys.stderr)
            return 2
    else:
        created = not ex.workspace_file(create=False).exists()
        path = ex.workspace_file()
        if created:
            print(f"已从初始代码创建 {_display(path)}，在这个文件里写你的答案。\n")
    if args.id.strip() != str(ex.id):
        print(f"第 {args.id} 题现在的题号是 {ex.id}。\n")
    source = path.read_text(encoding="utf-8", errors="replace")
    result = judge(ex, source)
    progress.record(ex.id, [c.verdict for c in result.cases], source, "cli")
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False, indent=2))
    else:
        print(format_result(result, _display(path)))
    return 0 if result.ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
