"""webui_page: the `/anvil/` page is self-contained, finds every element it fills, and
fills them as text.

Why: the page must work on a closed network (no CDN, no outside resource); an element id
the script asks for but the markup lacks leaves a chart silently blank; and a value set
as HTML would let a server's error message run as script in the user's browser.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from anvil_metrics.live.webui_page import PAGE_HTML


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name in ("src", "href") and value:
                self.sources.append(value)


def _parsed() -> _Ids:
    parser = _Ids()
    parser.feed(PAGE_HTML)
    return parser


def test_every_element_the_script_fills_is_in_the_markup() -> None:
    wanted = set(re.findall(r'getElementById\("([^"]+)"\)', PAGE_HTML))
    wanted |= set(re.findall(r'querySelector\("#([\w-]+)', PAGE_HTML))
    assert {"status", "anvil-table", "chart-cdf", "downloads"} <= wanted
    assert wanted <= _parsed().ids


def test_nothing_is_loaded_from_outside() -> None:
    assert _parsed().sources == ["../"]  # back to Locust's own page, on the same server
    assert re.findall(r"https?://(?!www\.w3\.org/2000/svg)", PAGE_HTML) == []
    assert 'fetch("live.json"' in PAGE_HTML  # beside the page, relative


def test_values_are_set_as_text_never_as_html() -> None:
    assert "textContent" in PAGE_HTML
    assert "innerHTML" not in PAGE_HTML and "outerHTML" not in PAGE_HTML
    assert "insertAdjacentHTML" not in PAGE_HTML and "document.write" not in PAGE_HTML
