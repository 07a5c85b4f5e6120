"""Check every `## 官方实现` reference in docs/ against one commit of the official mini-sglang.

The tutorial cites the official repository (sgl-project/mini-sglang) by path and line range. The
commit those line numbers belong to is named once, in docs/index.md ("完整哈希 <40 hex>"); this
script reads it from there, so the page and the check can never disagree. A section looks like:

    ## 官方实现

    以下路径都在 …… 的 `python/minisgl/` 下，行号对应首页注明的提交：

    - 调度器：`scheduler/scheduler.py` · `Scheduler.__init__` 第 46–76 行（`token_pool` 在第 71 行），
      `_make_positions` 从第 236 行起
    - 注册：`kvcache/__init__.py` · 第 47–51、54–58 行

The intro line's backticked folder (if any) is the base of every path in the section. Each
bullet (one line on the page, wrapped above only to fit) names a file as "`path` ·"; every
"第 A–B 行" / "第 A、B–C 行" / "从第 A 行起" after it refers to that file. A backticked name
written right before a range must lie inside it, in one of two senses: "`X` 第 A–B 行" cites
where X is defined (a dotted `A.b` is `b` inside `class A`; a plain name is its `def`/`class` if
the file has one, else an assignment, else any occurrence), while "`X` 在第 A 行" cites a place
X is used (any occurrence). Code that is not a name (`num_pages + 1`) must appear literally in
the cited lines. Other backticked paths in a bullet must exist.

Usage: python tools/check_official_refs.py [--repo PATH] [--docs DIR]
where PATH is a clone (bare is fine) of https://github.com/sgl-project/mini-sglang that has the
pinned commit; tests/test_docs_refs.py runs this on the tutorial when such a clone is present and
otherwise checks the parsing and symbol logic on a small repository it makes.
Exit status 1, with one "page:line: problem" per bad reference, when anything fails to parse or
verify; the last line is always the summary.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOCS = REPO_ROOT / "docs"
DEFAULT_CLONE = Path("/work/.mirror/sgl-project+mini-sglang/repo")
SECTION = "## 官方实现"

PIN = re.compile(r"提交 (?P<short>[0-9a-f]{7})（完整哈希 (?P<full>[0-9a-f]{40})")
# A per-reference commit in parentheses, the format this checker replaced.
INLINE_COMMIT = re.compile(r"（[0-9a-f]{7,40}）")
RANGE_SPEC = r"\d+(?:–\d+)?(?:、\d+(?:–\d+)?)*"
RANGE = re.compile(
    r"(?:`(?P<symbol>[^`]+)`\s*(?P<used>在)?)?"
    rf"(?:第 (?P<spec>{RANGE_SPEC}) 行|从第 (?P<start>\d+) 行起)"
)
# Anything that looks like a line citation; each must be covered by a RANGE match.
LOOSE_RANGE = re.compile(r"第\s*\d[\d\s–\-—~、,，]*行")
HEAD = re.compile(r"`(?P<path>[^`\s]+)`\s*·")
SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".h", ".toml")
PATHLIKE = re.compile(r"`(?P<path>[A-Za-z_][\w./-]*)`")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class Problem:
    page: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Reference:
    """One "第 … 行" citation: a file, its line ranges (end None: to the end), maybe a symbol
    that is defined there (used=False) or merely appears there (used=True)."""

    page: str
    line: int
    path: str
    ranges: tuple[tuple[int, int | None], ...]
    symbol: str | None
    used: bool = False


@dataclass
class ParsedDocs:
    references: list[Reference] = field(default_factory=list)
    mentioned_paths: list[tuple[str, int, str]] = field(default_factory=list)  # page, line, path
    pages: set[str] = field(default_factory=set)
    problems: list[Problem] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# parsing the pages


def read_pinned_commit(docs: Path) -> str:
    text = (docs / "index.md").read_text(encoding="utf-8")
    found = PIN.search(text)
    if found is None:
        raise SystemExit(f"{docs / 'index.md'}: no line naming the pinned commit (完整哈希 …)")
    if not found["full"].startswith(found["short"]):
        raise SystemExit(f"{docs / 'index.md'}: {found['short']} is not a prefix of {found['full']}")
    return found["full"]


def parse_ranges(match: re.Match) -> tuple[tuple[int, int | None], ...]:
    if match["start"] is not None:
        return ((int(match["start"]), None),)
    ranges = []
    for part in match["spec"].split("、"):
        first, _, last = part.partition("–")
        ranges.append((int(first), int(last or first)))
    return tuple(ranges)


def parse_bullet(page: str, number: int, text: str, base: str, parsed: ParsedDocs) -> None:
    heads = list(HEAD.finditer(text))
    if not heads:
        parsed.problems.append(Problem(page, number, "bullet names no file as `path` ·"))
        return
    head_paths = {m.start(): base + m["path"] for m in heads}
    covered = []
    for match in RANGE.finditer(text):
        covered.append(match.span())
        owners = [start for start in head_paths if start < match.start()]
        if not owners:
            parsed.problems.append(Problem(page, number, f"'{match[0]}' comes before any file"))
            continue
        ranges = parse_ranges(match)
        for first, last in ranges:
            if first < 1 or (last is not None and last < first):
                parsed.problems.append(Problem(page, number, f"bad line range '{match[0]}'"))
        path = head_paths[max(owners)]
        used = match["used"] is not None
        parsed.references.append(Reference(page, number, path, ranges, match["symbol"], used))
    for loose in LOOSE_RANGE.finditer(text):
        if not any(start <= loose.start() < end for start, end in covered):
            message = f"cannot parse '{loose[0]}' (write 第 A–B 行, 第 A、B 行 or 从第 A 行起)"
            parsed.problems.append(Problem(page, number, message))
    for match in PATHLIKE.finditer(text):
        if match["path"].endswith(SOURCE_SUFFIXES) and match.start() not in head_paths:
            parsed.mentioned_paths.append((page, number, base + match["path"]))


def parse_page(page: str, lines: list[str], parsed: ParsedDocs) -> None:
    inside, base, intro_seen = False, "", False
    for number, line in enumerate(lines, start=1):
        if line.startswith("#"):
            inside = line.strip() == SECTION
            intro_seen = False
            if inside:
                parsed.pages.add(page)
            continue
        if not inside or not line.strip():
            continue
        if INLINE_COMMIT.search(line):
            message = "per-reference commit: line numbers follow the commit named in docs/index.md"
            parsed.problems.append(Problem(page, number, message))
        if not intro_seen:
            intro_seen = True
            if not line.startswith("以下路径都在"):
                parsed.problems.append(Problem(page, number, "section must open with 以下路径都在…"))
            folder = re.search(r"`([^`]+/)`", line)
            base = folder[1] if folder else ""
            continue
        if not line.startswith("- "):
            parsed.problems.append(Problem(page, number, "expected a '- 标签：`path` · …' bullet"))
            continue
        parse_bullet(page, number, line, base, parsed)


def parse_docs(docs: Path) -> ParsedDocs:
    parsed = ParsedDocs()
    for path in sorted(docs.rglob("*.md")):
        page = path.relative_to(docs.parent).as_posix()
        parse_page(page, path.read_text(encoding="utf-8").splitlines(), parsed)
    return parsed


# ---------------------------------------------------------------------------------------------
# the official source at the pinned commit


class Checkout:
    """Read-only view of one commit of a git clone (bare or not)."""

    def __init__(self, repo: Path, commit: str):
        self.repo, self.commit = repo, commit
        listing = self._git("ls-tree", "-r", "--name-only", commit)
        self.files = set(listing.splitlines())
        self.dirs = {str(Path(f).parent) for f in self.files}
        self._lines: dict[str, tuple[str, ...]] = {}

    def _git(self, *args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(self.repo), *args], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise SystemExit(f"git {' '.join(args)} failed in {self.repo}: {result.stderr.strip()}")
        return result.stdout

    def exists(self, path: str) -> bool:
        return path in self.files or path.rstrip("/") in self.dirs

    def lines(self, path: str) -> tuple[str, ...]:
        if path not in self._lines:
            self._lines[path] = tuple(self._git("show", f"{self.commit}:{path}").splitlines())
        return self._lines[path]


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def block_end(lines: tuple[str, ...], header: int) -> int:
    """Last line (1-based) of the indented block whose header is at 1-based line `header`."""
    end = header
    for number in range(header + 1, len(lines) + 1):
        text = lines[number - 1]
        if text.strip() and indent(text) <= indent(lines[header - 1]):
            break
        if text.strip():
            end = number
    return end


def name_lines(lines: tuple[str, ...], name: str, first: int, last: int) -> list[int]:
    """Where `name` lives in lines first..last: its def/class, else assignments or annotated
    fields, else any use."""
    escaped = re.escape(name)
    kinds = [
        rf"^\s*(?:async\s+def|def|class|struct)\s+{escaped}\b",
        rf"^\s*(?:self\.)?{escaped}\s*(?::|=(?!=))",  # an assignment or a dataclass field
        rf"\b{escaped}\b",
    ]
    for kind in kinds:
        pattern = re.compile(kind)
        found = [n for n in range(first, last + 1) if pattern.search(lines[n - 1])]
        if found:
            return found
    return []


def symbol_lines(lines: tuple[str, ...], symbol: str, used: bool = False) -> list[int]:
    """Candidate 1-based lines for `symbol`; empty when the file has no such thing."""
    if used and re.fullmatch(r"[A-Za-z_]\w*", symbol):
        return [n for n in range(1, len(lines) + 1) if re.search(rf"\b{symbol}\b", lines[n - 1])]
    if IDENTIFIER.fullmatch(symbol) and not used:
        *outer, name = symbol.split(".")
        first, last = 1, len(lines)
        for part in outer:
            classes = name_lines(lines, part, first, last)
            header = next((n for n in classes if re.match(r"\s*class\s", lines[n - 1])), None)
            if header is None:  # not a class path, e.g. `ctx.batch`: look for the text itself
                return [n for n in range(1, len(lines) + 1) if symbol in lines[n - 1]]
            first, last = header + 1, block_end(lines, header)
        return name_lines(lines, name, first, last)
    return [n for n in range(1, len(lines) + 1) if symbol in lines[n - 1]]


def literal_in_ranges(lines: tuple[str, ...], text: str, ranges) -> bool:
    for first, last in ranges:
        if text in "\n".join(lines[first - 1 : last]):
            return True
    return False


def cited(ranges) -> str:
    return "第 " + "、".join(str(a) if a == b else f"{a}–{b}" for a, b in ranges) + " 行"


def check_reference(ref: Reference, checkout: Checkout) -> list[str]:
    if ref.path not in checkout.files:
        return [f"{ref.path} does not exist at the pinned commit"]
    lines = checkout.lines(ref.path)
    ranges = [(first, len(lines) if last is None else last) for first, last in ref.ranges]
    bad = [(a, b) for a, b in ranges if b > len(lines) or a > len(lines)]
    if bad:
        return [f"{ref.path} has {len(lines)} lines; {cited(bad)} is outside it"]
    if ref.symbol is None:
        return []
    if not IDENTIFIER.fullmatch(ref.symbol):
        if literal_in_ranges(lines, ref.symbol, ranges):
            return []
    else:
        candidates = symbol_lines(lines, ref.symbol, ref.used)
        if any(first <= n <= last for n in candidates for first, last in ranges):
            return []
    where = symbol_lines(lines, ref.symbol, ref.used)
    if not where:
        return [f"`{ref.symbol}` is not in {ref.path}"]
    found = ", ".join(map(str, where[:5]))
    return [f"`{ref.symbol}` is at line {found} of {ref.path}, not in {cited(ranges)}"]


def check(docs: Path, repo: Path) -> tuple[list[Problem], str]:
    commit = read_pinned_commit(docs)
    checkout = Checkout(repo, commit)
    parsed = parse_docs(docs)
    problems = list(parsed.problems)
    for ref in parsed.references:
        problems += [Problem(ref.page, ref.line, m) for m in check_reference(ref, checkout)]
    for page, line, path in parsed.mentioned_paths:
        if not checkout.exists(path):
            problems.append(Problem(page, line, f"{path} does not exist at the pinned commit"))
    problems.sort(key=lambda p: (p.page, p.line))
    verdict = "all OK" if not problems else f"{len(problems)} problems"
    summary = (
        f"checked {len(parsed.references)} references on {len(parsed.pages)} pages "
        f"against {commit[:7]}: {verdict}"
    )
    return problems, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=DEFAULT_CLONE, help="clone of the official repo (default: %(default)s)")
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="the docs/ folder to check (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.repo.exists():
        print(f"no clone of sgl-project/mini-sglang at {args.repo}; pass --repo PATH")
        return 1
    problems, summary = check(args.docs, args.repo)
    for problem in problems:
        print(problem)
    print(summary)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
