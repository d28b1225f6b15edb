"""A report.html opened in headless Chromium as its reader opens it: from disk, offline.

One check for every test that draws a report (tests/browser/test_report_chromium.py, and
the reports of a real capacity search and a real campaign in tests/e2e/test_sweeps.py and
test_summarize.py): the page names no place to fetch from; opened, it fetches nothing but
its own file (the DevTools Network domain records every request; a copy without its
Content-Security-Policy too, so the policy is not what hides a reference); every figure is
decoded at its natural size; and a full-page screenshot is kept in results/screenshots/.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from chromium_cdp import Chromium, Page, ensure_chromium
from conftest import REPO

SCREENSHOTS = REPO / "results" / "screenshots"
PNG_URI = "data:image/png;base64,"


def requests_made(browser: Chromium, page: Page, url: str) -> list[str]:
    """Open `url` and return the URL of every request the page made (DevTools Network)."""
    page.call("Network.enable")
    browser.events.clear()
    page.goto(url)
    page.wait_for("[...document.images].every(i => i.complete)", what="images decoded")
    return [e["params"]["request"]["url"] for e in browser.events
            if e.get("method") == "Network.requestWillBeSent"]


def check_report_page(browser: Chromium, html: Path, tmp_path: Path, shot_name: str) -> Path:
    """The checks above on `html` (its PNGs beside it); returns the screenshot kept."""
    text = html.read_text()
    assert "Content-Security-Policy" in text
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", text)
    assert "url(" not in text and "@import" not in text and "<script" not in text
    figures = sorted(p.name for p in html.parent.glob("*.png"))
    assert figures, "no PNG beside the report"
    page = browser.new_page()
    bare = tmp_path / f"nocsp-{html.parent.name}.html"
    bare.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text))
    assert "Content-Security-Policy" not in bare.read_text()
    for target in (html, bare):
        urls = requests_made(browser, page, target.as_uri())
        # the page's own file, then its inlined images (data: URIs, decoded in place)
        assert [u for u in urls if not u.startswith(PNG_URI)] == [target.as_uri()], urls
        assert len(urls) == 1 + len(figures)
    shown = page.evaluate("[...document.images].map(i => [i.closest('figure').id, "
                          "i.naturalWidth, i.naturalHeight])")
    assert sorted(name for name, _, _ in shown) == figures
    assert all(w >= 400 and h >= 200 for _, w, h in shown), shown
    page.goto(html.as_uri())
    shot = page.screenshot(tmp_path / shot_name, full_page=True)
    assert shot.stat().st_size > 20_000
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, SCREENSHOTS / shot_name)
    print(f"screenshot: {SCREENSHOTS / shot_name}")
    return shot


def start_browser(tmp_path: Path) -> Chromium:
    """A headless Chromium for report pages, or the test is skipped (loudly) saying why."""
    reason = ensure_chromium()
    if reason is not None:
        print(f"\n*** SKIPPING the report's headless-Chromium check: {reason} ***",
              file=sys.stderr)
        pytest.skip(f"headless Chromium unavailable: {reason}")
    tmp_path.mkdir(parents=True, exist_ok=True)
    return Chromium(tmp_path / "profile", tmp_path / "chromium.log", width=1200, height=900)


def view_report(html: Path, tmp_path: Path, shot_name: str) -> Path:
    """`check_report_page` in a Chromium of its own, closed after."""
    browser = start_browser(tmp_path / "chromium")
    try:
        return check_report_page(browser, html, tmp_path, shot_name)
    finally:
        browser.close()
