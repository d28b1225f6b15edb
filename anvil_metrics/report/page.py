"""A report's HTML: one self-contained page.

Why self-contained and script-free: reports are mailed, attached to tickets and opened
years later, on machines without network access to anything anvil might have linked. The
page holds its PNGs as `data:` URIs and its style inline, runs no script, and says so to
the browser too (a Content-Security-Policy that allows images only from `data:` and
nothing else from anywhere), so opening it fetches nothing. Every text is escaped.

`Page` (its `Section`s, `Table`s and `Figure`s: plain data, no matplotlib) is what a report
module fills in; `render` is the only place HTML is written.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from typing import Any

CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;
max-width:1060px;color:#222;line-height:1.4}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:32px;
border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:14px;margin:18px 0 4px}
.sub{color:#555;font-size:13px}figure{margin:12px 0 20px}figure img{max-width:100%;
border:1px solid #eee}figcaption{font-size:12px;color:#444}.src{color:#777;font-size:11px;
font-family:ui-monospace,monospace}table{border-collapse:collapse;font-size:12px;
margin:6px 0 14px}th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f5f5f5}
.pass{color:#1a7f37;font-weight:600}.fail{color:#c62828;font-weight:600}
.note{font-size:12px;color:#555}footer{margin-top:36px;font-size:11px;color:#666}
"""


@dataclass(frozen=True, slots=True)
class Figure:
    """One picture of a report: `name` is its PNG's file name (`ttft-cdf.png`), `title`
    and `caption` are shown above and below it, `sources` names the files its values come
    from (relative to the report's folder), `png` is the image."""

    name: str
    title: str
    caption: str
    sources: tuple[str, ...]
    png: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Table:
    """A table of text cells; `classes` optionally gives a CSS class per row (`pass`,
    `fail`) for its last cell."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    classes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    text: str = ""
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()


@dataclass(frozen=True, slots=True)
class Source:
    """A file the report was made from, relative to the report's folder."""

    path: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Page:
    kind: str  # "run", "sweep", "capacity", "campaign", "compare"
    title: str
    lines: tuple[str, ...]  # under the title: what was measured, against what
    sections: tuple[Section, ...]
    sources: tuple[Source, ...]
    made_by: str  # "anvil 0.1.0 (commit abc1234)"
    made_at: str  # UTC

    def figures(self) -> list[Figure]:
        return [f for s in self.sections for f in s.figures]


def cell(v: Any) -> str:
    """How every report table writes a value: null, yes/no, a float to two decimals (four
    significant digits below 1), else as written."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) >= 1 or v == 0 else f"{v:.4g}"
    return str(v)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(t: Table) -> str:
    out = [f"<h3>{_e(t.title)}</h3>" if t.title else "", "<table><thead><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in t.header]
    out.append("</tr></thead><tbody>")
    for i, row in enumerate(t.rows):
        cls = t.classes[i] if i < len(t.classes) else ""
        cells = [f"<td>{_e(c)}</td>" for c in row[:-1]]
        last = _e(row[-1]) if row else ""
        cells.append(f'<td class="{_e(cls)}">{last}</td>' if cls else f"<td>{last}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    if t.note:
        out.append(f'<p class="note">{_e(t.note)}</p>')
    return "".join(out)


def _figure(f: Figure) -> str:
    data = base64.b64encode(f.png).decode("ascii")
    return (f'<figure id="{_e(f.name)}"><h3>{_e(f.title)}</h3>'
            f'<img alt="{_e(f.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(f.caption)} "
            f'<span class="src">[{_e(f.name)} from {_e(", ".join(f.sources))}]</span>'
            "</figcaption></figure>")


def render(page: Page) -> str:
    """The page as HTML text."""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{_e(page.title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(page.title)}</h1>",
    ]
    parts += [f'<p class="sub">{_e(line)}</p>' for line in page.lines]
    for s in page.sections:
        parts.append(f"<section><h2>{_e(s.title)}</h2>")
        if s.text:
            parts.append(f"<p>{_e(s.text)}</p>")
        parts += [_table(t) for t in s.tables]
        parts += [_figure(f) for f in s.figures]
        parts.append("</section>")
    parts.append("<footer><h3>Made from</h3><table><thead><tr><th>file</th><th>bytes</th>"
                 "<th>SHA-256</th></tr></thead><tbody>")
    parts += [f"<tr><td>{_e(s.path)}</td><td>{s.size_bytes}</td>"
              f'<td class="src">{_e(s.sha256)}</td></tr>' for s in page.sources]
    parts.append(f"</tbody></table><p>{_e(page.made_by)}, {_e(page.made_at)}. "
                 "Every value drawn is computed from these files by anvil's own catalogue "
                 "(the figures <code>anvil verify</code> recomputes).</p></footer>")
    parts.append("</body></html>")
    return "\n".join(parts)
