"""The judge's web page, end to end in headless Chromium (Debian's chromium, driven by Playwright).

Needs `apt-get install -y chromium` and `pip install -r practice/requirements.txt`.
Set MINISGL_SKIP_BROWSER=1 to skip on a machine without a browser.
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

from judgekit.exercises import find_exercise  # noqa: E402
from judgekit.web import make_server  # noqa: E402

CHROMIUM_ARGS = [
    "--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _chromium() -> str:
    if os.environ.get("MINISGL_SKIP_BROWSER") == "1":
        pytest.skip("MINISGL_SKIP_BROWSER=1")
    path = os.environ.get("MINISGL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        pytest.fail("headless Chromium is missing: run `apt-get update && apt-get install -y "
                    "chromium` (or set MINISGL_SKIP_BROWSER=1 to skip this test)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail("Playwright for Python is missing: run `pip install -r practice/requirements.txt`"
                    " (never `playwright install`: the test uses Debian's chromium)")
    return path


@pytest.fixture
def page_url(tmp_path, monkeypatch):
    monkeypatch.setenv("MINISGL_PRACTICE_WORKSPACE", str(tmp_path / "workspace"))
    server = make_server(0, verbose=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_page_judges_reference_and_starter(page_url):
    chromium = _chromium()
    from playwright.sync_api import expect, sync_playwright

    ex = find_exercise(201)
    n = len(ex.load_cases())
    with tempfile.TemporaryDirectory(prefix="minisgl-chromium-") as profile, sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=chromium, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_url)

            link = page.locator("#exercise-list a[data-id='201']")
            expect(link).to_contain_text(ex.label)
            expect(page.locator("#exercise-list")).to_contain_text("第 2 章")
            link.click()
            expect(page.locator("#statement h1")).to_contain_text("RMSNorm")
            expect(page.locator("#code")).to_have_value(ex.starter_code())

            page.fill("#code", ex.reference_path.read_text(encoding="utf-8"))
            page.click("#run")
            expect(page.locator("#summary")).to_have_text(f"结果：{n}/{n} 通过", timeout=120_000)
            verdicts = page.locator("#cases tbody .verdict").all_inner_texts()
            assert verdicts == ["AC"] * n
            expect(link.locator(".check")).to_have_text("✓")

            page.fill("#code", ex.starter_code())
            page.click("#run")
            expect(page.locator("#summary")).to_have_text(f"结果：0/{n} 通过", timeout=120_000)
            assert set(page.locator("#cases tbody .verdict").all_inner_texts()) == {"RE"}
            expect(page.locator("#failure")).to_contain_text("NotImplementedError")
            expect(link.locator(".check")).to_have_text("✓")  # once passed, stays passed

            page.reload()  # the saved code comes back
            page.locator("#exercise-list a[data-id='201']").click()
            expect(page.locator("#code")).to_have_value(ex.starter_code())
            assert errors == []
        finally:
            browser.close()
