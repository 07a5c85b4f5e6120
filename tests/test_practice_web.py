"""The judge's web page, end to end in headless Chromium (Debian's chromium, driven by Playwright).

Needs `apt-get install -y chromium fonts-noto-cjk` and `pip install -r practice/requirements.txt`
(`python tools/setup_env.py --tests` does both). Set MINISGL_SKIP_BROWSER=1 to skip on a machine
without a browser. The page's screenshots go to $MINISGL_TEST_ARTIFACTS when it is set, else to
the test's temporary folder (pytest keeps the last three).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "practice"))

from judgekit import progress  # noqa: E402
from judgekit.exercises import find_exercise, list_exercises  # noqa: E402
from judgekit.web import make_server  # noqa: E402

CHROMIUM_ARGS = [
    "--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
# Everything is installed by the project's own commands (README): this one installs Playwright,
# Debian's chromium and the CJK fonts. Playwright's own advice, `playwright install`, downloads a
# browser of its own that this test never uses.
SETUP_TESTS = "python tools/setup_env.py --tests"

# Draws each text on a canvas in the page's own font and returns its width and pixels. Without a
# font that has the glyph, Chromium draws the same "tofu" box for every missing character.
GLYPHS_JS = """(texts) => {
  const font = getComputedStyle(document.body).font;
  const canvas = document.createElement("canvas");
  canvas.width = 64; canvas.height = 64;
  const ctx = canvas.getContext("2d", {willReadFrequently: true});
  return texts.map((text) => {
    ctx.clearRect(0, 0, 64, 64);
    ctx.font = font.replace(/\\d+px/, "40px");
    ctx.fillText(text, 4, 48);
    const pixels = ctx.getImageData(0, 0, 64, 64).data.filter((_, i) => i % 4 === 3);
    return {width: ctx.measureText(text).width, inked: pixels.filter((a) => a > 0).length,
            pixels: Array.from(pixels).join(",")};
  });
}"""


def _chromium() -> str:
    if os.environ.get("MINISGL_SKIP_BROWSER") == "1":
        pytest.skip("MINISGL_SKIP_BROWSER=1")
    path = os.environ.get("MINISGL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        pytest.fail(f"headless Chromium is missing: run `{SETUP_TESTS}` (as root it installs "
                    "Debian's chromium and fonts-noto-cjk), or set MINISGL_SKIP_BROWSER=1 to "
                    "skip this test")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail(f"Playwright for Python is missing: run `{SETUP_TESTS}`"
                    " (never `playwright install`: the test uses Debian's chromium)")
    return path


def launch_browser(p, profile: str, chromium: str | None):
    """Chromium through Playwright; a failure whose advice is Playwright's own installer
    (`playwright install`, `install-deps`, its missing bundled browser) names the project's
    set-up command instead."""
    from playwright.sync_api import Error

    try:
        return p.chromium.launch_persistent_context(
            profile, executable_path=chromium, args=CHROMIUM_ARGS, headless=True,
            viewport=VIEWPORT,
        )
    except Error as e:
        if _wants_playwright_installer(str(e)):
            pytest.fail(browser_setup_message(str(e)), pytrace=False)
        raise


def _wants_playwright_installer(message: str) -> bool:
    lowered = message.lower()
    return "playwright install" in lowered or "executable doesn't exist" in lowered


def browser_setup_message(message: str) -> str:
    """Playwright's first line (what went wrong), without its advice box, then ours."""
    first = message.strip().splitlines()[0] if message.strip() else "no message"
    return (f"the browser did not start ({first}): run `{SETUP_TESTS}`, which installs "
            "Debian's chromium and the fonts this test uses (do not run Playwright's own "
            "installer: the test never uses its browsers); MINISGL_CHROMIUM=PATH picks another "
            "chromium, MINISGL_SKIP_BROWSER=1 skips the test")


@pytest.fixture
def page_url(tmp_path, monkeypatch):
    monkeypatch.setenv("MINISGL_PRACTICE_WORKSPACE", str(tmp_path / "workspace"))
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "cache"))  # the progress database
    server = make_server(0, verbose=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    folder = Path(os.environ.get("MINISGL_TEST_ARTIFACTS") or tmp_path / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_page_renders_chinese_edits_judges_and_remembers(page_url, artifacts):
    chromium = _chromium()
    from playwright.sync_api import expect, sync_playwright

    ex = find_exercise(201)
    n = len(ex.load_cases())
    reference = ex.reference_path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="minisgl-chromium-") as profile, sync_playwright() as p:
        browser = launch_browser(p, profile, chromium)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            editor_value = "() => window.minisglEditor.getValue()"

            # The landing page: every chapter and exercise, each with its status.
            page.goto(page_url)
            expect(page.locator("body.ready")).to_have_count(1)
            expect(page.locator("#landing")).to_be_visible()
            for other in list_exercises():
                expect(page.locator(f"#exercise-list a[data-id='{other.id}']")).to_contain_text(
                    other.label)
            expect(page.locator("#exercise-list")).to_contain_text("第 2 章 网络层")
            link = page.locator("#exercise-list a[data-id='201']")
            expect(link.locator(".status")).to_have_text("未做")
            expect(page.locator("#overall")).to_have_text(f"已通过 0/{len(list_exercises())} 道")

            # Chinese is drawn with real glyphs: full-width, inked, different from each other and
            # from the box drawn for a character that no font has (U+10FFFD, private use).
            zhong, wen, tofu = page.evaluate(GLYPHS_JS, ["中", "文", "\U0010fffd"])
            assert zhong["width"] >= 0.9 * 40 and zhong["inked"] > 100, zhong["width"]
            assert zhong["pixels"] != wen["pixels"], "every Chinese character looks the same: tofu"
            assert zhong["pixels"] != tofu["pixels"], "Chinese renders as the missing-glyph box"
            title = page.locator("#exercise-list h2").first.bounding_box()
            assert title["height"] < 40  # one line: the glyphs are not replaced by wide boxes
            page.screenshot(path=str(artifacts / "judge_landing.png"), full_page=True)

            # One exercise: the statement beside the editor, both with room.
            link.click()
            expect(page.locator("#statement h1")).to_contain_text("RMSNorm")
            statement = page.locator("#statement").bounding_box()
            editor_box = page.locator("#editor .CodeMirror").bounding_box()
            assert statement["width"] >= 450 and editor_box["width"] >= 550
            assert editor_box["x"] >= statement["x"] + statement["width"] - 1  # side by side
            assert editor_box["x"] + editor_box["width"] <= VIEWPORT["width"]
            assert page.evaluate(editor_value) == ex.starter_code()
            lines = ex.starter_code().count("\n") + 1
            assert page.locator(".CodeMirror-linenumber").count() >= lines
            expect(page.locator(".CodeMirror .cm-keyword", has_text="def").first).to_be_visible()
            page.screenshot(path=str(artifacts / "judge_exercise.png"))

            # Typing: Enter after a colon indents by four spaces, Tab inserts four spaces; a long
            # line scrolls sideways instead of being cut off.
            page.locator("#editor .CodeMirror").click()
            page.keyboard.press("Control+A")
            page.keyboard.type("def f(x):")
            page.keyboard.press("Enter")
            page.keyboard.type("return x")
            assert page.evaluate(editor_value) == "def f(x):\n    return x"
            page.keyboard.press("Control+A")
            page.keyboard.press("Delete")
            page.keyboard.press("Tab")
            page.keyboard.insert_text("y = " + " + ".join(["long_name"] * 40))
            assert page.evaluate(editor_value).startswith("    y = long_name")
            scroll = page.locator("#editor .CodeMirror-scroll")
            assert scroll.evaluate("(el) => el.scrollWidth > el.clientWidth + 100")

            # Type the solution, submit, see AC; the submission is recorded.
            page.keyboard.press("Control+A")
            page.keyboard.insert_text(reference)
            assert page.evaluate(editor_value) == reference
            page.click("#run")
            expect(page.locator("#summary")).to_have_text(f"结果：{n}/{n} 通过", timeout=120_000)
            assert page.locator("#cases tbody .verdict").all_inner_texts() == ["AC"] * n
            expect(page.locator("#status")).to_have_text("全部通过 ✓")
            expect(page.locator("#submissions tbody tr")).to_have_count(1)
            assert progress.passed_ids() == {201}

            # The starter fails; the earlier, passing submission can be reopened.
            page.evaluate("(code) => window.minisglEditor.setValue(code)", ex.starter_code())
            page.click("#run")
            expect(page.locator("#summary")).to_have_text(f"结果：0/{n} 通过", timeout=120_000)
            assert set(page.locator("#cases tbody .verdict").all_inner_texts()) == {"RE"}
            expect(page.locator("#failure")).to_contain_text("NotImplementedError")
            rows = page.locator("#submissions tbody tr")
            expect(rows).to_have_count(2)
            expect(rows.nth(0)).to_contain_text(f"0/{n}")
            expect(rows.nth(1)).to_contain_text(f"{n}/{n}")
            rows.nth(1).locator("button").click()
            expect(page.locator("#status")).to_contain_text("已打开")
            assert page.evaluate(editor_value) == reference

            # Reload: the exercise is marked done from the database, the saved code comes back.
            page.goto(page_url)
            page.reload()
            expect(page.locator("body.ready")).to_have_count(1)
            link = page.locator("#exercise-list a[data-id='201']")
            expect(link.locator(".status")).to_have_text("✓ 已通过")
            expect(page.locator("#overall")).to_have_text(f"已通过 1/{len(list_exercises())} 道")
            link.click()
            expect(page.locator("#statement h1")).to_contain_text("RMSNorm")
            assert page.evaluate(editor_value) == ex.starter_code()  # the last code judged
            expect(page.locator("#submissions tbody tr")).to_have_count(2)

            # The old id of 1901 opens 1901, as CUDA with its keywords highlighted.
            page.goto(page_url + "#202")
            expect(page.locator("#statement h1")).to_contain_text("1901.")
            assert page.evaluate("() => location.hash") == "#1901"
            cuda = page.locator(".CodeMirror .cm-keyword", has_text="__global__")
            expect(cuda.first).to_be_visible()
            assert errors == []
        finally:
            browser.close()


# ---------------------------------------------------------------------------------------------
# Playwright's "run playwright install" advice is replaced by the project's command.


def _no_installer_advice(failure: pytest.fail.Exception) -> str:
    text = str(failure)
    assert SETUP_TESTS in text, text
    assert "playwright install" not in text.lower() and "║" not in text, text
    return text


def test_playwrights_missing_browser_names_the_project_command(tmp_path, monkeypatch):
    """The real thing: Playwright's bundled browser is absent (an empty browsers folder), and
    Playwright answers with its boxed "run playwright install"."""
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / "no-browsers"))
    with sync_playwright() as p, pytest.raises(pytest.fail.Exception) as failed:
        launch_browser(p, str(tmp_path / "profile"), None)
    assert "Executable doesn't exist" in _no_installer_advice(failed.value)


class _Chromium:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def launch_persistent_context(self, *args, **kwargs):
        raise self.error


class _Playwright:
    def __init__(self, error: Exception) -> None:
        self.chromium = _Chromium(error)


INSTALL_DEPS = ("BrowserType.launch_persistent_context: Host system is missing dependencies to "
                "run browsers.\n  Please install them with the following command:\n\n"
                "      sudo playwright install-deps\n")


@pytest.mark.parametrize("message", [
    INSTALL_DEPS,
    "BrowserType.launch_persistent_context: Failed to launch chromium because executable "
    "doesn't exist at /opt/other/chromium",
    "Looks like Playwright was just installed or updated.\nPlease run: PLAYWRIGHT INSTALL",
])
def test_any_installer_advice_names_the_project_command(message, tmp_path):
    Error = pytest.importorskip("playwright.sync_api").Error  # noqa: N806

    with pytest.raises(pytest.fail.Exception) as failed:
        launch_browser(_Playwright(Error(message)), str(tmp_path), "/usr/bin/chromium")
    assert message.splitlines()[0] in _no_installer_advice(failed.value)


def test_other_browser_errors_pass_through_unchanged(tmp_path):
    Error = pytest.importorskip("playwright.sync_api").Error  # noqa: N806

    error = Error("Target page, context or browser has been closed")
    with pytest.raises(Error) as raised:
        launch_browser(_Playwright(error), str(tmp_path), "/usr/bin/chromium")
    assert raised.value is error
