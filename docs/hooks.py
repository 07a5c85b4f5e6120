"""mkdocs hook: expand the chapter directives in the pages' markdown.

A directive stands alone on its line; its indentation is kept, so it also works inside an
admonition or a folded answer:

    {{ tree }}                                     header line and package tree at the page's chapter
    {{ listing "python/minisgl/layers/norm.py" }}  the whole file as it stands at the page's chapter
    {{ listing "PATH" lines="10-40" }}             only lines 10 to 40 (1-based, both included)
    {{ listing "PATH" pattern="def forward" }}     from the first line containing the text to the end
                                                   of its block (decorators / `template` line above
                                                   it included); the block ends before the next
                                                   line indented no deeper that is not a closing
                                                   bracket
    {{ listing "PATH" chapter="3" }}               the file as it stood at another chapter

The page's chapter is its front matter `chapter: N`, else the chapter whose manifest entry names the
page as `docs`, else the N of a file name chNN.md. Files come from `tools/steps.py`, markers applied.
Fenced code blocks are left alone. Outside them, any other `{{` is an error, and so is a missing
file or a pattern that matches nothing: `mkdocs build --strict` fails instead of printing nonsense.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_steps():
    spec = importlib.util.spec_from_file_location("minisgl_steps", ROOT / "tools" / "steps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


steps = _load_steps()

DIRECTIVE = re.compile(r"^(\s*)\{\{(.*)\}\}\s*$")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
LANGUAGES = {
    ".py": "python",
    ".cu": "cuda",
    ".cuh": "cuda",
    ".cpp": "cpp",
    ".cc": "cpp",
    ".h": "cpp",
    ".hpp": "cpp",
    ".toml": "toml",
    ".md": "markdown",
    ".sh": "bash",
    ".json": "json",
    ".yml": "yaml",
    ".yaml": "yaml",
    ".html": "html",
    ".js": "javascript",
}


class DirectiveError(Exception):
    pass


def expand(markdown: str, chapter: int | None, manifest, where: str = "page") -> str:
    """Replace every directive in markdown; `chapter` is the page's chapter (None: unknown)."""
    out, fence = [], None
    for number, line in enumerate(markdown.split("\n"), start=1):
        opening = FENCE.match(line)
        if fence:
            if opening and opening[1][0] == fence[0] and len(opening[1]) >= len(fence):
                if line.strip() == opening[1]:
                    fence = None
            out.append(line)
        elif opening:
            fence = opening[1]
            out.append(line)
        elif "{{" in line:
            directive = DIRECTIVE.match(line)
            if not directive:
                raise DirectiveError(f"{where}:{number}: a directive must stand alone on its line")
            try:
                text = run_directive(directive[2], chapter, manifest)
            except (DirectiveError, steps.StepsError) as e:
                raise DirectiveError(f"{where}:{number}: {e}") from e
            indent = directive[1]
            out += [indent + row if row else "" for row in text.split("\n")]
        else:
            out.append(line)
    return "\n".join(out)


def run_directive(body: str, chapter: int | None, manifest) -> str:
    words = shlex.split(body)
    if not words:
        raise DirectiveError("empty directive {{ }}")
    name, positional, options = words[0], [], {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if eq:
            options[key] = value
        else:
            positional.append(word)
    if name == "tree" and not positional and not options:
        return fenced(steps.tree_text(need_chapter(chapter), manifest).rstrip("\n"), "text")
    if name == "listing" and len(positional) == 1:
        return listing(positional[0], chapter, manifest, **options)
    raise DirectiveError(f"unknown directive {{{{{body}}}}}")


def need_chapter(chapter: int | None) -> int:
    if chapter is None:
        raise DirectiveError("this page has no chapter (add `chapter: N` to its front matter)")
    return chapter


def listing(path: str, page_chapter: int | None, manifest, **options: str) -> str:
    unknown = set(options) - {"lines", "pattern", "chapter"}
    if unknown:
        raise DirectiveError(f"unknown listing option(s): {', '.join(sorted(unknown))}")
    if "lines" in options and "pattern" in options:
        raise DirectiveError("give lines= or pattern=, not both")
    chapter = page_chapter
    if "chapter" in options:
        if not options["chapter"].isdigit():
            raise DirectiveError(f'chapter="{options["chapter"]}" is not a chapter number')
        chapter = int(options["chapter"])
    text = steps.file_at_chapter(path, need_chapter(chapter), manifest)
    rows = text.rstrip("\n").split("\n")
    first, last = 1, len(rows)
    if "lines" in options:
        first, last = parse_lines(options["lines"], len(rows))
    elif "pattern" in options:
        first, last = find_block(rows, options["pattern"])
    shown = path.removeprefix("python/")
    title = f"**`{shown}`**"
    attributes = ""
    if (first, last) != (1, len(rows)):
        title += f"（第 {first}–{last} 行）"
        attributes = f' linenums="{first}"'
    language = LANGUAGES.get(Path(path).suffix, "text")
    return title + "\n\n" + fenced("\n".join(rows[first - 1 : last]), language, attributes)


def parse_lines(spec: str, count: int) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)-(\d+)", spec.strip())
    if not match:
        raise DirectiveError(f'lines="{spec}" is not of the form lines="A-B"')
    first, last = int(match[1]), int(match[2])
    if not 1 <= first <= last <= count:
        raise DirectiveError(f'lines="{spec}" is outside the file\'s {count} lines')
    return first, last


def find_block(rows: list[str], pattern: str) -> tuple[int, int]:
    """1-based first and last line of the block that starts at the first row containing pattern."""
    start = next((i for i, row in enumerate(rows) if pattern in row), None)
    if start is None:
        raise DirectiveError(f'pattern="{pattern}" matches no line')
    depth = _indent(rows[start])
    end = start + 1
    while end < len(rows):
        row = rows[end]
        if row.strip() and _indent(row) <= depth and not row.lstrip().startswith((")", "]", "}")):
            break
        end += 1
    while end > start + 1 and not rows[end - 1].strip():
        end -= 1
    while (
        start > 0
        and _indent(rows[start - 1]) == depth
        and rows[start - 1].lstrip().startswith(("@", "template"))
    ):
        start -= 1
    return start + 1, end


def _indent(row: str) -> int:
    return len(row) - len(row.lstrip())


def fenced(text: str, language: str, attributes: str = "") -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{language}{attributes}\n{text}\n{fence}"


# --------------------------------------------------------------------------------------------
# mkdocs glue

_manifest = None


def on_pre_build(config) -> None:
    global _manifest
    _manifest = steps.load_manifest(ROOT)  # once per build, so `mkdocs serve` sees edits


def on_page_markdown(markdown: str, page, config, files) -> str:
    from mkdocs.exceptions import PluginError

    try:
        return expand(markdown, page_chapter(page, _manifest), _manifest, page.file.src_uri)
    except (DirectiveError, steps.StepsError, ValueError) as e:
        raise PluginError(str(e)) from e


def page_chapter(page, manifest) -> int | None:
    if "chapter" in page.meta:
        return int(page.meta["chapter"])
    docs = Path(page.file.abs_src_path).resolve()
    for ch in manifest.chapters:
        if (manifest.root / ch.docs).resolve() == docs:
            return ch.number
    match = re.fullmatch(r"ch(\d+)\.md", Path(page.file.src_uri).name)
    return int(match[1]) if match else None
