"""The mkdocs site builds in strict mode, and docs/hooks.py expands (or refuses) directives."""

from __future__ import annotations

import difflib
import importlib.util
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "docs" / "hooks.py"


def _load_hooks():
    spec = importlib.util.spec_from_file_location("minisgl_docs_hooks", HOOKS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()
steps = hooks.steps


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "-f",
        str(config),
        "-d",
        str(site),
    ]
    # The limit only guards against a hang: with 27 chapters the strict build took over 120 s on
    # a 2-core VM while two other test files ran beside it (CI runs two at a time)
    return subprocess.run(command, cwd=config.parent, capture_output=True, text=True, timeout=400)


def test_site_builds_strict(tmp_path):
    result = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "site" / "chapters" / "ch01" / "index.html").read_text(encoding="utf-8")
    assert "到这一章为止的文件" in page
    assert not (tmp_path / "site" / "hooks.py").exists()
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    edit = config["repo_url"] + "/" + config["edit_uri"] + "chapters/ch01.md"
    assert f'href="{edit}"' in page  # every page links to its source ("edit this page")


def test_nav_lists_every_chapter_page():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)

    listed = set(pages(config["nav"]))
    for ch in steps.load_manifest().chapters:
        if (REPO / ch.docs).is_file():
            assert ch.docs.removeprefix("docs/") in listed, f"{ch.docs} is not in mkdocs.yml nav"


def site_with_page(tmp_path: Path, body: str) -> Path:
    """A copy of the docs config whose only chapter page is `body` (the hook stays the real one)."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    config.pop("watch", None)
    config["hooks"] = [str(HOOKS)]
    config["nav"] = [{"首页": "index.md"}, {"第 1 章": "chapters/ch01.md"}]
    docs = tmp_path / "docs"
    (docs / "chapters").mkdir(parents=True)
    (docs / "index.md").write_text("# 首页\n", encoding="utf-8")
    (docs / "chapters" / "ch01.md").write_text(body, encoding="utf-8")
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def test_copied_config_builds(tmp_path):
    config = site_with_page(tmp_path, "# 1\n\n{{ tree }}\n")
    result = build(config, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("# 1\n\n{{ bogus }}\n", "unknown directive"),
        ('# 1\n\n{{ listing "python/minisgl/no_such_file.py" }}\n', "no_such_file.py"),
        (
            '# 1\n\n{{ listing "python/minisgl/__init__.py" pattern="no such line" }}\n',
            "matches no",
        ),
        ("# 1\n\n文中写 {{ tree }} 不行\n", "stand alone"),
        ('# 1\n\n带宽 {{ figure "benchmarks/results/none.txt" pattern="x" }} TB/s\n', "none.txt"),
        (
            '# 1\n\n带宽 {{ figure "benchmarks/results/h200_gpu_kernels.txt" pattern="no such" }}\n',
            "matches no line",
        ),
    ],
)
def test_bad_directive_fails_the_build(tmp_path, body, message):
    result = build(site_with_page(tmp_path, body), tmp_path / "site")
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert "chapters/ch01.md:3" in result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# expand() on a synthetic repository


SOURCE = "\n".join(
    [
        "import os",
        "",
        "",
        "@dataclass",
        "class Norm:",
        "    eps: float",
        "",
        "    def forward(",
        "        self, x",
        "    ):",
        "        return x",
        "",
        "",
        "def helper():",
        "    pass",
        "",
    ]
)


@pytest.fixture
def manifest(tmp_path):
    pkg = tmp_path / "python" / "minisgl"
    pkg.mkdir(parents=True)
    (pkg / "norm.py").write_text(SOURCE, encoding="utf-8")
    (pkg / "new.py").write_text("x = 1\n" + "# " + ">>> ch02\n" + "y = 2\n" + "# " + "<<< ch02\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "chapters.toml").write_text(
        "\n".join(
            f'[[chapter]]\nnumber = {n}\nslug = "s"\nstage = "一"\ntitle = "t"\n'
            f'main = "m{n}.py"\ntests = []\ndocs = "docs/ch0{n}.md"\nfiles = {files}\n'
            for n, files in [(1, '["python/minisgl/norm.py"]'), (2, '["python/minisgl/new.py"]')]
        ),
        encoding="utf-8",
    )
    return steps.load_manifest(tmp_path)


def test_listing_whole_file(manifest):
    out = hooks.expand('{{ listing "python/minisgl/norm.py" }}', 1, manifest)
    assert out == "**`minisgl/norm.py`**\n\n```python\n" + SOURCE.rstrip("\n") + "\n```"


def test_listing_pattern_takes_the_block_with_its_decorator(manifest):
    out = hooks.expand('{{ listing "python/minisgl/norm.py" pattern="class Norm" }}', 1, manifest)
    assert out.startswith(
        '**`minisgl/norm.py`**（第 4–11 行）\n\n```python linenums="4"\n@dataclass\n'
    )
    assert out.endswith("        return x\n```")
    inner = hooks.expand(
        '{{ listing "python/minisgl/norm.py" pattern="def forward" }}', 1, manifest
    )
    assert "    def forward(\n        self, x\n    ):\n        return x\n```" in inner


def test_listing_lines_and_chapter_option(manifest):
    out = hooks.expand('{{ listing "python/minisgl/norm.py" lines="14-15" }}', 1, manifest)
    assert out.endswith('```python linenums="14"\ndef helper():\n    pass\n```')
    assert "y = 2" in hooks.expand('{{ listing "python/minisgl/new.py" }}', 2, manifest)
    with pytest.raises(hooks.DirectiveError, match="does not exist at chapter 1"):
        hooks.expand('{{ listing "python/minisgl/new.py" chapter="1" }}', 2, manifest)
    with pytest.raises(hooks.DirectiveError, match="outside the file"):
        hooks.expand('{{ listing "python/minisgl/norm.py" lines="3-99" }}', 1, manifest)


def test_directives_inside_admonitions_keep_indentation_and_fences_are_left_alone(manifest):
    page = '??? note "答案"\n    {{ listing "python/minisgl/new.py" }}\n\n```\n{{ not a directive }}\n```'
    out = hooks.expand(page, 2, manifest)
    assert '??? note "答案"\n    **`minisgl/new.py`**\n\n    ```python\n    x = 1\n' in out
    assert out.endswith("```\n{{ not a directive }}\n```")


def test_tree_needs_a_chapter(manifest):
    assert "minisgl/" in hooks.expand("{{ tree }}", 2, manifest)
    with pytest.raises(hooks.DirectiveError, match="no chapter"):
        hooks.expand("{{ tree }}", None, manifest)


# ---------------------------------------------------------------------------------------------
# {{ figure }}, listing match=, {{ chapter_code }} on the synthetic repository


@pytest.fixture
def results(manifest):
    folder = manifest.root / "benchmarks" / "results"
    folder.mkdir(parents=True)
    (folder / "gpu.txt").write_text(
        "time copy:  10.0 us  4.10 TB/s\ntime store: 11.2 us  3.79 TB/s\nparity 6/6\n",
        encoding="utf-8",
    )
    return manifest


def test_figure_is_inline_and_takes_the_first_group(results):
    line = (
        'copy {{ figure "benchmarks/results/gpu.txt" pattern="copy: .* ([0-9.]+) TB/s" }} TB/s, '
        'store {{ figure "benchmarks/results/gpu.txt" pattern="store: +([0-9.]+) us" }} µs, '
        '{{ figure "benchmarks/results/gpu.txt" pattern="[0-9]+/[0-9]+" }}'
    )
    assert hooks.expand(line, 1, results) == "copy 4.10 TB/s, store 11.2 µs, 6/6"


@pytest.mark.parametrize(
    ("directive", "message"),
    [
        ('{{ figure "benchmarks/results/none.txt" pattern="x" }}', "does not exist"),
        ('{{ figure "benchmarks/results/gpu.txt" pattern="nothing here" }}', "matches no line"),
        ('{{ figure "benchmarks/results/gpu.txt" pattern="time" }}', "matches 2 lines"),
        ('{{ figure "python/minisgl/norm.py" pattern="eps" }}', "figures come from"),
        ('{{ figure "benchmarks/results/gpu.txt" }}', "pattern="),
    ],
)
def test_bad_figure_is_an_error(results, directive, message):
    with pytest.raises(hooks.DirectiveError, match=message):
        hooks.expand(f"第一行\n正文 {directive} 正文", 1, results, "page")


def test_block_directives_still_stand_alone(results):
    with pytest.raises(hooks.DirectiveError, match="page:1: a block directive must stand alone"):
        hooks.expand('见 {{ listing "python/minisgl/norm.py" }}', 1, results, "page")


def test_listing_match_keeps_the_matching_lines(results):
    out = hooks.expand('{{ listing "benchmarks/results/gpu.txt" match="^time " }}', 1, results)
    assert out == (
        "**`benchmarks/results/gpu.txt`**（摘录）\n\n```text\n"
        "time copy:  10.0 us  4.10 TB/s\ntime store: 11.2 us  3.79 TB/s\n```"
    )


@pytest.fixture
def grown(tmp_path):
    """Chapter 1 adds a.py and its main; chapter 2 changes a.py (markers) and adds b.cu."""
    pkg = tmp_path / "python" / "minisgl"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text(
        "def f():\n"
        "    # >>> before ch02\n    # return 1\n    # <<< before ch02\n"
        "    # >>> ch02\n    return 2\n    # <<< ch02\n"
        "\n\ndef g():\n    return 3\n",
        encoding="utf-8",
    )
    (pkg / "b.cu").write_text("__global__ void k() {}\n", encoding="utf-8")
    (tmp_path / "m1.py").write_text("print(1)\n", encoding="utf-8")
    (tmp_path / "m2.py").write_text("print(2)\n", encoding="utf-8")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "chapters.toml").write_text(
        "\n".join(
            f'[[chapter]]\nnumber = {n}\nslug = "s"\nstage = "一"\ntitle = "t"\n'
            f'main = "m{n}.py"\ntests = []\ndocs = "docs/ch0{n}.md"\nfiles = {files}\n'
            for n, files in [(1, '["python/minisgl/a.py"]'), (2, '["python/minisgl/b.cu"]')]
        ),
        encoding="utf-8",
    )
    return steps.load_manifest(tmp_path)


def test_chapter_code_folds_new_files_and_marks_changed_lines(grown):
    first = hooks.expand("{{ chapter_code }}", 1, grown)
    assert first.startswith('??? note "`minisgl/a.py`（本章新建）"\n    ```python linenums="1"\n')
    assert "    def f():\n        return 1\n" in first
    assert '??? note "`m1.py`（本章新建）"' in first and "b.cu" not in first
    second = hooks.expand("{{ chapter_code }}", 2, grown)
    assert second.startswith(
        '??? note "`minisgl/a.py`（本章修改，改动的行已高亮）"\n'
        '    ```python linenums="1" hl_lines="2"\n    def f():\n        return 2\n'
    )
    assert '??? note "`minisgl/b.cu`（本章新建）"\n    ```cuda linenums="1"\n' in second
    assert '??? note "`m2.py`（本章新建）"' in second and "m1.py" not in second
    assert hooks.spans([1, 2, 3, 7, 9, 10]) == "1-3 7 9-10"


# ---------------------------------------------------------------------------------------------
# The pages quote measured figures from benchmarks/results/, and show every line a chapter adds

FIGURE = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)*\s*(?:TB/s|GB/s|MB/s|tok/s|µs|us|ms|ns|微秒|毫秒|纳秒)(?![A-Za-z])"
    r"|(?<![\w.])\d+(?:\.\d+)?[x×](?![0-9A-Za-z])"  # a speedup: 1.52x (16 × 128 is a product)
    r"|(?<![\w.])\d+(?:\.\d+)?\s*倍"
    r"|(?<![\w./])\d+/\d+(?![\w/])"  # a count such as 6/6 prompts
)

# Numbers that look like figures but are not measurements, each allowed only inside its phrase on
# its page: values an exercise answer computes from the page's own givens, a constant of the code,
# an expression. A measured figure never goes here; it goes into benchmarks/results/ and the page
# includes it with {{ figure }}. An entry that no longer matches fails the test, so none go stale.
NOT_MEASURED = [
    ("ch04.md", "相差约 375 倍", "answer: 374,750 vs 999 tokens, from the question"),
    ("ch04.md", "NaN（0/0）", "an expression, not a count"),
    ("ch05.md", "条目数是 16 倍", "answer: page_size 16 against 1, from the question"),
    ("ch06.md", "组内最短者 1.25 倍", "the constant MAX_PADDING = 1.25 of torch_native.py"),
    ("ch19.md", "约 0.13 µs", "answer: 512 KB over the copy bandwidth included beside it"),
]


def page_prose(text: str):
    """(line number, line) outside fenced code, with every {{ ... }} directive taken out."""
    fence = None
    for number, line in enumerate(text.split("\n"), start=1):
        opening = hooks.FENCE.match(line)
        if fence:
            if opening and opening[1][0] == fence[0] and line.strip() == opening[1]:
                if len(opening[1]) >= len(fence):
                    fence = None
            continue
        if opening:
            fence = opening[1]
            continue
        yield number, hooks.INLINE.sub("", line)


def typed_figures(name: str, text: str) -> list[str]:
    found = []
    for number, line in page_prose(text):
        allowed = [
            range(m.start(), m.end())
            for page, phrase, _ in NOT_MEASURED
            if page == name
            for m in re.finditer(re.escape(phrase), line)
        ]
        for figure in FIGURE.finditer(line):
            if not any(figure.start() in span and figure.end() - 1 in span for span in allowed):
                found.append(f"{name}:{number}: {figure[0]!r}")
    return found


def test_pages_type_no_measured_figures():
    pages = sorted((REPO / "docs").rglob("*.md"))
    typed = [hit for page in pages for hit in typed_figures(page.name, page.read_text("utf-8"))]
    assert not typed, (
        "figures typed by hand; include them from benchmarks/results/ with {{ figure }}:\n"
        + "\n".join(typed)
    )
    for page, phrase, _ in NOT_MEASURED:
        assert phrase in (REPO / "docs" / "chapters" / page).read_text("utf-8"), (
            f"stale NOT_MEASURED entry: {page} no longer says {phrase!r}"
        )


def test_typed_figure_check_catches_figures_and_spares_products():
    text = "带宽 3.79 TB/s，快 1.52x，6/6 一致，用时 12 µs\n16 × 128 个元素，`[:, 1:]`\n```\n4.10 TB/s\n```"
    found = typed_figures("ch99.md", text)
    assert [hit.split(": ", 1)[1] for hit in found] == ["'3.79 TB/s'", "'1.52x'", "'6/6'", "'12 µs'"]
    figure = '{{ figure "benchmarks/results/x.txt" pattern="([0-9.]+) TB/s" }} TB/s'
    assert typed_figures("ch99.md", f"带宽 {figure}") == []


def changed_lines(before: Path, after: Path) -> dict[str, list[str]]:
    """Per text file of the tree `after`: the lines added or changed against the tree `before`."""
    changes = {}
    for file in sorted(after.rglob("*")):
        rel = file.relative_to(after).as_posix()
        if not file.is_file() or "__pycache__" in rel:
            continue
        try:
            rows = file.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        old_file = before / rel
        old = old_file.read_text(encoding="utf-8").splitlines() if old_file.is_file() else []
        matcher = difflib.SequenceMatcher(None, old, rows, autojunk=False)
        new = [rows[j] for op, _, _, j1, j2 in matcher.get_opcodes() if op != "equal"
               for j in range(j1, j2)]
        if new:
            changes[rel] = new
    return changes


@pytest.mark.parametrize(("previous", "chapter"), [(7, 8), (9, 10), (14, 15), (15, 16),
                                                   (16, 17), (17, 18), (18, 19)])
def test_page_shows_every_line_the_chapter_adds(tmp_path, previous, chapter):
    manifest = steps.load_manifest()
    before = steps.materialize(previous, tmp_path / "before", manifest)
    after = steps.materialize(chapter, tmp_path / "after", manifest)
    changes = changed_lines(before, after)
    assert any(path.endswith((".cu", ".cuh")) for path in changes) == (chapter == 19)
    page = manifest.chapter(chapter).docs
    rendered = hooks.expand((REPO / page).read_text("utf-8"), chapter, manifest, page)
    shown = Counter(row.strip() for row in rendered.split("\n"))
    missing = []
    for path, rows in changes.items():
        need = Counter(row.strip() for row in rows if row.strip())
        missing += [f"{path}: {row!r}" for row, count in need.items() if shown[row] < count]
    assert not missing, f"{page} does not show {len(missing)} changed lines:\n" + "\n".join(
        missing[:40]
    )


def test_index_links_written_chapters_and_marks_the_others():
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\|[^|]*\| (\d+) \|[^|]*\| ([^|]+) \|$", index, flags=re.M)
    assert [int(n) for n, _ in rows] == list(range(1, steps.LAST_PLANNED_CHAPTER + 1))
    for number, cell in rows:
        page = f"chapters/ch{int(number):02d}.md"
        if (REPO / "docs" / page).is_file():
            assert cell == f"[第 {number} 章]({page})"
        else:
            assert cell == "尚未写成", f"chapter {number} has no page but the index links it"
