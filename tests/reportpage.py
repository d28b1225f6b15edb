"""The checks every report page's test makes: its footer names each source file with the
file's size and SHA-256, its tables hold the files' values as the page writes cells, and
the PNGs beside it are valid and the very ones inlined.

Why one place: the run, capacity and campaign reports are tested alike; the same check
written three times would drift.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from pathlib import Path
from typing import Any

import orjson

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def sha_row(folder: Path, relative: str) -> str:
    """The footer's row for one source file, from the file itself."""
    data = (folder / relative).read_bytes()
    return (f"<tr><td>{html.escape(relative)}</td><td>{len(data)}</td>"
            f'<td class="src">{hashlib.sha256(data).hexdigest()}</td></tr>')


def footer_files(page: str) -> list[str]:
    footer = page[page.index("<footer>"):]
    return re.findall(r"<tr><td>([^<]+)</td><td>\d+</td>", footer)


def row(*cells: str, last_class: str = "") -> str:
    out = "".join(f"<td>{html.escape(c)}</td>" for c in cells[:-1])
    last = html.escape(cells[-1])
    out += f'<td class="{last_class}">{last}</td>' if last_class else f"<td>{last}</td>"
    return f"<tr>{out}</tr>"


def check_pngs(report: Any, page: str, names: list[str]) -> None:
    """The PNGs beside the page are these, valid, and the very ones inlined in it."""
    assert [p.name for p in report.png_paths] == names
    inlined = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)">', page)
    assert len(inlined) == len(names)
    for path, data in zip(report.png_paths, inlined, strict=True):
        png = path.read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 2000, path
        assert base64.b64decode(data) == png, path


def reported(root: Path, build: Any) -> tuple[Path, Any, str]:
    """(the folder `build(root)` writes, its report drawn into `root/out`, the page's text)."""
    from anvil_metrics.report.build import make_report

    folder = build(root)
    report = make_report(folder, root / "out")
    return folder, report, report.html_path.read_text()
