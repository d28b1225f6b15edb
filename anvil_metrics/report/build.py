"""Which kind of folder a report is asked of, and the files it writes.

A folder is, by what it holds (the first that matches):
- a campaign: `campaign.json` (`anvil campaign run`);
- a capacity search: `capacity.json` (`anvil capacity`);
- a run: `requests.jsonl` (`anvil run`, `locust`); a run with `steps[]` is a sweep.

`anvil compare --report DIR` draws a comparison of runs (`make_compare_report`) into DIR.

`make_report` writes `report.html` (self-contained) and each figure's PNG beside it, into
the folder itself unless `out_dir` is given, each file atomically; it returns what it
wrote and how long it took. matplotlib is imported here, on demand: without the
`[report]` extra the command says what to install, in one line.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from anvil_metrics.compare.runs import ComparedRun
from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import atomic_write_bytes
from anvil_metrics.report.page import Page, Source, render

KINDS = ("run", "sweep", "capacity", "campaign", "compare")
HTML_FILE = "report.html"


@dataclass(frozen=True, slots=True)
class Report:
    kind: str
    folder: Path
    html_path: Path
    png_paths: tuple[Path, ...]
    elapsed_s: float


def folder_kind(folder: Path) -> str:
    """"campaign", "capacity" or "run" (a sweep is a run: its document says so)."""
    if not folder.is_dir():
        raise UsageError(f"report: {str(folder)!r} is not a folder; give a run folder "
                         "(requests.jsonl), a capacity search (capacity.json) or a campaign "
                         "folder (campaign.json)")
    for name, kind in (("campaign.json", "campaign"), ("capacity.json", "capacity"),
                       ("requests.jsonl", "run")):
        if (folder / name).is_file():
            return kind
    raise UsageError(f"report: {str(folder)!r} holds no requests.jsonl, capacity.json "
                     "or campaign.json; give a folder anvil wrote")


def made_by() -> str:
    """"anvil <version> (commit <sha>[, modified])" — the code that drew the report."""
    try:
        version = metadata.version("anvil-metrics")
    except metadata.PackageNotFoundError:
        version = "unknown"
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=True).stdout
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--",
                                str(here.parent)], capture_output=True, text=True,
                               timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return f"anvil {version} (not a git checkout)"
    return f"anvil {version} (commit {sha.strip()}{', modified' if dirty.strip() else ''})"


def source(folder: Path, relative: str) -> Source:
    """A file the report was made from: its size and SHA-256."""
    p = folder / relative
    h = hashlib.sha256()
    size = 0
    with open(p, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
            size += len(block)
    return Source(relative, size, h.hexdigest())


def make_report(path: str | Path, out_dir: str | Path | None = None) -> Report:
    """Draw the report of the folder at `path` (see the module docstring)."""
    started = time.perf_counter()
    folder = Path(path)
    kind = folder_kind(folder)
    out = Path(out_dir) if out_dir is not None else folder
    if out.exists() and not out.is_dir():
        raise UsageError(f"report: --out {str(out)!r} is a file; give a folder")
    _need_matplotlib()
    if kind == "campaign":
        from anvil_metrics.report.campaignfigs import campaign_page

        title, lines, sections, sources = campaign_page(folder)
    elif kind == "capacity":
        from anvil_metrics.report.capacityfigs import capacity_page

        title, lines, sections, sources = capacity_page(folder)
    else:
        from anvil_metrics.report.runfigs import run_page

        kind, title, lines, sections, sources = run_page(folder)
    page = Page(kind, title, tuple(lines), tuple(sections),
                tuple(source(folder, s) for s in sources), made_by(),
                datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _write(page, folder, out, started)


def _write(page: Page, folder: Path, out: Path, started: float) -> Report:
    """The page's PNGs and report.html into `out`, each atomically."""
    out.mkdir(parents=True, exist_ok=True)
    pngs = []
    for fig in page.figures():
        atomic_write_bytes(out / fig.name, [fig.png])
        pngs.append(out / fig.name)
    html_path = out / HTML_FILE
    atomic_write_bytes(html_path, [render(page).encode("utf-8")])
    return Report(page.kind, folder, html_path, tuple(pngs), time.perf_counter() - started)


def make_compare_report(result: dict[str, Any], runs: list[ComparedRun],
                        out_dir: str | Path) -> Report:
    """The page of a comparison (`compare.runs.compare_runs` of `runs`) into `out_dir`;
    its sources are the runs' files, named relative to it."""
    started = time.perf_counter()
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"compare: --report {str(out)!r} is a file; give a folder")
    _need_matplotlib()
    from anvil_metrics.report.comparefigs import compare_page

    out.mkdir(parents=True, exist_ok=True)
    title, lines, sections, sources = compare_page(result, runs, out)
    page = Page("compare", title, tuple(lines), tuple(sections),
                tuple(source(out, s) for s in sources), made_by(),
                datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _write(page, out, out, started)


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("report: the pictures need matplotlib: "
                         "pip install 'anvil-metrics[report]'") from None
