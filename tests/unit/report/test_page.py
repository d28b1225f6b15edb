"""page: how a report writes a cell, and the one HTML page — every text escaped, images
inlined as `data:` URIs, a policy that lets the browser fetch nothing, the sources in the
footer.

Why: reports are mailed and opened years later, offline; a model name holding `<script>`
must print as text, and an image linked rather than inlined would be gone.
"""

from __future__ import annotations

import base64
import re

import pytest

from anvil_metrics.report.page import CSP, Figure, Page, Section, Source, Table, cell, render


@pytest.mark.parametrize(("value", "want"), [
    (None, "null"), (True, "yes"), (False, "no"), (1234.5678, "1,234.57"), (0.0, "0.00"),
    (0.012345, "0.01235"), (-2.0, "-2.00"), (7, "7"), ("m/on", "m/on"),
])
def test_cell(value: object, want: str) -> None:
    assert cell(value) == want


def _page(title: str = "anvil run <b>x</b>") -> Page:
    fig = Figure("ttft-cdf.png", "TTFT & co", "the <CDF>", ("benchmark.json",), b"\x89PNG-ish")
    table = Table("Gates", ("gate", "outcome"), (("e2e", "pass"), ("ttft", "fail")),
                  note="a <note>", classes=("pass", "fail"))
    return Page("run", title, ("line <1>",), (Section("One", "text & more", (table,), (fig,)),),
                (Source("benchmark.json", 12, "ab" * 32),), "anvil 0.1 (commit x)",
                "2026-08-01T00:00:00Z")


def test_every_text_is_escaped() -> None:
    html = render(_page())
    assert "<b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "line &lt;1&gt;" in html and "text &amp; more" in html
    assert "the &lt;CDF&gt;" in html and 'class="note">a &lt;note&gt;' in html


def test_images_are_inlined_and_nothing_is_fetched() -> None:
    html = render(_page())
    data = base64.b64encode(b"\x89PNG-ish").decode()
    assert f'src="data:image/png;base64,{data}"' in html
    assert f'content="{CSP.replace(chr(39), "&#x27;")}"' in html
    assert "<script" not in html
    assert re.findall(r'(?:src|href)="(?!data:)', html) == []


def test_tables_rows_classes_and_the_footer() -> None:
    html = render(_page())
    assert '<tr><td>e2e</td><td class="pass">pass</td></tr>' in html
    assert '<tr><td>ttft</td><td class="fail">fail</td></tr>' in html
    assert f'<tr><td>benchmark.json</td><td>12</td><td class="src">{"ab" * 32}</td></tr>' \
        in html
    assert "anvil 0.1 (commit x), 2026-08-01T00:00:00Z." in html
    assert [f.name for f in _page().figures()] == ["ttft-cdf.png"]
