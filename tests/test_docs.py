"""The mkdocs site builds in strict mode, and docs/hooks.py expands (or refuses) directives."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
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
    return subprocess.run(command, cwd=config.parent, capture_output=True, text=True, timeout=120)


def test_site_builds_strict(tmp_path):
    result = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "site" / "chapters" / "ch01" / "index.html").read_text(encoding="utf-8")
    assert "到这一章为止的文件" in page
    assert not (tmp_path / "site" / "hooks.py").exists()


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
