"""tools/steps.py on small synthetic repositories: markers, counts, the tree, and check's isolation."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
STEPS = REPO / "tools" / "steps.py"


def _load_steps():
    spec = importlib.util.spec_from_file_location("minisgl_steps", STEPS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


steps = _load_steps()


# Marker lines are built from pieces so that this file never contains a marker line itself.
def opens(tag: str) -> str:
    return "# " + ">>> " + tag


def closes(tag: str) -> str:
    return "# " + "<<< " + tag


def src(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def make_repo(root: Path, chapters: list[dict], files: dict[str, str]) -> Path:
    """Write files and a manifest; each chapter dict gives number, files and optionally more."""
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    lines = []
    for ch in chapters:
        n = ch["number"]
        entry = {
            "number": n,
            "slug": f"s{n}",
            "stage": "一 · 测试",
            "title": f"第{n}章",
            "main": ch.get("main", f"examples/ch{n:02d}.py"),
            "tests": ch.get("tests", []),
            "docs": f"docs/chapters/ch{n:02d}.md",
            "files": ch.get("files", []),
        }
        for key in ("early", "rewrites"):
            if key in ch:
                entry[key] = ch[key]
        lines.append("[[chapter]]")
        lines += [
            f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in entry.items()
        ]
        lines.append("")
    (root / "tools").mkdir(exist_ok=True)
    (root / "tools" / "chapters.toml").write_text("\n".join(lines), encoding="utf-8")
    for ch in chapters:
        main = root / ch.get("main", f"examples/ch{ch['number']:02d}.py")
        if not main.exists():
            main.parent.mkdir(parents=True, exist_ok=True)
            main.write_text("print('ok')\n", encoding="utf-8")
    return root


PKG = "python/minisgl/"


def two_chapter_repo(tmp_path: Path) -> Path:
    files = {
        PKG + "__init__.py": src(
            "VERSION = 1",
            opens("ch02"),
            "NEW_IN_TWO = True",
            closes("ch02"),
            opens("before ch02"),
            "# OLD = True",
            closes("before ch02"),
        ),
        PKG + "utils/__init__.py": "",
        PKG + "utils/misc.py": "X = 1\n",
        PKG + "layers/__init__.py": "",
        PKG + "layers/norm.py": "Y = 2\n",
        PKG + "core.py": "Z = 3\n",
        PKG + "__main__.py": "",
    }
    chapters = [
        {
            "number": 1,
            "files": [PKG + "__init__.py", PKG + "utils/__init__.py", PKG + "utils/misc.py"],
        },
        {
            "number": 2,
            "files": [PKG + "layers/__init__.py", PKG + "layers/norm.py", PKG + "__main__.py"],
            "early": [PKG + "core.py"],
        },
    ]
    return make_repo(tmp_path, chapters, files)


def test_from_and_before_blocks(tmp_path):
    manifest = steps.load_manifest(two_chapter_repo(tmp_path))
    one = steps.file_at_chapter(PKG + "__init__.py", 1, manifest)
    two = steps.file_at_chapter(PKG + "__init__.py", 2, manifest)
    assert one == "VERSION = 1\nOLD = True\n"
    assert two == "VERSION = 1\nNEW_IN_TWO = True\n"


def rewrite_repo(tmp_path: Path) -> Path:
    """Chapter 1 adds main.py, chapter 3 replaces it whole; each version has its own markers."""
    main, older = PKG + "main.py", "tools/chapters/before-ch03/" + PKG + "main.py"
    files = {
        PKG + "__init__.py": "",
        main: src("NEW = 3", opens("ch04"), "FOUR = 4", closes("ch04")),
        older: src(
            "OLD = 1",
            opens("ch02"),
            "TWO = 2",
            closes("ch02"),
            opens("before ch02"),
            "# ONE = 1",
            closes("before ch02"),
        ),
    }
    chapters = [
        {"number": 1, "files": [PKG + "__init__.py", main]},
        {"number": 2},
        {"number": 3, "rewrites": [main]},
        {"number": 4},
    ]
    return make_repo(tmp_path, chapters, files)


def test_a_rewritten_file_is_its_older_version_before_the_rewrite(tmp_path):
    manifest = steps.load_manifest(rewrite_repo(tmp_path / "repo"))
    texts = [steps.file_at_chapter(PKG + "main.py", n, manifest) for n in (1, 2, 3, 4)]
    assert texts == ["OLD = 1\nONE = 1\n", "OLD = 1\nTWO = 2\n", "NEW = 3\n",
                     "NEW = 3\nFOUR = 4\n"]
    dest = steps.materialize(2, tmp_path / "out", manifest)
    assert (dest / PKG / "main.py").read_text() == "OLD = 1\nTWO = 2\n"
    marks = [steps.status(manifest, PKG + "main.py", n) for n in (1, 2, 3, 4)]
    assert marks == [steps.NEW, steps.MODIFIED, steps.MODIFIED, steps.MODIFIED]
    assert "main.py  ← 本章修改" in steps.tree_text(3, manifest)
    assert not [p for p in steps.validate(manifest) if p.error]


def test_rewrite_problems(tmp_path):
    root = rewrite_repo(tmp_path)
    older = root / "tools/chapters/before-ch03" / PKG / "main.py"
    older.write_text(src("OLD = 1", opens("ch03"), "X = 3", closes("ch03")))
    problems = {p.message: p for p in steps.validate(steps.load_manifest(root))}
    stale = (f"tools/chapters/before-ch03/{PKG}main.py: marker for chapter 3, but this version "
             f"of {PKG}main.py is in force in chapters 1 to 2, so the marker changes nothing")
    assert not problems[stale].error
    older.unlink()
    problems = {p.message: p for p in steps.validate(steps.load_manifest(root))}
    missing = (f"chapter 3 rewrites {PKG}main.py, but its older version "
               f"tools/chapters/before-ch03/{PKG}main.py does not exist")
    assert problems[missing].error
    manifest = (root / "tools" / "chapters.toml").read_text()
    manifest = manifest.replace(f'rewrites = ["{PKG}main.py"]', f'rewrites = ["{PKG}nope.py"]')
    (root / "tools" / "chapters.toml").write_text(manifest)
    problems = {p.message: p for p in steps.validate(steps.load_manifest(root))}
    assert problems[f"chapter 3 rewrites {PKG}nope.py, which no earlier chapter adds"].error


def test_before_blocks_must_be_commented_out_so_the_final_engine_skips_them():
    text = src("x = 1", opens("before ch02"), "x = 0", closes("before ch02"))
    with pytest.raises(steps.StepsError, match="commented out") as error:
        steps.parse_markers(text, "m.py")
    assert str(error.value).startswith("m.py:3:")


def test_file_of_a_later_chapter_does_not_exist_yet(tmp_path):
    manifest = steps.load_manifest(two_chapter_repo(tmp_path))
    with pytest.raises(steps.StepsError, match="added in chapter 2"):
        steps.file_at_chapter(PKG + "layers/norm.py", 1, manifest)


def test_comment_styles_and_chapter_number_forms():
    text = src("a", "  // " + ">>> ch5", "b", "  //" + "<<< ch05", "c")
    lines = steps.parse_markers(text, "k.cu")
    assert steps.render(lines, 4) == "a\nc\n"
    assert steps.render(lines, 5) == "a\nb\nc\n"


@pytest.mark.parametrize(
    ("lines", "where", "what"),
    [
        (
            ["x", opens("ch02"), "y", opens("ch03"), closes("ch03"), closes("ch02")],
            "m.py:4",
            "nest",
        ),
        (["x", opens("ch02"), "y"], "m.py:2", "never closed"),
        (["x", closes("ch02")], "m.py:2", "no block is open"),
        ([opens("ch02"), closes("before ch02")], "m.py:2", "does not match"),
        (["# " + ">>> ch02 starts here"], "m.py:1", "malformed"),
    ],
)
def test_bad_markers_name_file_and_line(lines, where, what):
    with pytest.raises(steps.StepsError, match=what) as error:
        steps.parse_markers(src(*lines), "m.py")
    assert str(error.value).startswith(where + ":")


def test_ordinary_comments_are_not_markers():
    text = src("# >>> import torch", ">>> ch02", "# see chapter 2", "x = '# >>> ch02'")
    assert steps.render(steps.parse_markers(text, "m.py"), 1) == text


def test_bad_markers_stop_materialize_with_file_and_line(tmp_path):
    files = {PKG + "__init__.py": src("x", opens("ch02"), "y")}
    root = make_repo(tmp_path / "repo", [{"number": 1, "files": [PKG + "__init__.py"]}], files)
    with pytest.raises(steps.StepsError, match=r"python/minisgl/__init__.py:2"):
        steps.materialize(1, tmp_path / "out", steps.load_manifest(root))


def test_header_counts_new_modified_early(tmp_path):
    manifest = steps.load_manifest(two_chapter_repo(tmp_path))
    assert (
        steps.header_line(manifest, 1) == "到这一章为止的文件：3 个（新建 3，修改 0，提前引入 0）"
    )
    assert (
        steps.header_line(manifest, 2) == "到这一章为止的文件：7 个（新建 3，修改 1，提前引入 1）"
    )


def test_tree_marks_and_collapses(tmp_path):
    text = steps.tree_text(2, steps.load_manifest(two_chapter_repo(tmp_path)))
    assert text == (
        "到这一章为止的文件：7 个（新建 3，修改 1，提前引入 1）\n"
        "\n"
        "minisgl/\n"
        "├── __init__.py  ← 本章修改\n"
        "├── core.py  ← 提前引入\n"
        "├── __main__.py  ← 本章新建\n"
        "├── layers/\n"
        "│   ├── __init__.py  ← 本章新建\n"
        "│   └── norm.py  ← 本章新建\n"
        "└── utils/  （2 个文件，不变）\n"
    )


def test_tree_command_line(tmp_path, capsys):
    root = two_chapter_repo(tmp_path)
    assert steps.main(["--root", str(root), "tree", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("到这一章为止的文件：3 个（新建 3，修改 0，提前引入 0）\n")
    assert "└── utils/\n    ├── __init__.py  ← 本章新建\n    └── misc.py  ← 本章新建\n" in out


def test_list_counts_and_exercises(tmp_path, capsys):
    root = two_chapter_repo(tmp_path)
    for folder, chapter in (("201-norm", 2), ("202-core", 2), ("1901-kernel", 19)):
        (root / "practice" / "exercises" / folder).mkdir(parents=True)
        (root / "practice" / "exercises" / folder / "meta.toml").write_text(f"chapter = {chapter}\n")
    (root / "docs" / "chapters").mkdir(parents=True)
    (root / "docs" / "chapters" / "ch01.md").write_text("# 1\n", encoding="utf-8")
    assert steps.main(["--root", str(root), "list"]) == 0
    header, one, two = capsys.readouterr().out.splitlines()[:3]
    assert header.split() == steps.LIST_COLUMNS
    assert one.split() == "ch01 3 0 0 3 yes 0/0 yes 0 第1章".split()
    assert two.split() == "ch02 3 1 1 7 yes 0/0 no 2 第2章".split()
    assert header.index("title") == one.index("第1章") == two.index("第2章")  # columns line up


def test_list_tolerates_no_practice_folder(tmp_path):
    assert steps.exercises(tmp_path, 1) == []


def test_validation(tmp_path):
    files = {
        PKG + "__init__.py": src(
            opens("ch07"), "a", closes("ch07"), opens("ch99"), "b", closes("ch99")
        ),
        PKG + "stray.py": "",
    }
    chapters = [
        {"number": 1, "files": [PKG + "__init__.py", PKG + "gone.py"]},
        {"number": 2, "files": [PKG + "__init__.py"]},
    ]
    manifest = steps.load_manifest(make_repo(tmp_path, chapters, files))
    problems = {p.message: p for p in steps.validate(manifest)}
    assert problems["python/minisgl/__init__.py is listed twice (chapters 1 and 2)"].error
    assert problems["chapter 1: python/minisgl/gone.py does not exist"].missing
    assert not problems["python/minisgl/__init__.py: marker for unknown chapter 99"].error
    assert not problems["python/minisgl/stray.py is in no chapter of the manifest"].error
    assert not any("chapter 7" in message for message in problems)  # a planned later chapter
    with pytest.raises(steps.StepsError, match="listed twice"):
        steps.materialize(1, tmp_path / "out", manifest)


def test_materialize_layout(tmp_path):
    root = two_chapter_repo(tmp_path / "repo")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(
        src("A = 1", opens("ch02"), "B = 2", closes("ch02"))
    )
    (root / "tools" / "helper.py").write_text(src("keep", opens("ch02"), closes("ch02")))
    dest = steps.materialize(1, tmp_path / "out", steps.load_manifest(root))
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == [
        "examples/ch01.py",
        "pyproject.toml",
        "python/minisgl/__init__.py",
        "python/minisgl/utils/__init__.py",
        "python/minisgl/utils/misc.py",
        "tests/conftest.py",
        "tools/chapters.toml",
        "tools/helper.py",
    ]
    assert (dest / "tests/conftest.py").read_text() == "A = 1\n"
    assert (dest / "tools/helper.py").read_text() == (root / "tools/helper.py").read_text()


# ---------------------------------------------------------------------------------------------
# what a tree derives without markers: imports of what it lacks, and their decorators


def derive_repo(tmp_path: Path, core: str, util: str = "A = 1\n") -> Path:
    """Chapter 1 adds core.py and util.py; chapter 2 adds the trace package and later.py."""
    files = {
        PKG + "__init__.py": "",
        PKG + "core.py": core,
        PKG + "util.py": util,
        PKG + "later.py": "VALUE = 2\n",
        PKG + "trace/__init__.py": "",
        PKG + "trace/runtime.py": src("def traced(op):", "    return lambda fn: fn"),
    }
    chapters = [
        {"number": 1, "files": [PKG + "__init__.py", PKG + "core.py", PKG + "util.py"]},
        {"number": 2, "files": [PKG + "later.py", PKG + "trace/__init__.py",
                                PKG + "trace/runtime.py"]},
    ]
    return make_repo(tmp_path, chapters, files)


def test_imports_of_a_later_module_and_their_decorators_need_no_marker(tmp_path):
    core = src(
        "import os",
        "",
        "import minisgl.later",
        "",
        "from minisgl.trace.runtime import (",
        "    traced,",
        ")",
        "from . import later as again",
        "from .util import A",
        "",
        "",
        "@traced(",
        '    "f",',
        ")",
        "def f():",
        "    return os.sep, A",
        "",
        "",
        "class K:",
        '    @traced("g")',
        "    @staticmethod",
        "    def g():",
        "        return 1",
        opens("ch02"),
        "",
        "    def h(self):",
        "        return minisgl.later.VALUE + again.VALUE",
        closes("ch02"),
    )
    manifest = steps.load_manifest(derive_repo(tmp_path / "repo", core))
    one = steps.file_at_chapter(PKG + "core.py", 1, manifest)
    assert one == src(
        "import os",
        "",
        "from .util import A",
        "",
        "",
        "def f():",
        "    return os.sep, A",
        "",
        "",
        "class K:",
        "    @staticmethod",
        "    def g():",
        "        return 1",
    )
    final = (manifest.root / PKG / "core.py").read_text()
    assert steps.file_at_chapter(PKG + "core.py", 2, manifest) == steps.apply_markers(
        steps.parse_markers(final, "core.py"), 2)  # everything is there from chapter 2 on
    tree = steps.materialize(1, tmp_path / "tree", manifest)
    assert (tree / PKG / "core.py").read_text() == one
    # the file changes in chapter 2 by its marker block, and by the imports that come back
    assert steps.status(manifest, PKG + "core.py", 2) == steps.MODIFIED


def test_a_name_that_a_module_of_the_tree_does_not_define_yet_is_not_imported(tmp_path):
    util = src("A = 1", opens("ch02"), "", "", "def helper():", "    return 2", closes("ch02"))
    core = src(
        "from minisgl.util import A",
        "from minisgl.util import helper",
        "",
        "X = A",
        opens("ch02"),
        "Y = helper()",
        closes("ch02"),
    )
    manifest = steps.load_manifest(derive_repo(tmp_path / "repo", core, util))
    assert steps.file_at_chapter(PKG + "core.py", 1, manifest) == src(
        "from minisgl.util import A", "", "X = A")
    assert steps.file_at_chapter(PKG + "core.py", 2, manifest) == src(
        "from minisgl.util import A", "from minisgl.util import helper", "", "X = A",
        "Y = helper()")


def test_only_a_blank_line_left_doubled_goes_with_an_import(tmp_path):
    core = src(
        "import os",
        "from minisgl.later import VALUE",  # no blank line before it: nothing else goes
        "",
        "from minisgl.trace.runtime import traced",  # between blank lines: one of them goes
        "",
        "X = os",
        opens("ch02"),
        "Y = traced(VALUE)",
        closes("ch02"),
    )
    manifest = steps.load_manifest(derive_repo(tmp_path / "repo", core))
    assert steps.file_at_chapter(PKG + "core.py", 1, manifest) == src("import os", "", "X = os")


@pytest.mark.parametrize(
    ("core", "message"),
    [
        (src("from minisgl.util import A, helper", "X = A"),
         r"core.py:1: this import mixes .*minisgl.util does not define helper yet"),
        (src("import minisgl.util, minisgl.later", "X = minisgl.util.A"),
         r"core.py:1: this import mixes .*minisgl.later is not in the tree after chapter 1"),
        (src("from minisgl.trace.runtime import traced", "", "f = traced('op')"),
         r"core.py:3: uses `traced`, whose import goes from this tree"),
    ],
)
def test_what_cannot_be_derived_stops_the_build_with_file_and_line(tmp_path, core, message):
    manifest = steps.load_manifest(derive_repo(tmp_path / "repo", core))
    with pytest.raises(steps.StepsError, match=message):
        steps.materialize(1, tmp_path / "tree", manifest)


def test_a_before_block_in_the_source_tree_is_a_warning(tmp_path):
    manifest = steps.load_manifest(two_chapter_repo(tmp_path))
    warnings = [p.message for p in steps.validate(manifest) if not p.error]
    assert warnings == [
        f"{PKG}__init__.py:5: a `before ch02` block leaves older code, commented out, in the "
        f"source tree: keep that version whole at tools/chapters/before-ch02/{PKG}__init__.py "
        f"and list {PKG}__init__.py under chapter 2's `rewrites`"
    ]


# ---------------------------------------------------------------------------------------------
# check: a chapter sees nothing from later chapters, nor the installed package


def run_steps(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(STEPS), *args], capture_output=True, text=True, timeout=300
    )


def isolation_repo(tmp_path: Path) -> Path:
    files = {
        PKG + "__init__.py": "",
        PKG + "later.py": "VALUE = 2\n",
        "tests/test_ch01.py": src(
            "import minisgl.later",
            "",
            "def test_later():",
            "    assert minisgl.later.VALUE == 2",
        ),
        "tests/test_ch02.py": src(
            "import os",
            "import minisgl.later",
            "",
            "def test_from_tree():",
            "    assert minisgl.later.__file__.startswith(os.getcwd())",
        ),
        "examples/ch02.py": src("import minisgl.later", "print('value', minisgl.later.VALUE)"),
    }
    chapters = [
        {"number": 1, "files": [PKG + "__init__.py"], "tests": ["tests/test_ch01.py"]},
        {"number": 2, "files": [PKG + "later.py"], "tests": ["tests/test_ch02.py"]},
    ]
    return make_repo(tmp_path, chapters, files)


def test_check_hides_later_chapters(tmp_path):
    root = isolation_repo(tmp_path)
    failed = run_steps("--root", str(root), "check", "1")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "== ch01" in failed.stdout and "FAIL" in failed.stdout
    assert "minisgl.later" in failed.stdout  # the tail of the failing output is shown
    passed = run_steps("--root", str(root), "check", "2")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1/1 chapters passed" in passed.stdout


def test_check_shows_progress_and_estimates_from_the_last_run(tmp_path):
    root = isolation_repo(tmp_path)
    env = {**os.environ, "MINISGL_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, str(STEPS), "--root", str(root), "check", "2"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "== ch02 " in first.stdout and "[1/1 · 0s so far (2 steps never timed here before)]" \
        in first.stdout
    assert "   | " in first.stdout  # pytest's own output, shown as it runs
    timings = json.loads((tmp_path / "cache" / "steps" / "timings.json").read_text())
    assert set(timings[str(root.resolve())]) == {"ch02 main", "ch02 tests"}
    second = subprocess.run([*command, "--rerun"], capture_output=True, text=True, timeout=300,
                            env=env)  # --rerun: not proven by the first run's record
    assert second.returncode == 0, second.stdout + second.stderr
    assert re.search(r"== ch02 .*\[1/1 · \d+s so far, about \d+s left \(from the last run",
                     second.stdout), second.stdout
    assert re.search(r"main +examples/ch02.py \(took [\d.]+s last time\) \.\.\. ok", second.stdout)


def test_timings_survive_a_broken_file_and_drop_vanished_repositories(tmp_path, monkeypatch):
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "cache"))
    path = steps.timings_path()
    path.parent.mkdir(parents=True)
    bad_values = json.dumps({str(tmp_path): {"a": "slow", "b": -1, "c": True}})
    for broken in ("not json", "[1, 2]", '{"/x": 3}', bad_values):
        path.write_text(broken)
        assert steps.load_timings(tmp_path) == {}
    path.write_text(json.dumps({str(tmp_path / "gone"): {"ch01 main": 1.0}}))
    steps.save_timing(tmp_path, "ch01 main", 2.04)
    assert json.loads(path.read_text()) == {str(tmp_path): {"ch01 main": 2.0}}
    progress = steps.Progress(tmp_path, ["ch01 main", "ch01 tests"], {"ch01 tests": 125.0})
    assert progress.line().endswith("about 2m05s left (1 step never timed here before)")


def test_check_names_the_setup_command_when_a_module_is_missing(tmp_path, monkeypatch, capsys):
    root = isolation_repo(tmp_path)
    monkeypatch.setattr(steps, "NEEDS", {"pytest": 1, "no_such_module_for_minisgl": 2})
    assert steps.missing_modules([1]) == []  # needed from chapter 2 on
    assert steps.missing_modules([1, 2]) == ["no_such_module_for_minisgl"]
    assert steps.main(["--root", str(root), "check", "2"]) == 2
    err = capsys.readouterr().err
    assert "no_such_module_for_minisgl" in err and "python tools/setup_env.py" in err
    assert len(err.strip().splitlines()) == 1


def test_check_hides_the_installed_package(tmp_path):
    # Chapter 1 has no minisgl at all, so `import minisgl` may only succeed by leaking the
    # repository's editable install into the chapter tree.
    files = {
        "python/other/__init__.py": "",
        "tests/test_ch01.py": src("def test_import():", "    import minisgl  # noqa: F401"),
    }
    chapters = [
        {"number": 1, "files": ["python/other/__init__.py"], "tests": ["tests/test_ch01.py"]}
    ]
    root = make_repo(tmp_path, chapters, files)
    result = run_steps("--root", str(root), "check", "--keep")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No module named 'minisgl'" in result.stdout
    assert "trees kept in " in result.stdout


def test_guard_refuses_minisgl_from_outside_the_tree(tmp_path):
    # Even when the real package stays on sys.path, the child refuses to import it.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(steps.SITECUSTOMIZE, encoding="utf-8")
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO / "python"), str(site)]),
        MINISGL_STEPS_TREE=str(tmp_path),
        MINISGL_STEPS_HIDE="",
    )
    result = subprocess.run(
        [sys.executable, "-c", "import minisgl"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "steps.py isolation" in result.stderr


# ---------------------------------------------------------------------------------------------
# check --record-proven: tests that passed on code the final tree holds unchanged


def proven_repo(tmp_path: Path) -> Path:
    """moving.py changes in chapter 5 and later.py arrives then; stable.py never changes."""
    files = {
        PKG + "__init__.py": "",
        PKG + "stable.py": src("X = 1", opens("ch01"), "Y = 2", closes("ch01")),
        PKG + "moving.py": src(
            opens("ch05"), "VALUE = 5", closes("ch05"),
            opens("before ch05"), "# VALUE = 1", closes("before ch05"),
        ),
        PKG + "later.py": "",
        "tests/test_ch01.py": src(
            "import minisgl.stable", "", "def test_stable():", "    assert minisgl.stable.Y == 2"
        ),
        "tests/test_ch02.py": src(
            "import minisgl.moving", "", "def test_moving():", "    assert minisgl.moving.VALUE == 1"
        ),
        # the import happens only in a child that ends by os._exit, so no atexit hook runs
        "tests/test_ch03.py": src(
            "import subprocess",
            "import sys",
            "",
            "def test_moving_in_a_child():",
            "    code = 'import os, minisgl.moving; os._exit(minisgl.moving.VALUE - 1)'",
            "    subprocess.run([sys.executable, '-c', code], check=True)",
        ),
        "tests/test_ch04.py": src(
            "import importlib.util",
            "",
            "def test_no_later_yet():",
            "    assert importlib.util.find_spec('minisgl.later') is None",
        ),
        "tests/test_ch05.py": src(
            "import minisgl.moving", "", "def test_fails():", "    assert minisgl.moving.VALUE == 6"
        ),
    }
    first = [PKG + "__init__.py", PKG + "stable.py", PKG + "moving.py"]
    chapters = [
        {"number": 1, "files": first, "tests": ["tests/test_ch01.py"]},
        {"number": 2, "tests": ["tests/test_ch02.py"]},
        {"number": 3, "tests": ["tests/test_ch03.py"]},
        {"number": 4, "tests": ["tests/test_ch04.py"]},
        {"number": 5, "files": [PKG + "later.py"], "tests": ["tests/test_ch05.py"]},
    ]
    return make_repo(tmp_path, chapters, files)


@pytest.fixture(scope="module")
def proven_check(tmp_path_factory) -> tuple[subprocess.CompletedProcess, list[str]]:
    """One check of the five chapters (a pytest run each): its output and the proven list."""
    tmp_path = tmp_path_factory.mktemp("proven")
    root = proven_repo(tmp_path / "repo")
    listed = tmp_path / "proven.txt"
    result = run_steps("--root", str(root), "check", "--record-proven", str(listed))
    return result, listed.read_text().splitlines()


def test_tests_on_unchanged_files_are_proven(proven_check):
    # stable.py has a marker, but for chapter 1 itself: the code is the final one
    result, proven = proven_check
    assert proven == ["tests/test_ch01.py"], result.stdout
    assert "test files proven on final code: 1; re-run by pytest because their code changed " \
           "later: 3" in result.stdout


def test_tests_on_a_file_changed_later_run_again(proven_check):
    result, _ = proven_check
    assert f"re-run tests/test_ch02.py: {PKG}moving.py changed" in result.stdout


def test_a_child_processes_imports_count(proven_check):
    result, _ = proven_check
    assert f"re-run tests/test_ch03.py: {PKG}moving.py changed" in result.stdout


def test_a_module_missing_then_present_later_counts(proven_check):
    result, _ = proven_check
    assert f"re-run tests/test_ch04.py: {PKG}later.py changed" in result.stdout


def test_a_failing_chapter_records_nothing(proven_check):
    # chapter 5's tests use only final code, but they fail
    result, proven = proven_check
    assert result.returncode == 1 and "4/5 chapters passed; failed: ch05" in result.stdout
    assert "tests/test_ch05.py" not in proven and "test_ch05" not in result.stdout.split(
        "chapters passed")[1]


def test_used_files_add_headers_and_drop_folders(tmp_path):
    # a.cu is read from Python; nvcc reads b.cuh unseen, so every C/CUDA file of the tree counts
    files = {
        PKG + "k/a.cu": '#include "b.cuh"\n',
        PKG + "k/b.cuh": src("int x;", "// " + ">>> ch02", "int y;", "// " + "<<< ch02"),
        "tests/test_ch01.py": "",
    }
    chapters = [
        {"number": 1, "files": [PKG + "k/a.cu", PKG + "k/b.cuh"], "tests": ["tests/test_ch01.py"]},
        {"number": 2},
    ]
    manifest = steps.load_manifest(make_repo(tmp_path / "repo", chapters, files))
    tree = steps.materialize(1, tmp_path / "tree", manifest)
    record = tmp_path / "record.txt"
    # "python" is a folder (shutil.rmtree's names land so); nowhere.txt is absent from both trees
    record.write_text(f"{PKG}k/a.cu\npython\nnowhere.txt\n")
    used = steps.used_files(manifest.chapter(1), tree, record, manifest.root)
    assert {PKG + "k/a.cu", PKG + "k/b.cuh", "nowhere.txt", "tests/test_ch01.py"} <= set(used)
    assert "python" not in used
    changed = [path for path in used if not steps.same_as_final(manifest, tree, path)]
    assert changed == [PKG + "k/b.cuh"]


# ---------------------------------------------------------------------------------------------
# the record of passing runs (tools/steps_proof.py): an unchanged chapter is proven, not run


def _by_record(stdout: str) -> list[str]:
    """The chapters that a check skipped because the record proves them."""
    found = re.search(r"proven by the record of an earlier passing run, not run: \d+(?: \((.*)\))?",
                      stdout)
    assert found, stdout
    return found.group(1).split(", ") if found.group(1) else []


@pytest.mark.slow
def test_the_record_skips_unchanged_chapters_and_reruns_changed_ones(tmp_path):
    root = proven_repo(tmp_path / "repo")
    first = run_steps("--root", str(root), "check")
    assert first.returncode == 1 and _by_record(first.stdout) == [], first.stdout  # ch05 fails
    record = json.loads((root / "tools/chapters/proven.json").read_text())
    assert sorted(record["runs"]) == ["ch01", "ch02", "ch03", "ch04"]  # none for the failing one

    again = run_steps("--root", str(root), "check")
    assert _by_record(again.stdout) == ["ch01", "ch02", "ch03", "ch04"], again.stdout
    assert "== ch05" in again.stdout and "ch05 tests" not in again.stdout  # it still runs, fails
    assert "4/5 chapters passed; failed: ch05" in again.stdout
    # what the skipped chapters' tests read still decides whether they are proven on final code
    assert "re-run tests/test_ch02.py" in again.stdout

    # a file that chapter 1's test reads changes: only chapter 1 runs again
    stable = root / PKG / "stable.py"
    stable.write_text(stable.read_text() + "Z = 3\n")
    changed = run_steps("--root", str(root), "check", "1", "2", "3", "4")
    assert _by_record(changed.stdout) == ["ch02", "ch03", "ch04"], changed.stdout
    assert f"record {PKG}stable.py changed: runs" in changed.stdout

    # variant: a new file in a package folder the runs listed reruns every chapter that listed it
    (root / PKG / "extra.py").write_text("")
    manifest = (root / "tools/chapters.toml").read_text()
    (root / "tools/chapters.toml").write_text(
        manifest.replace(f'"{PKG}moving.py"]', f'"{PKG}moving.py", "{PKG}extra.py"]'))
    listed = run_steps("--root", str(root), "check", "1", "2")
    assert _by_record(listed.stdout) == [], listed.stdout
    assert f"record {PKG.rstrip('/')}/ (its list of files) changed: runs" in listed.stdout


@pytest.mark.slow
def test_the_record_is_void_in_another_environment_or_with_rerun(tmp_path):
    root = isolation_repo(tmp_path / "repo")
    assert run_steps("--root", str(root), "check", "2").returncode == 0
    assert _by_record(run_steps("--root", str(root), "check", "2").stdout) == ["ch02"]
    rerun = run_steps("--root", str(root), "check", "2", "--rerun")
    assert _by_record(rerun.stdout) == [] and "tests  ok" in rerun.stdout
    assert "record --rerun asks for every run: runs" in rerun.stdout
    path = root / "tools/chapters/proven.json"
    record = json.loads(path.read_text())
    # the packages the run loaded are kept with their versions; one installed but never loaded
    # (ruff: the test extra brings it, nothing imports it) is not, so a machine without it agrees
    packages = record["runs"]["ch02"]["packages"]
    assert packages["pytest"] == importlib.metadata.version("pytest"), packages
    assert "ruff" not in packages and "minisgl" not in packages, packages
    # a loaded package at another version: the chapter runs again, and says which
    record["runs"]["ch02"]["packages"]["pytest"] = "0.0.1"
    path.write_text(json.dumps(record))
    older = run_steps("--root", str(root), "check", "2")
    assert (f"record package pytest is {importlib.metadata.version('pytest')} here, was 0.0.1: "
            "runs") in older.stdout, older.stdout
    assert _by_record(run_steps("--root", str(root), "check", "2").stdout) == ["ch02"]
    record = json.loads(path.read_text())
    record["environment"]["python"] = "2.7.18"  # as if written where Python 2.7.18 ran
    record["runs"]["ch02"]["env"] = "0" * 64
    path.write_text(json.dumps(record))
    other = run_steps("--root", str(root), "check", "2")
    assert "record the environment differs (python): runs" in other.stdout, other.stdout
    path.write_text("{not json")
    broken = run_steps("--root", str(root), "check", "2")
    assert broken.returncode == 0 and "unreadable, every chapter runs" in broken.stdout


FINAL_TESTS = REPO / "tools" / "final_tests.py"


def run_final(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(FINAL_TESTS), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_final_tests_prove_unchanged_files_by_record_and_rerun_changed_ones(tmp_path):
    root = make_repo(tmp_path / "repo", [{"number": 1, "files": [PKG + "__init__.py"]}], {
        PKG + "__init__.py": "",
        PKG + "a.py": "VALUE = 1\n",
        "tests/test_a.py": src("import minisgl.a", "", "def test_a():",
                               "    assert minisgl.a.VALUE == 1"),
        "tests/test_b.py": src("def test_b():", "    assert True"),
        "tests/test_c.py": src("import subprocess, sys", "", "def test_c():",
                               "    subprocess.run([sys.executable, '-I', 'tools/helper.py'],",
                               "                   check=True)"),
        "tools/helper.py": "print('hi')\n",
        "tools/neighbour.py": "X = 1\n",
    })
    first = run_final(root)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "3/3 test files passed" in first.stdout and "proven by record, not run: 0" in first.stdout
    again = run_final(root)
    assert "proven by record, not run: 3" in again.stdout, again.stdout

    (root / PKG / "a.py").write_text("VALUE = 2\n")  # test_a reads it: runs again, and fails
    changed = run_final(root)
    assert changed.returncode == 1 and "FAILED tests/test_a.py" in changed.stdout
    assert f"tests/test_a.py: {PKG}a.py changed: runs" in changed.stdout
    assert "proven by record, not run: 2" in changed.stdout
    # a failed file loses its record: back to the passing code, it still runs
    (root / PKG / "a.py").write_text("VALUE = 1\n")
    assert "tests/test_a.py: no passing run recorded: runs" in run_final(root).stdout

    # variant: a program started with `python -I` (no hook of ours runs in it): every file of
    # its script's folder counts as read
    (root / "tools" / "neighbour.py").write_text("X = 2\n")
    neighbour = run_final(root, "tests/test_c.py")
    assert "tests/test_c.py: tools/neighbour.py changed: runs" in neighbour.stdout, \
        neighbour.stdout
    (tmp_path / "proven.txt").write_text("tests/test_b.py\n")
    skipped = run_final(root, "--rerun", "--skip", str(tmp_path / "proven.txt"))
    assert "test_b.py" not in skipped.stdout.split("passed on the final tree")[0]
    assert "2/2 test files passed" in skipped.stdout and "by the chapter checks: 1" in skipped.stdout


def test_chapters_side_by_side_show_each_chapter_whole_and_record_every_one(tmp_path):
    """--jobs 2: three chapters whose tests print while they run, two at a time; each chapter's
    lines stay together, a failing chapter is named, and the passing ones are recorded."""
    files = {PKG + "__init__.py": ""}
    chapters = []
    for n in (1, 2, 3):
        files[f"examples/ch0{n}.py"] = src(f"print('main of {n}')")
        files[f"tests/test_ch0{n}.py"] = src(
            "import time",
            "",
            *(f"def test_{i}():\n    time.sleep(0.2)\n    assert {n} != 3" for i in range(3)),
        )
        chapters.append({"number": n, "files": [PKG + "__init__.py"] if n == 1 else [],
                         "tests": [f"tests/test_ch0{n}.py"]})
    root = make_repo(tmp_path / "repo", chapters, files)
    env = {**os.environ, "MINISGL_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, str(STEPS), "--root", str(root), "check", "-j", "2"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 chapters, 2 at a time" in result.stdout
    assert "2/3 chapters passed; failed: ch03" in result.stdout
    blocks = result.stdout.split("== ch0")[1:]
    assert sorted(block[0] for block in blocks) == ["1", "2", "3"]
    for block in blocks:  # each block holds its own chapter's lines and nobody else's
        n = block[0]
        body = block.split("chapters passed")[0]
        assert f"test_ch0{n}.py" in body
        assert all(f"test_ch0{m}.py" not in body for m in "123" if m != n), body
    runs = json.loads((root / "tools" / "chapters" / "proven.json").read_text())["runs"]
    assert set(runs) == {"ch01", "ch02"}
