"""tools/check_official_refs.py: the 官方实现 references parse, and each one is verified against
a commit of a git repository. The logic runs on a small repository made here (CI has no clone of
sgl-project/mini-sglang); the real pages are checked too when the clone is on this machine."""

from __future__ import annotations

import importlib.util
import random
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
