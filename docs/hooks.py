"""mkdocs hook: expand the chapter directives in the pages' markdown.

Block directives stand alone on their line; their indentation is kept, so they also work inside
an admonition or a folded answer:

    {{ tree }}                                     header line and package tree at the page's chapter
    {{ listing "python/minisgl/layers/norm.py" }}  the whole file as it stands at the page's chapter
    {{ listing "PATH" lines="10-40" }}             only lines 10 to 40 (1-based, both included)
    {{ listing "PATH" pattern="def forward" }}     from the first line containing the text to the end
                                                   of its block (decorators / `template` line above
                                                   it included); the block ends before the next
                                                   line indented no deeper that is not a closing
                                                   bracket
    {{ listing "PATH" match="^time " }}            only the lines that the regular expression finds
                                                   (for excerpts of a benchmarks/results/ file)
    {{ listing "PATH" chapter="3" }}               the file as it stood at another chapter
    {{ chapter_code }}                             every file the chapter adds or changes, each in a
                                                   folded admonition, as it stands at the chapter;
                                                   in a changed file the changed lines are marked

The inline directive may stand anywhere in a line of prose, as often as needed:

    {{ figure "benchmarks/results/h200_gpu_kernels.txt" pattern="store_kv .ours.* ([0-9.]+) TB/s" }}

It becomes the text that the pattern's first group (the whole match if it has none) captures in
the one line of the results file where the regular expression matches; no line, or more than
one, is an error. Figures measured on real hardware are quoted this way, never typed, so a page
always says what the results file says (tests/test_docs.py refuses typed figures). The pattern
must not contain `}}`.

The page's chapter is its front matter `chapter: N`, else the chapter whose manifest entry names the
page as `docs`, else the N of a file name chNN.md. Files come from `tools/steps.py`, markers applied.
Fenced code blocks are left alone. Outside them, any other `{{` is an error, and so is a missing
file or a pattern that matches nothing: `mkdocs build --strict` fails instead of printing nonsense.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import shlex
import sys
from dataclasses import dataclass
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
INLINE = re.compile(r"\{\{(.*?)\}\}")
RESULTS = "benchmarks/results/"
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
            try:
                line = expand_inline(line, manifest)
                directive = DIRECTIVE.match(line)
                if directive:
                    text = run_directive(directive[2], chapter, manifest)
                elif "{{" in line:
                    raise DirectiveError("a block directive must stand alone on its line")
            except (DirectiveError, steps.StepsError) as e:
                raise DirectiveError(f"{where}:{number}: {e}") from e
            if directive:
                indent = directive[1]
                out += [indent + row if row else "" for row in text.split("\n")]
            else:
                out.append(line)
        else:
            out.append(line)
    return "\n".join(out)


def expand_inline(line: str, manifest) -> str:
    """Replace the inline directives ({{ figure ... }}) of one line; leave the others."""

    def replace(match: re.Match) -> str:
        name, positional, options = parse_directive(match[1])
        if name != "figure":
            return match[0]
        if len(positional) != 1:
            raise DirectiveError('figure takes one results file: {{ figure "PATH" pattern="..." }}')
        return figure(positional[0], manifest, **options)

    return INLINE.sub(replace, line)


def parse_directive(body: str) -> tuple[str, list[str], dict[str, str]]:
    words = shlex.split(body)
    if not words:
        raise DirectiveError("empty directive {{ }}")
    positional, options = [], {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if eq:
            options[key] = value
        else:
            positional.append(word)
    return words[0], positional, options


def run_directive(body: str, chapter: int | None, manifest) -> str:
    name, positional, options = parse_directive(body)
    if name == "tree" and not positional and not options:
        return fenced(steps.tree_text(need_chapter(chapter), manifest).rstrip("\n"), "text")
    if name == "listing" and len(positional) == 1:
        return listing(positional[0], chapter, manifest, **options)
    if name == "chapter_code" and not positional and not options:
        return chapter_code(need_chapter(chapter), manifest)
    raise DirectiveError(f"unknown directive {{{{{body}}}}}")


def need_chapter(chapter: int | None) -> int:
    if chapter is None:
        raise DirectiveError("this page has no chapter (add `chapter: N` to its front matter)")
    return chapter


def listing(path: str, page_chapter: int | None, manifest, **options: str) -> str:
    unknown = set(options) - {"lines", "pattern", "match", "chapter"}
    if unknown:
        raise DirectiveError(f"unknown listing option(s): {', '.join(sorted(unknown))}")
    if len({"lines", "pattern", "match"} & set(options)) > 1:
        raise DirectiveError("give one of lines=, pattern= and match=")
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
    if "match" in options:
        found = [row for row in rows if re.search(options["match"], row)]
        if not found:
            raise DirectiveError(f'match="{options["match"]}" finds no line in {path}')
        title += "（摘录）"
        return title + "\n\n" + fenced("\n".join(found), "text")
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


def figure(path: str, manifest, **options: str) -> str:
    """The figure that `pattern` captures in the one line of a results file where it matches."""
    if set(options) != {"pattern"}:
        raise DirectiveError('figure takes exactly one option, pattern="REGEX"')
    if not path.startswith(RESULTS):
        raise DirectiveError(f"figures come from {RESULTS}, not from {path}")
    file = manifest.root / path
    if not file.is_file():
        raise DirectiveError(f"{path} does not exist")
    try:
        pattern = re.compile(options["pattern"])
    except re.error as e:
        raise DirectiveError(f'pattern="{options["pattern"]}" is not a regular expression: {e}') from e
    rows = file.read_text(encoding="utf-8").splitlines()
    found = [m for m in map(pattern.search, rows) if m]
    if len(found) != 1:
        count = "no line" if not found else f"{len(found)} lines"
        raise DirectiveError(f'pattern="{pattern.pattern}" matches {count} of {path}, not one')
    return found[0][1] if pattern.groups else found[0][0]


# --------------------------------------------------------------------------------------------
# The chapter's complete code


@dataclass(frozen=True)
class Change:
    path: str
    new: bool  # added by the chapter (else changed)
    text: str  # the file as it stands at the chapter
    changed: list[int]  # 1-based lines added or changed since the previous chapter


def chapter_changes(n: int, manifest) -> list[Change]:
    """Every text file that chapter n adds, or changes against the previous chapter's tree."""
    earlier = [ch.number for ch in manifest.chapters if ch.number < n]
    before = earlier[-1] if earlier else None
    had = set(steps.files_at(manifest, before)) if before is not None else set()
    support = [
        file.relative_to(manifest.root).as_posix()
        for item in steps.SUPPORT
        if item != "tools"  # copied as they are, whatever the chapter
        for file in sorted([manifest.root / item, *(manifest.root / item).rglob("*")])
        if file.is_file() and "__pycache__" not in file.parts
    ]
    changes = []
    for path in [*steps.files_at(manifest, n), *support]:
        if not (manifest.root / path).is_file():
            raise DirectiveError(f"{path} does not exist")
        if not steps.is_text(manifest.root / path):
            continue
        text = steps.render(manifest.parsed(path), n)
        if path in had or (path in support and before is not None):
            old = steps.render(manifest.parsed(path), before).splitlines()
            rows = text.splitlines()
            opcodes = difflib.SequenceMatcher(None, old, rows, autojunk=False).get_opcodes()
            changed = [j + 1 for op, _, _, j1, j2 in opcodes if op != "equal" for j in range(j1, j2)]
            if changed:
                changes.append(Change(path, False, text, changed))
        elif path not in support:
            changes.append(Change(path, True, text, list(range(1, len(text.splitlines()) + 1))))
    return changes


def chapter_code(n: int, manifest) -> str:
    blocks = []
    for change in chapter_changes(n, manifest):
        shown = change.path.removeprefix("python/")
        language = LANGUAGES.get(Path(change.path).suffix, "text")
        body = change.text.rstrip("\n")
        if change.new:
            title, attributes = f"`{shown}`（本章新建）", ' linenums="1"'
        else:
            title = f"`{shown}`（本章修改，改动的行已高亮）"
            attributes = f' linenums="1" hl_lines="{spans(change.changed)}"'
        code = fenced(body, language, attributes)
        blocks.append(f'??? note "{title}"\n' + "\n".join(
            "    " + row if row else "" for row in code.split("\n")
        ))
    if not blocks:
        raise DirectiveError(f"chapter {n} adds and changes no file")
    return "\n\n".join(blocks)


def spans(numbers: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5 9" (the hl_lines syntax)."""
    out, start = [], None
    for i, number in enumerate(numbers):
        if start is None:
            start = number
        if i + 1 == len(numbers) or numbers[i + 1] != number + 1:
            out.append(str(start) if start == number else f"{start}-{number}")
            start = None
    return " ".join(out)


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
