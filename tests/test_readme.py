"""The README's claims against the code: which chapters exist, and which request fields the
server refuses.

A statement like "chapters 1-14 exist today; 15-23 are planned" is true the day it is written
and goes stale silently. These tests read the README as a learner does and compare what it says
with `python tools/steps.py list` (the chapter manifest) and with the server's own request
parsing (`minisgl.server.protocol.parse_body`, what every endpoint runs on a body).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# --------------------------------------------------------------------------------------------
# Chapters


def existing_chapters() -> set[int]:
    """Chapters that `steps.py list` shows with a main, every test file and a docs page."""
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "steps.py"), "list"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    found = set()
    for line in out.splitlines():
        cols = line.split()
        if len(cols) < 8 or not re.fullmatch(r"ch\d\d", cols[0]):
            continue
        main, tests, docs = cols[5], cols[6], cols[7]
        have, want = (int(x) for x in tests.split("/"))
        if main == "yes" and docs == "yes" and want > 0 and have == want:
            found.add(int(cols[0][2:]))
    return found


def table_chapters(text: str) -> set[int]:
    """The chapter numbers in the README's `| stage | chapters |` table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if re.fullmatch(r"\|\s*stage\s*\|\s*chapters\s*\|", line.strip()))
    numbers: set[int] = set()
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = line.strip().strip("|").split("|")
        numbers |= {int(n) for n in re.findall(r"(?<![\w.])(\d{2})(?![\w.])", cells[-1])}
    return numbers


# Words that say a chapter is not written yet, and phrases that claim to list what is written.
PLANNED = re.compile(r"\b(planned|upcoming|coming soon|not (?:yet )?written|to be written|"
                     r"not yet|todo|to do|future)\b", re.IGNORECASE)
EXHAUSTIVE = re.compile(r"\bexists? (?:today|so far|now|already)\b|\bare (?:written|done)\b",
                        re.IGNORECASE)
NUMBERS = re.compile(r"(\d+)\s*(?:-|–|—|\.\.|to)\s*(\d+)|(\d+)")


@dataclass
class ChapterClaim:
    numbers: set[int]
    planned: bool  # False: an exhaustive "these exist" claim
    text: str


def chapter_claims(text: str) -> list[ChapterClaim]:
    """Every clause of a sentence about chapters that calls some planned, or claims to list
    those that exist. Sentences are joined across line breaks, clauses split at ';' and ','."""
    flat = re.sub(r"\s+", " ", re.sub(r"```.*?```", " ", text, flags=re.DOTALL))
    claims = []
    for sentence in re.split(r"(?<=[.!?])\s", flat):
        if not re.search(r"\bchapters?\b", sentence, re.IGNORECASE):
            continue
        for clause in re.split(r"[;,]", sentence):
            planned = PLANNED.search(clause) is not None
            if not planned and EXHAUSTIVE.search(clause) is None:
                continue
            numbers: set[int] = set()
            for lo, hi, one in NUMBERS.findall(clause):
                numbers |= set(range(int(lo), int(hi) + 1)) if lo else {int(one)}
            if numbers:
                claims.append(ChapterClaim(numbers, planned, clause.strip()))
    return claims


def chapter_problems(text: str, existing: set[int]) -> list[str]:
    problems = []
    missing = existing - table_chapters(text)
    if missing:
        problems.append(f"the chapter table leaves out chapters {sorted(missing)}")
    flat = re.sub(r"\s+", " ", text)
    for count in re.findall(r"\b[Aa]ll (\d+) chapters\b", flat):
        if int(count) != len(existing):
            problems.append(f"says all {count} chapters, but {len(existing)} exist")
    for claim in chapter_claims(text):
        if claim.planned and claim.numbers & existing:
            problems.append(f"calls chapters {sorted(claim.numbers & existing)} planned, but "
                            f"they exist: {claim.text!r}")
        if not claim.planned and claim.numbers != existing & set(range(1, 100)):
            problems.append(f"lists {sorted(claim.numbers)} as the chapters that exist, but "
                            f"these do: {sorted(existing)}: {claim.text!r}")
    return problems


@pytest.fixture(scope="module")
def existing() -> set[int]:
    found = existing_chapters()
    assert found, "steps.py list shows no chapter"
    return found


def test_readme_names_every_chapter_and_calls_none_planned(existing):
    text = README.read_text(encoding="utf-8")
    assert chapter_problems(text, existing) == []


STALE = ("Chapters 1-14 and 19 exist today; 15-18 and 20-23 are planned. Each chapter ships "
         "its main.")


@pytest.mark.parametrize("sentence", [
    STALE,  # the statement the README carried when all 23 chapters existed
    "Chapter 20 (Triton attention) is still planned.",
    "The chapters\nwritten so far: 1–22 exist today, the last one comes later.",
    "Chapters 21 to 23 are not written yet.",
    "All 22 chapters exist.",
])
def test_a_stale_chapter_statement_is_caught(existing, sentence):
    text = README.read_text(encoding="utf-8") + "\n" + sentence + "\n"
    assert chapter_problems(text, existing), sentence


def test_a_chapter_left_out_of_the_table_is_caught(existing):
    text = README.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if "17 tensor parallel" in line)
    cut = text.replace(row, row.replace("17 tensor parallel · ", ""))
    assert cut != text
    assert any("leaves out chapters [17]" in p for p in chapter_problems(cut, existing))


# --------------------------------------------------------------------------------------------
# Request fields the README calls unsupported

protocol = pytest.importorskip("minisgl.server.protocol")

# Minimal valid bodies per endpoint, and where a field goes in each (generate: its sampling
# parameters are one level down).
BODIES = {
    "chat": (protocol.ChatCompletionRequest, {"messages": [{"role": "user", "content": "x"}]}),
    "completions": (protocol.CompletionRequest, {"prompt": "x"}),
    "generate": (protocol.GenerateRequest, {"text": "x"}),
}
# Values that ask for something other than a default, one per JSON type.
NON_DEFAULTS = [True, 2, 0.5, "x", [1], {"42": 1.0}]


def unsupported_claims(text: str) -> list[str]:
    """The code spans of each README sentence that says the server lacks a field or feature."""
    flat = re.sub(r"\s+", " ", text)
    spans = []
    for sentence in re.split(r"(?<=[.!?])\s", flat):
        if re.search(r"does not (?:support|have)|not supported|unsupported", sentence):
            spans += re.findall(r"`([^`]+)`", sentence)
    return spans


def _targets(name: str) -> list[tuple[str, str]]:
    """(endpoint, field path) of every endpoint whose body knows the field; every endpoint's
    top level when none does (then any value is a field the server does not support)."""
    known = []
    for endpoint, (cls, _) in BODIES.items():
        if name in cls.model_fields:
            known.append((endpoint, name))
        elif endpoint == "generate" and name in protocol.GenerateSamplingParams.model_fields:
            known.append((endpoint, "sampling_params." + name))
    return known or [(endpoint, name) for endpoint in BODIES]


def _refused(endpoint: str, path: str, value: object) -> bool:
    """Whether the server answers this body with its 400 for an unsupported field."""
    cls, base = BODIES[endpoint]
    body = json.loads(json.dumps(base))
    *outer, last = path.split(".")
    where = body
    for part in outer:
        where = where.setdefault(part, {})
    where[last] = value
    try:
        protocol.parse_body(cls, json.dumps(body).encode())
    except protocol.ApiError as e:
        error = e.body["error"]
        return e.status == 400 and error["code"] == "unsupported_parameter" \
            and error["param"] == path
    return False


def refused_everywhere(span: str) -> bool:
    """A README code span (`logit_bias`, `n > 1`, `"echo": true`) names a field that every
    endpoint knowing it refuses with a 400 for an unsupported field."""
    if m := re.fullmatch(r'"?(\w+)"?\s*:\s*(.+)', span):
        name, values = m.group(1), [json.loads(m.group(2))]
    elif m := re.fullmatch(r"(\w+)\s*(>|!=)\s*(\d+)", span):
        name, values = m.group(1), [int(m.group(3)) + 1]
    elif m := re.fullmatch(r"(\w+)", span):
        name, values = m.group(1), NON_DEFAULTS
    else:
        raise AssertionError(f"cannot read the README's unsupported feature {span!r}")
    return all(any(_refused(endpoint, path, v) for v in values)
               for endpoint, path in _targets(name))


def test_readme_names_unsupported_features():
    assert unsupported_claims(README.read_text(encoding="utf-8")), \
        "no sentence names what the server refuses: this test reads nothing"


def test_every_feature_the_readme_calls_unsupported_gets_a_400():
    spans = unsupported_claims(README.read_text(encoding="utf-8"))
    supported = [span for span in spans if not refused_everywhere(span)]
    assert supported == [], f"the README calls these unsupported, but the server takes them: " \
                            f"{supported}"


@pytest.mark.parametrize("span", [
    "logprobs",  # what the README named when logprobs had been served for a while
    "n > 1",
    '"top_logprobs": 2',
    "presence_penalty",
])
def test_a_supported_feature_called_unsupported_is_caught(span):
    assert not refused_everywhere(span)


@pytest.mark.parametrize("span", ["logit_bias", "echo", '"store": true', "no_such_field"])
def test_unsupported_features_are_recognised(span):
    assert refused_everywhere(span)


# --------------------------------------------------------------------------------------------
# The docs say what the server does with a field it does not know: a 400, never "ignored"

UNKNOWN_FIELD = re.compile(r"(不认识|未知|不支持)的字段")
IGNORED = re.compile(r"忽略|丢掉|丢弃|不管")


def unknown_field_statements(text: str) -> list[str]:
    """Sentences (split at 。；; and line ends) that say unknown fields are ignored; a sentence
    that also says 400 (or that quietly dropping them is wrong, 悄悄) is a correct one."""
    bad = []
    for sentence in re.split(r"[。；;\n]", text):
        for m in UNKNOWN_FIELD.finditer(sentence):
            rest = sentence[m.end():]
            if IGNORED.search(rest) and "400" not in rest and "悄悄" not in sentence:
                bad.append(sentence.strip())
    return bad


def test_docs_never_say_unknown_fields_are_ignored():
    bad = {str(page.relative_to(ROOT)): unknown_field_statements(page.read_text("utf-8"))
           for page in sorted((ROOT / "docs").rglob("*.md"))}
    assert {page: found for page, found in bad.items() if found} == {}


@pytest.mark.parametrize("sentence", [
    # the self-test answer of chapter 14 as it was
    "错误是 400，`param` 指出是哪个字段。不认识的字段则被忽略——客户端常常带着许多可选字段。",
    "合法的聊天请求体按 OpenAI 的默认值解析（分段的 `content` 拼起来，不认识的字段被忽略）",
    "服务把未知的字段直接丢掉，不报错。",
])
def test_a_page_saying_unknown_fields_are_ignored_is_caught(sentence):
    assert unknown_field_statements(sentence)


# --------------------------------------------------------------------------------------------
# The online benchmark's `--dataset sharegpt` is synthetic: the docs say so (its --help too,
# tests/test_ch14_serving.py)


def test_the_serving_appendix_says_sharegpt_reads_no_data():
    page = (ROOT / "docs" / "appendix" / "serving.md").read_text(encoding="utf-8")
    line = next(line for line in page.splitlines() if "`--dataset sharegpt`" in line)
    assert "不下载、也不读取任何 ShareGPT 数据" in line and "随机 token" in line
