"""tools/check_official_refs.py: the 官方实现 references parse, and each one is verified against
a commit of a git repository. The logic runs on a small repository made here (CI has no clone of
sgl-project/mini-sglang); the real pages are checked too when the clone is on this machine.

Every other path a page or the README cites (tools/..., benchmarks/..., DESIGN.md) is one of this
repository's, and must exist here."""

from __future__ import annotations

import importlib.util
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tools" / "check_official_refs.py"


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_official_refs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


refs = _load_checker()


def git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    return subprocess.run([*command, *args], capture_output=True, text=True, check=True).stdout


def make_source(padding: int) -> tuple[str, dict[str, int]]:
    """A module whose line numbers shift with `padding`; returns it and where things are."""
    lines = ["from dataclasses import dataclass", ""] + ["# filler"] * padding + [""]
    where = {}

    def add(text: str, name: str | None = None) -> None:
        lines.append(text)
        if name:
            where[name] = len(lines)

    add("@dataclass", "decorator")
    add("class Pool:", "Pool")
    add("    size: int", "size")
    add("")
    add("    def store(self, k):", "Pool.store")
    add("        helper(k + 1)", "helper call")
    add("        return k")
    add("")
    add("")
    add("class Other:", "Other")
    add("    def store(self):", "Other.store")
    add("        pass")
    add("")
    add("")
    add("def helper(x):", "helper")
    add("    return x")
    add("")
    add("LIMIT = 8", "LIMIT")
    return "\n".join(lines) + "\n", where


@pytest.fixture
def official(tmp_path):
    """A one-commit repository with python/minisgl/pool.py; returns (repo, commit, where)."""
    repo = tmp_path / "official"
    source, where = make_source(random.randint(0, 40))
    (repo / "python" / "minisgl").mkdir(parents=True)
    (repo / "python" / "minisgl" / "pool.py").write_text(source, encoding="utf-8")
    (repo / "benchmark").mkdir()
    (repo / "benchmark" / "bench.py").write_text("def main():\n    pass\n", encoding="utf-8")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    commit = git(repo, "rev-parse", "HEAD").strip()
    where["end"] = len(source.splitlines())
    return repo, commit, where


def write_docs(tmp_path: Path, commit: str, bullets: list[str], intro: str | None = None) -> Path:
    docs = tmp_path / "docs"
    (docs / "chapters").mkdir(parents=True, exist_ok=True)
    (docs / "index.md").write_text(
        f"# 首页\n\n行号对应提交 {commit[:7]}（完整哈希 {commit}，2026-03-13）。\n", encoding="utf-8"
    )
    intro = intro or "以下路径都在官方仓库的 `python/minisgl/` 下，行号对应首页注明的提交："
    page = ["# 第 1 章", "", "正文第 3 行不是引用。", "", "## 官方实现", "", intro, ""]
    page += bullets + ["", "## 测试", "", "- 这里的 `pool.py` 第 1 行不检查"]
    (docs / "chapters" / "ch01.md").write_text("\n".join(page) + "\n", encoding="utf-8")
    return docs


FIRST_BULLET_LINE = 9  # line of the first bullet in the page write_docs makes


def test_good_references_pass(tmp_path, official, capsys):
    repo, commit, w = official
    bullets = [
        f"- 池子：`pool.py` · `Pool` 第 {w['decorator']}–{w['Pool.store'] + 2} 行（"
        f"`Pool.store` 第 {w['Pool.store']}–{w['Pool.store'] + 2} 行，"
        f"`size` 第 {w['size']} 行，`helper` 在第 {w['helper call']} 行，"
        f"`helper(k + 1)` 在第 {w['helper call']} 行），"
        f"`Other.store` 第 {w['Other.store']}、{w['helper']}–{w['end']} 行，"
        f"`LIMIT` 从第 {w['LIMIT']} 行起",
        f"- 另一个文件：`pool.py` · 第 1–{w['end']} 行；顺带提到 `pool.py`",
    ]
    docs = write_docs(tmp_path, commit, bullets)
    problems, summary = refs.check(docs, repo)
    assert problems == []
    assert summary == f"checked 8 references on 1 pages against {commit[:7]}: all OK"
    assert refs.main(["--repo", str(repo), "--docs", str(docs)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == summary


def test_paths_outside_the_package_use_the_repository_root(tmp_path, official):
    repo, commit, _ = official
    bullets = ["- 基准：`benchmark/bench.py` · `main` 第 1–2 行"]
    docs = write_docs(tmp_path, commit, bullets, intro="以下路径都在官方仓库下：")
    assert refs.check(docs, repo)[0] == []


@pytest.mark.parametrize(
    ("bullet", "message"),
    [
        ("- a：`nope.py` · 第 1 行", "nope.py does not exist"),
        ("- a：`pool.py` · 第 1–{past} 行", "is outside it"),
        ("- a：`pool.py` · `helper` 第 {pool} 行", "`helper` is at line {helper} of"),
        ("- a：`pool.py` · `Pool.store` 第 {other_store} 行", "`Pool.store` is at line"),
        ("- a：`pool.py` · `helper` 在第 1 行", "`helper` is at line"),
        ("- a：`pool.py` · `k + 2` 在第 {helper_call} 行", "`k + 2` is not in"),
        ("- a：`pool.py` · `missing` 第 1 行", "`missing` is not in"),
        ("- a：`pool.py` · 第 3-4 行", "cannot parse '第 3-4 行'"),
        ("- a：`pool.py`（abc1234）· 第 1 行", "per-reference commit"),
        ("- a：第 1 行，`pool.py` · 第 2 行", "comes before any file"),
        ("- a：`pool.py` 第 1 行", "bullet names no file"),
        ("- a：`pool.py` · 第 1 行，定义在 `gone.py`", "gone.py does not exist"),
        ("- a：`pool.py` · 第 5–2 行", "bad line range"),
        ("不是列表的一行", "expected a '- 标签：`path` · …' bullet"),
    ],
)
def test_bad_reference_is_reported_with_page_and_line(tmp_path, official, capsys, bullet, message):
    repo, commit, w = official
    fill = {
        "past": w["end"] + 1,
        "pool": w["Pool"],
        "helper": w["helper"],
        "other_store": w["Other.store"],
        "helper_call": w["helper call"],
    }
    good = f"- 好的：`pool.py` · `LIMIT` 第 {w['LIMIT']} 行"
    docs = write_docs(tmp_path, commit, [good, bullet.format(**fill)])
    problems, summary = refs.check(docs, repo)
    assert problems and {p.line for p in problems} == {FIRST_BULLET_LINE + 1}
    assert any(message.format(**fill) in p.message for p in problems), problems
    assert summary.endswith(f": {len(problems)} problems")
    assert refs.main(["--repo", str(repo), "--docs", str(docs)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"docs/chapters/ch01.md:{FIRST_BULLET_LINE + 1}: ")
    assert out[-1] == summary


def test_intro_line_is_required_and_the_pin_must_be_named(tmp_path, official):
    repo, commit, _ = official
    docs = write_docs(tmp_path, commit, ["- a：`pool.py` · 第 1 行"], intro="路径都在 `python/minisgl/` 下：")
    problems, _ = refs.check(docs, repo)
    assert [(p.line, "以下路径都在" in p.message) for p in problems] == [(7, True)]
    (docs / "index.md").write_text("# 首页\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="no line naming the pinned commit"):
        refs.check(docs, repo)


CLONE = refs.DEFAULT_CLONE


@pytest.mark.skipif(not CLONE.exists(), reason="no local clone of sgl-project/mini-sglang")
def test_tutorial_references_match_the_pinned_official_commit(capsys):
    """The real check: `python tools/check_official_refs.py` (tested above on a small repo)."""
    assert refs.main(["--repo", str(CLONE)]) == 0, capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Paths of this repository that the pages and the README cite must exist. A `## 官方实现`
# section cites the official repository (checked above, against its pinned commit), so its lines
# are skipped; elsewhere a path under one of our own top-level folders, a `minisgl/...` path (the
# package, as listings title it), a root document such as DESIGN.md, or a results file named
# alone (h200_*.txt, cpu_*.txt: benchmarks/results/) is ours and must be here.

OWN_FOLDERS = ("python", "tools", "benchmarks", "tests", "examples", "docs", "practice")
PATH_CHARS = r"[A-Za-z0-9_./*<>-]"
# A results file named alone (h200_stage5.txt) is one of benchmarks/results/.
RESULT_NAME = r"(?:h200|cpu)_[A-Za-z0-9_*]+\.(?:txt|json|png|log)\b"
RESULTS = "benchmarks/results/"
CITED = re.compile(
    r"(?<![A-Za-z0-9_./$~-])"  # not the tail of a longer path, a URL or $OUT/...
    rf"((?:{'|'.join(OWN_FOLDERS)}|minisgl)/{PATH_CHARS}*|[A-Z][A-Z0-9_]*\.md\b"
    rf"|{RESULT_NAME})"
)
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def cited_paths(text: str):
    """(line number, path) of every repository path the page cites outside 官方实现 sections."""
    official, fence = False, None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = FENCE.match(line)
        if opening and (fence is None or line.strip().startswith(fence)):
            fence = None if fence else opening[1]
            continue
        if fence is None and line.startswith("#"):
            official = line.strip() == refs.SECTION
        if official:
            continue
        for match in CITED.finditer(line):
            yield number, match[1].rstrip(".-")  # a sentence's full stop is not the path's


def path_exists(root: Path, path: str) -> bool:
    """Placeholders (chNN, <原路径>, *) must match at least one file."""
    if path.startswith("minisgl/"):
        path = "python/" + path
    elif re.fullmatch(RESULT_NAME, path):
        path = RESULTS + path
    if "*" in path or "<" in path or "NN" in path:
        pattern = re.sub(r"<[^/]*>?", "*", path).replace("NN", "[0-9][0-9]").rstrip("/")
        return any(root.glob(pattern))
    return (root / path).exists()


def missing_citations(root: Path, pages: list[Path]) -> list[str]:
    return [
        f"{page.relative_to(root).as_posix()}:{number}: {path}"
        for page in pages
        for number, path in cited_paths(page.read_text(encoding="utf-8"))
        if not path_exists(root, path)
    ]


def test_pages_cite_only_paths_the_repository_holds():
    pages = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
    missing = missing_citations(REPO, pages)
    assert not missing, "pages cite files this repository does not hold:\n" + "\n".join(missing)


OLD_CH16 = (  # the sentence chapter 16 had, citing a design note that lives outside the repo
    "设置 `MINISGL_DUMMY_WEIGHT=1`，`LLM` 就默认用随机权重（或者像 DESIGN.md 说的，"
    "把随机权重写进 Hugging Face 缓存目录）。"
)


@pytest.mark.parametrize(
    ("line", "missing"),
    [
        (OLD_CH16, ["DESIGN.md"]),
        ("见 `tools/gone.py` 和 benchmarks/results/none.txt。", ["tools/gone.py",
                                                              "benchmarks/results/none.txt"]),
        ("标题里的 `minisgl/server/gone.py`", ["minisgl/server/gone.py"]),
        ("结果在 `h200_gone.txt` 和 `cpu_long_prefill.txt` 里", ["h200_gone.txt"]),
        ("`tests/test_ch99_*.py`、`examples/chNN_*.py` 之外", ["tests/test_ch99_*.py"]),
        ("`tools/steps.py`、`tests/test_x.py::test_y`、`examples/chNN_*.py`、README.md。", []),
        ("官方的 `benchmark/offline/bench.py`、`scheduler/gone.py`，https://x.org/tools/gone.py", []),
    ],
)
def test_missing_repository_paths_are_reported(tmp_path, line, missing):
    for name in ["tools/steps.py", "tests/test_x.py", "examples/ch01_main.py", "README.md",
                 "python/minisgl/server/args.py", "benchmarks/results/cpu_long_prefill.txt"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("", encoding="utf-8")
    page = tmp_path / "docs" / "chapters" / "ch01.md"
    page.parent.mkdir(parents=True)
    page.write_text(f"# 第 1 章\n\n{line}\n", encoding="utf-8")
    assert missing_citations(tmp_path, [page]) == [f"docs/chapters/ch01.md:3: {p}" for p in missing]


def test_official_sections_and_code_fences_are_told_apart(tmp_path):
    page = tmp_path / "README.md"
    page.write_text(
        "\n".join([
            "## 官方实现", "", "以下路径都在官方仓库下：", "", "- 基准：`tools/official_only.py` · 第 1 行",
            "```bash", "# a comment in a fence is no heading", "python tools/official_too.py", "```",
            "## 测试", "", "```console", "$ python tools/gone.py", "```",
        ]) + "\n",
        encoding="utf-8",
    )
    assert missing_citations(tmp_path, [page]) == ["README.md:13: tools/gone.py"]
