"""How the CPU emulator rewrites a CUDA C++ source before g++ compiles it against tools/emu/.

Kernel launches (`k<<<grid, block, shared, stream>>>(args)`) become calls into the runtime,
`__shared__` declarations become per-block storage, and a few CUDA-only specifiers and
attributes are adjusted; the rest of the program stays as written. Only text is changed here:
tools/emu_runner.py stages, compiles and runs the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class RewriteError(Exception):
    """CUDA syntax the rewrite does not understand; carries a file:line prefix."""


# ---------------------------------------------------------------------------------------------
# Lexing: a copy of the source with comments and literals blanked out, so that the rewrites
# below never match inside them. Blanking keeps every offset and newline where it was.
# ---------------------------------------------------------------------------------------------
def _is_ident(c: str) -> bool:
    return c.isalnum() or c == "_"


def _is_digit_separator(src: str, i: int) -> bool:
    """A quote inside a number such as 1'000'000 (C++14) is not a character literal."""
    j = i
    while j > 0 and (_is_ident(src[j - 1]) or src[j - 1] in "'."):
        j -= 1
    return j < i and src[j].isdigit()


def _literal_end(src: str, i: int) -> int:
    """Index just past the string or character literal that starts with the quote at i."""
    quote, j = src[i], i + 1
    while j < len(src) and src[j] != quote and src[j] != "\n":
        j += 2 if src[j] == "\\" else 1
    return min(j + 1, len(src))


def _raw_string_end(src: str, i: int) -> int:
    """Index just past the raw string literal R"delim( ... )delim" whose quote is at i."""
    paren = src.find("(", i)
    if paren < 0:
        return len(src)
    end = src.find(")" + src[i + 1 : paren] + '"', paren)
    return len(src) if end < 0 else end + paren - i + 1


def blank_non_code(src: str) -> str:
    out = list(src)

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif (
            c == '"'
            and i > 0
            and src[i - 1] == "R"
            and (i < 2 or not _is_ident(src[i - 2]) or src[i - 2] in "8LuU")
        ):
            j = _raw_string_end(src, i)
        elif c == '"' or (c == "'" and not _is_digit_separator(src, i)):
            j = _literal_end(src, i)
        else:
            i += 1
            continue
        blank(i, j)
        i = j
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Small scanners over blanked code.
# ---------------------------------------------------------------------------------------------
_OPEN = {"(": ")", "[": "]", "{": "}"}


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _match_forward(code: str, i: int) -> int:
    """Index of the bracket closing the one at i (parentheses, brackets and braces)."""
    stack = []
    for j in range(i, len(code)):
        c = code[j]
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j
    return -1


def _skip_ws_back(code: str, i: int) -> int:
    while i > 0 and code[i - 1].isspace():
        i -= 1
    return i


def _skip_ws(code: str, i: int) -> int:
    while i < len(code) and code[i].isspace():
        i += 1
    return i


def _match_angle_back(code: str, close: int) -> int:
    """Index of the '<' opening the template argument list that ends with '>' at close."""
    depth = 0
    for j in range(close, -1, -1):
        c = code[j]
        if c in ">)]":
            depth += 1
        elif c in "<([":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _callee_start(code: str, end: int) -> int:
    """Start of the kernel expression before `<<<`: a possibly qualified name with template
    arguments, e.g. `ns::reduce<float, 256>`."""
    i = _skip_ws_back(code, end)
    while True:
        if i > 0 and code[i - 1] == ">":
            i = _match_angle_back(code, i - 1)
            if i < 0:
                return -1
            i = _skip_ws_back(code, i)
        j = i
        while j > 0 and _is_ident(code[j - 1]):
            j -= 1
        if j == i:
            return -1
        k = _skip_ws_back(code, j)
        if code[k - 2 : k] != "::":
            return j
        before = _skip_ws_back(code, k - 2)
        if before > 0 and (_is_ident(code[before - 1]) or code[before - 1] == ">"):
            i = before
            continue
        return k - 2


def _split_first_arg(code: str, start: int, end: int) -> int:
    """Offset of the first top-level comma in code[start:end], counting <> as brackets (the
    first argument of cudaFuncSetAttribute is a kernel name such as k<float, 128>)."""
    depth = 0
    for j in range(start, end):
        c = code[j]
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif c == "," and depth == 0:
            return j
    return -1


def canonical_name(text: str) -> str:
    """`k < float , 128 >` -> `k<float,128>`: the key under which function attributes and
    launches of one kernel meet, and the name the emulator prints."""
    t = re.sub(r"\s+", " ", text.strip())
    return re.sub(r"\s*([^\w\s])\s*", r"\1", t)


# ---------------------------------------------------------------------------------------------
# The rewrites. Each returns edits (start, end, replacement) against the original text; all
# replacements keep the number of newlines, so compiler messages point at the right lines.
# ---------------------------------------------------------------------------------------------
@dataclass(order=True)
class Edit:
    start: int
    end: int
    text: str = field(compare=False)


def _launch_edits(src: str, code: str, where: str) -> list[Edit]:
    edits, pos = [], 0
    while (i := code.find("<<<", pos)) >= 0:
        line = f"{where}:{_line_of(src, i)}"
        close_cfg = code.find(">>>", i + 3)
        paren = _skip_ws(code, close_cfg + 3) if close_cfg >= 0 else -1
        if paren < 0 or paren >= len(code) or code[paren] != "(":
            raise RewriteError(
                f"{line}: cannot parse the kernel launch (expected `k<<<...>>>(...)`)"
            )
        close = _match_forward(code, paren)
        start = _callee_start(code, i)
        if close < 0 or start < 0:
            raise RewriteError(
                f"{line}: cannot parse the kernel launch (expected `k<<<...>>>(...)`)"
            )
        callee = code[start:i].rstrip()
        config, args = src[i + 3 : close_cfg], src[paren + 1 : close]
        lam = f"[=](auto&&... emu_args_) {{ {callee}(emu_args_...); }}"
        rest = f", {args}" if args.strip() else args
        text = f'::emu::launch(::emu::launch_config({config}), "{canonical_name(callee)}", {lam}{rest})'
        edits.append(Edit(start, close + 1, text))
        pos = close + 1
    return edits


_EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\b([^;{}]*?)\[\s*\]\s*;")
_ALIGN_SPEC = re.compile(r"\b(?:__align__|alignas)\s*\([^()]*\)")


def _extern_shared_edits(src: str, code: str, where: str) -> list[Edit]:
    """`extern __shared__ T name[];` -> a reference to the launch's dynamic shared memory."""
    edits = []
    for m in _EXTERN_SHARED.finditer(code):
        decl = _ALIGN_SPEC.sub(" ", m.group(1)).strip()
        name = re.search(r"([A-Za-z_]\w*)\s*$", decl)
        type_ = decl[: name.start()].strip() if name else ""
        if not name or not type_:
            raise RewriteError(
                f"{where}:{_line_of(src, m.start())}: cannot parse `extern __shared__` declaration"
            )
        text = (
            f"static {type_}* const& {name.group(1)} = "
            f"reinterpret_cast<{type_}* const&>(::emu::g_dyn_smem);"
        )
        edits.append(Edit(m.start(), m.end(), text + "\n" * src.count("\n", m.start(), m.end())))
    return edits


_STATIC_SHARED = re.compile(r"(?:\bstatic\s+)?\b__shared__\b(?:\s+static\b)?")


def _static_shared_edits(code: str) -> list[Edit]:
    """`__shared__` -> `static`. Blocks run one at a time, so a function-local static is exactly
    one per-block variable shared by all threads of the running block (and reused by the next)."""
    return [
        Edit(m.start(), m.end(), "static" + "\n" * m.group(0).count("\n"))
        for m in _STATIC_SHARED.finditer(code)
    ]


def _noinline_edits(code: str) -> list[Edit]:
    """`__noinline__` -> the GNU attribute (a macro would break libstdc++'s own use of the name)."""
    return [
        Edit(m.start(), m.end(), "__attribute__((noinline))")
        for m in re.finditer(r"\b__noinline__\b", code)
    ]


_SPECIFIERS = {
    "static",
    "inline",
    "__inline__",
    "__device__",
    "__host__",
    "__global__",
    "constexpr",
    "extern",
    "__noinline__",
    "__forceinline__",
}


_WORD_BEFORE = re.compile(r"\b(\w+)\s*$")
_WORD_AFTER = re.compile(r"\s*(\w+)")


def _specifiers_around(code: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """Spans of the declaration specifiers (static, inline, __device__, ...) right before
    code[start:end] and right after it."""
    spans, pos = [], start
    while (t := _WORD_BEFORE.search(code, max(0, pos - 64), pos)) and t.group(1) in _SPECIFIERS:
        spans.append((t.start(1), t.end(1), t.group(1)))
        pos = t.start(1)
    pos = end
    while (t := _WORD_AFTER.match(code, pos)) and t.group(1) in _SPECIFIERS:
        spans.append((t.start(1), t.end(1), t.group(1)))
        pos = t.end(0)
    return spans


def _forceinline_edits(code: str) -> list[Edit]:
    """__forceinline__ expands to `inline`; blank any other `inline` next to it, since a repeated
    `inline` is an error in C++."""
    return [
        Edit(a, b, " " * (b - a))
        for m in re.finditer(r"\b__forceinline__\b", code)
        for a, b, word in _specifiers_around(code, m.start(), m.end())
        if word in ("inline", "__inline__")
    ]


_CAST = re.compile(
    r"\b(?:reinterpret_cast|static_cast|const_cast)\s*<[^;]*?>\s*(?=\()|\(\s*(?:const\s+)?void\s*\*\s*\)"
)


def _func_attribute_edits(src: str, code: str) -> list[Edit]:
    """cudaFuncSetAttribute(k, ...) -> ::emu::func_set_attribute_named("k", k, ...), so that the
    attribute can be matched with the kernel's launches by name."""
    edits = []
    for m in re.finditer(r"\bcudaFuncSetAttribute\s*\(", code):
        paren = m.end() - 1
        close = _match_forward(code, paren)
        comma = _split_first_arg(code, paren + 1, close) if close > 0 else -1
        if comma < 0:
            continue
        first = code[paren + 1 : comma]
        key = canonical_name(re.sub(r"[&()]", " ", _CAST.sub(" ", first)))
        edits.append(Edit(m.start(), paren + 1, f'::emu::func_set_attribute_named("{key}", '))
    return edits


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)


def apply_edits(src: str, edits: list[Edit]) -> str:
    out, pos = [], 0
    for e in sorted(edits):
        if e.start < pos:  # overlaps an earlier edit (e.g. `__shared__` inside an extern decl)
            continue
        out += [src[pos : e.start], e.text]
        pos = e.end
    out.append(src[pos:])
    return "".join(out)


def rewrite_source(src: str, where: str, include_edit=None) -> str:
    """Rewrites one file. `include_edit(quote, name)` returns a replacement for an #include
    target (e.g. the staged copy of a local header) or None to keep it."""
    code = blank_non_code(src)
    edits = _launch_edits(src, code, where) + _extern_shared_edits(src, code, where)
    edits += _static_shared_edits(code) + _forceinline_edits(code) + _noinline_edits(code)
    edits += _func_attribute_edits(src, code)
    if include_edit is not None:
        for m in _INCLUDE.finditer(src):
            if code[m.start() : m.end()].strip().startswith("#"):  # not inside a comment
                new = include_edit(m.group(1), m.group(2))
                if new is not None:
                    edits.append(Edit(m.start(1), m.end(), f'"{new}"'))
    return apply_edits(src, edits)
