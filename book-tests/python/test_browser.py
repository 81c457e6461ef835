"""The built book in a real browser (headless Chromium): every chapter loads without console
errors, code is highlighted, diagrams render, and search finds "PrivateUse1". A screenshot
of one chapter is saved to book/screenshots/ as a test artifact."""

import functools
import os
import http.server
import shutil
import threading

import pytest

from conftest import ROOT

HTML = ROOT / "book" / "html"
CHROMIUM = os.environ.get("OPENREG_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHAPTERS = ["introduction", "architecture", "device", "hooks", "memory", "streams", "generator",
            "operators", "kernels", "autoload", "frontend", "serialization", "amp",
            "troubleshooting", "how-built"]
# Flags for a sandboxed, offline machine running as root.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def site():
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")  # installed by `make setup`
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def open_page(browser, url):
    page = browser.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load")
    return page, errors


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_loads_cleanly_with_highlighted_code(site, browser, chapter):
    page, errors = open_page(browser, f"{site}/{chapter}.html")
    assert page.locator("main h1").first.inner_text()
    highlighted = page.locator("main pre code.hljs span").count()
    assert highlighted > 0, f"{chapter}: no highlighted code"
    assert errors == [], f"{chapter}: console errors: {errors}"
    page.close()


@pytest.mark.parametrize("chapter", ["architecture", "hooks", "streams"])
def test_diagrams_render(site, browser, chapter):
    page, errors = open_page(browser, f"{site}/{chapter}.html")
    widths = page.eval_on_selector_all("img.diagram", "imgs => imgs.map(i => i.naturalWidth)")
    assert widths and all(w > 0 for w in widths), f"{chapter}: diagrams {widths}"
    assert errors == []
    page.close()


def test_search_finds_privateuse1(site, browser):
    page, errors = open_page(browser, f"{site}/introduction.html")
    page.keyboard.press("s")
    page.locator("#mdbook-searchbar").press_sequentially("PrivateUse1")  # search runs on keyup
    results = page.locator("#mdbook-searchresults li")
    results.first.wait_for(timeout=10_000)
    assert results.count() > 0
    assert errors == []
    page.close()


def test_screenshot_artifact(site, browser):
    page, _ = open_page(browser, f"{site}/device.html")
    out = ROOT / "book" / "screenshots" / "device.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.screenshot(path=str(out))
    assert out.stat().st_size > 10_000
    page.close()
