"""What a chapter's tree derives by itself: the imports it cannot have yet, and their decorators.

Markers say which lines a chapter adds; some lines follow from the others and need none. Once the
markers are applied, in each `.py` file of the tree after chapter N:

1. A top-level import statement (not indented; on one line or a parenthesised block of lines)
   goes when everything it imports from the package is missing from that tree:
   - a module whose file is not in the tree yet (a later chapter adds it): `import minisgl.x`,
     `from minisgl.x import a`, `from .x import a`, `from . import x`;
   - a name that a module of the tree does not define yet: `from minisgl.x import a` where
     minisgl/x.py, as the tree holds it, binds no top-level `a` (no def, class, assignment or
     import of it). Where that cannot be told from the module's text (it has `import *` or a
     module-level `__getattr__`), the import stays.
   An import that stood between two blank lines takes the blank line after it along, so the
   tree is left with one blank line there, not two.
2. A decorator (`@name`, `@name(...)`, `@name.attr(...)`, on one line or several) whose name came
   only from an import that rule 1 removed goes too.

Nothing else is derived: an import of the standard library or of a third-party module, or of a
package module and name that the tree has, stays even where chapter N does not use it yet.

Two mistakes stop the build with file:line instead of writing a broken tree: an import that mixes
what the tree has with what it lacks (write it as two imports), and a line that still uses a name
rule 1 removed (that line belongs in a marker block of the chapter that adds the name).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath

from steps_markers import StepsError

DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class TreeModules:
    """The package's modules as one chapter's tree holds them (paths from the repository root)."""

    name: str  # the package, "minisgl"
    folder: str  # where it lives, "python/minisgl/"
    known: frozenset[str]  # every file of the package that some chapter adds
    present: frozenset[str]  # the package files of this tree
    names_in: Callable[[str], frozenset[str] | None]  # a present file's top-level names here

    def file_of(self, module: str) -> str | None:
        """The file of a module of the package that some chapter adds, else None."""
        if module != self.name and not module.startswith(self.name + "."):
            return None
        base = (self.folder + "/".join(module.split(".")[1:])).rstrip("/")
        for path in (base + ".py", base + "/__init__.py"):
            if path in self.known:
                return path
        return None

    def package_of(self, path: str) -> str | None:
        """The dotted package that holds the file `path` (what a relative import starts from)."""
        if not path.startswith(self.folder):
            return None
        return ".".join(PurePosixPath(self.name, path[len(self.folder) :]).parts[:-1])


def derive(text: str, path: str, modules: TreeModules, chapter: int) -> str:
    """The text of the file `path` in the tree after `chapter`: rules 1 and 2 applied."""
    tree = _parse(text) if path.endswith(".py") else None
    if tree is None:
        return text  # not Python this can read: the chapter's own run will say what is wrong
    dropped: list[ast.stmt] = []
    gone: dict[str, str] = {}  # a name that rule 1 removed -> why it is missing
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        items = _imported(node, path, modules, chapter)
        missing = [why for why in items if why]
        if not missing:
            continue
        if len(missing) < len(items):
            raise StepsError(
                f"{path}:{node.lineno}: this import mixes what the tree after chapter {chapter} "
                f"has with what it lacks ({'; '.join(missing)}): write it as two imports"
            )
        dropped.append(node)
        gone.update(dict.fromkeys(_bound_names(node), missing[0]))
    if not dropped:
        return text
    for node in tree.body:  # a name that the file binds again at the top level stays defined
        if node not in dropped:
            for name in _top_level_names(node):
                gone.pop(name, None)
    decorators = [d for node in ast.walk(tree) if isinstance(node, DEFS)
                  for d in node.decorator_list if _root_name(d) in gone]
    cut = {line for node in [*dropped, *decorators]
           for line in range(node.lineno, node.end_lineno + 1)}
    _refuse_leftover_uses(tree, gone, cut, path)
    lines = text.splitlines(keepends=True)
    for node in dropped:
        _take_blank_line_after(lines, cut, node.lineno, node.end_lineno)
    return "".join(line for number, line in enumerate(lines, start=1) if number not in cut)


def top_level_names(text: str) -> frozenset[str] | None:
    """The names a module's text binds at its top level; None where the text cannot tell (it
    does not parse, or has `from x import *` or a module-level __getattr__)."""
    tree = _parse(text)
    if tree is None:
        return None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        names |= _top_level_names(node)
    if "__getattr__" in names:
        return None
    names |= {name for node in ast.walk(tree) if isinstance(node, ast.Global)
              for name in node.names}
    return frozenset(names)


@lru_cache(maxsize=4096)
def _parse(text: str) -> ast.Module | None:
    """The syntax tree of a text (shared, never changed: a file's text is the same for many
    chapters, and the tree of each is worked out from it)."""
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _imported(node: ast.Import | ast.ImportFrom, path: str, modules: TreeModules,
              chapter: int) -> list[str]:
    """One entry per package module or name the statement imports: "" where the tree has it,
    else why not. Imports from outside the package give no entries."""
    def lacks(module: str) -> str:
        there = modules.file_of(module) in modules.present
        return "" if there else f"{module} is not in the tree after chapter {chapter}"

    if isinstance(node, ast.Import):
        return [lacks(a.name) for a in node.names if modules.file_of(a.name)]
    base = _absolute(node, path, modules)
    if base is None or not modules.file_of(base):
        return []
    if lacks(base):
        return [lacks(base)] * len(node.names)
    found = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if modules.file_of(submodule):
            found.append(lacks(submodule))
            continue
        names = None if alias.name == "*" else modules.names_in(modules.file_of(base))
        defined = names is None or alias.name in names
        found.append("" if defined else
                     f"{base} does not define {alias.name} yet in the tree after chapter {chapter}")
    return found


def _absolute(node: ast.ImportFrom, path: str, modules: TreeModules) -> str | None:
    """The dotted module a `from ... import` reads from (None: __future__, or out of reach)."""
    if node.module == "__future__":
        return None
    if not node.level:
        return node.module
    package = modules.package_of(path)
    if package is None:
        return None
    parts = package.split(".")
    if node.level > len(parts):
        return None
    parts = parts[: len(parts) - node.level + 1]
    return ".".join([*parts, node.module] if node.module else parts)


def _bound_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    return [a.asname or a.name for a in node.names if a.name != "*"]


def _top_level_names(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds (generously: a name stored anywhere inside it counts,
    which can only keep an import, never remove one)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return set(_bound_names(node))
    if isinstance(node, DEFS):
        return {node.name}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)} | {n.name for n in ast.walk(node)
                                                 if isinstance(n, DEFS)}


def _root_name(expr: ast.expr) -> str | None:
    """`traced` for @traced, @traced("op") and @traced.something(...)."""
    while isinstance(expr, (ast.Call, ast.Attribute)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _refuse_leftover_uses(tree: ast.Module, gone: dict[str, str], cut: set[int],
                          path: str) -> None:
    """A removed name that a kept line still reads, and that the file binds nowhere else, would
    be a NameError in the tree: name the line, which belongs to the chapter that adds it."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, DEFS):
            bound.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in cut:
            bound.update(_bound_names(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in gone and node.id not in bound \
                and node.lineno not in cut:
            raise StepsError(
                f"{path}:{node.lineno}: uses `{node.id}`, whose import goes from this tree "
                f"({gone[node.id]}): put this line in a marker block of the chapter that adds it"
            )


def _take_blank_line_after(lines: list[str], cut: set[int], first: int, last: int) -> None:
    """An import that stood between two blank lines takes the blank line after it along."""
    before = next((i for i in range(first - 1, 0, -1) if i not in cut), None)
    after = next((i for i in range(last + 1, len(lines) + 1) if i not in cut), None)
    if before is not None and after is not None and not lines[before - 1].strip() \
            and not lines[after - 1].strip():
        cut.add(after)
