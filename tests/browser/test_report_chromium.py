"""`anvil report` as a user opens it: real folders, real reports, headless Chromium.

The four kinds of folder a user has: a run (`anvil run`, as `anvil demo` makes one) and a
3-step sweep with goodput criteria, each made here with the real commands against the
simulator; a capacity search and a campaign (with its summary) as `tests/reportbuild.py`
makes them with anvil's own writers in a second (the reports of a real search and a real
campaign are drawn in tests/e2e/test_sweeps.py and test_summarize.py, on the folders their
tests make anyway). `anvil report` draws each (the run through the CLI, a new process
without a display; the others in this process), and each `report.html` is opened in
headless Chromium from disk, with the DevTools Network domain recording every request the
page makes:

- the page loads, shows every figure (each `<img>` decoded, with its natural size) and
  fetches nothing: the only request is the page's own file (a copy with its
  Content-Security-Policy removed too, so the policy is not what hides a reference), while
  a control page with one outside image does show that request — the check can fail;
- a full-page screenshot of each is kept: `results/screenshots/report-{run,sweep,capacity,
  campaign}.png` (and in the test's tmp dir).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium_cdp import Chromium, Page, ensure_chromium
from conftest import REPO, anvil
from reportbuild import campaign_folder, capacity_folder

from anvil_metrics.report.build import make_report
from anvil_metrics.simproc import start_simulator

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SCREENSHOTS = REPO / "results" / "screenshots"
FAST_SIM = ["--prefill-ms", "20", "--interval-ms", "2", "--reasoning-tokens", "4",
            "--content-tokens", "16", "--max-context", "8192"]


def only_folder(parent: Path, prefix: str) -> Path:
    found = [p for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    assert len(found) == 1, (parent, found)
    return found[0]


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The four folders: a run and a sweep by the real commands, a capacity search and a
    campaign by anvil's writers (reportbuild)."""
    tmp = tmp_path_factory.mktemp("reports")
    with start_simulator(FAST_SIM) as sim:
        ok(anvil("run", "scenarios/smoke.toml", "-H", sim.url, "-u", "4", "--requests", "24",
                 "--results-dir", str(tmp / "run")))
        ok(anvil("run", "scenarios/smoke.toml", "-H", sim.url, "--steps", "1,2,4",
                 "--step-duration", "1s", "--goodput", "ttft_ms<=150",
                 "--results-dir", str(tmp / "sweep")))
    yield {"run": only_folder(tmp / "run", "benchmark-"),
           "sweep": only_folder(tmp / "sweep", "benchmark-"),
           "capacity": capacity_folder(tmp / "capacity"),
           "campaign": campaign_folder(tmp / "campaign")}


@pytest.fixture(scope="module")
def reports(folders: dict[str, Path]) -> dict[str, Path]:
    """Each folder's report.html: the run's through the CLI (a process with no display),
    the others in this process."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND")}
    proc = anvil("report", str(folders["run"]), env=env)
    ok(proc)
    assert re.search(r"run report: .*report\.html \(7 figures, [0-9.]+ s\)", proc.stdout)
    out = {"run": folders["run"] / "report.html"}
    for kind in ("sweep", "capacity", "campaign"):
        r = make_report(folders[kind])
        assert r.kind == kind
        assert r.png_paths and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
                                   for p in r.png_paths)
        out[kind] = r.html_path
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    reason = ensure_chromium()
    if reason is not None:
        print(f"\n*** SKIPPING the report's headless-Chromium test: {reason} ***",
              file=sys.stderr)
        pytest.skip(f"headless Chromium unavailable: {reason}")
    tmp = tmp_path_factory.mktemp("chromium")
    b = Chromium(tmp / "profile", tmp / "chromium.log", width=1200, height=900)
    try:
        yield b
    finally:
        b.close()


def requests_made(browser: Chromium, page: Page, url: str) -> list[str]:
    """Open `url` and return the URL of every request the page made (DevTools Network)."""
    page.call("Network.enable")
    browser.events.clear()
    page.goto(url)
    page.wait_for("[...document.images].every(i => i.complete)", what="images decoded")
    return [e["params"]["request"]["url"] for e in browser.events
            if e.get("method") == "Network.requestWillBeSent"]


def test_the_control_page_shows_an_outside_request(browser: Chromium, tmp_path: Path
                                                    ) -> None:
    """The check below can fail: a page with one outside image shows that request."""
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><img src="http://192.0.2.1/x.png">')
    page = browser.new_page()
    urls = requests_made(browser, page, control.as_uri())
    assert "http://192.0.2.1/x.png" in urls


@pytest.mark.parametrize("kind", ["run", "sweep", "capacity", "campaign"])
def test_report_renders_and_fetches_nothing(kind: str, reports: dict[str, Path],
                                            browser: Chromium, tmp_path: Path) -> None:
    html = reports[kind]
    text = html.read_text()
    assert "Content-Security-Policy" in text
    # nothing in the page names a place to fetch from
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", text)
    assert "url(" not in text and "@import" not in text and "<script" not in text
    figures = sorted(p.name for p in html.parent.glob("*.png"))
    assert figures, "no PNG beside the report"
    page = browser.new_page()
    for target in (html, _without_csp(html, tmp_path)):
        urls = requests_made(browser, page, target.as_uri())
        # the page's own file, then its inlined images (data: URIs, decoded in place)
        assert [u for u in urls if not u.startswith("data:image/png;base64,")] == [
            target.as_uri()], urls
        assert len(urls) == 1 + len(figures)
    shown = page.evaluate("[...document.images].map(i => [i.closest('figure').id, "
                          "i.naturalWidth, i.naturalHeight])")
    assert sorted(name for name, _, _ in shown) == figures
    assert all(w >= 400 and h >= 200 for _, w, h in shown), shown
    # the footer names each source file with its SHA-256
    assert page.evaluate("document.querySelector('footer').textContent").count("json") >= 1
    page.goto(html.as_uri())
    shot = page.screenshot(tmp_path / f"report-{kind}.png", full_page=True)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, SCREENSHOTS / shot.name)
    print(f"screenshot: {SCREENSHOTS / shot.name}")
    assert shot.stat().st_size > 20_000


def _without_csp(html: Path, tmp_path: Path) -> Path:
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html.read_text())
    assert "Content-Security-Policy" not in text
    copy = tmp_path / f"nocsp-{html.parent.name}.html"
    copy.write_text(text)
    return copy
