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
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium_cdp import Chromium
from conftest import anvil
from report_view import check_report_page, requests_made, start_browser
from reportbuild import campaign_folder, capacity_folder
from simfork import start_simulator

from anvil_metrics.report.build import make_report

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

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
    b = start_browser(tmp_path_factory.mktemp("chromium"))
    try:
        yield b
    finally:
        b.close()


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
    check_report_page(browser, reports[kind], tmp_path, f"report-{kind}.png")
