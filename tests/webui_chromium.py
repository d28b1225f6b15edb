"""Locust's web UI driven in headless Chromium: the selectors and steps the browser tests
share (open "Custom parameters", type anvil's options, read a tab's table, screenshots)."""

from __future__ import annotations

import shutil
from pathlib import Path

from chromium_cdp import Page
from conftest import REPO

SCREENSHOTS = REPO / "results" / "screenshots"


BUTTON = "[...document.querySelectorAll('button')].find(e => e.textContent.trim() === {!r})"


TAB = "[...document.querySelectorAll('[role=tab]')].find(e => e.textContent === {!r})"


INPUT = "document.querySelector('form input[name={}]')"


# the visible table's rows as lists of cell texts
TABLE = "[...document.querySelectorAll('table tbody tr')].map(tr => [...tr.cells]" \
        ".map(td => td.textContent))"


def js_number(value: float) -> str:
    """How the page shows a JSON number (String(n) in JS): shortest repr, no '.0'."""
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def screenshot(page: Page, tmp_path: Path, name: str) -> Path:
    shot = page.screenshot(tmp_path / name)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, SCREENSHOTS / name)
    print(f"screenshot: {SCREENSHOTS / name} (and {shot})")
    return shot


def open_custom_parameters(page: Page) -> None:
    summary = BUTTON.format("Custom parameters")
    if page.evaluate(f"({summary}).getAttribute('aria-expanded')") != "true":
        page.click(summary)
    page.wait_for(f"{INPUT.format('requests')}.getBoundingClientRect().height > 0",
                  what="the Custom parameters fields to show")


def type_options(page: Page, **fields: str) -> None:
    for name, value in fields.items():
        page.type_into(INPUT.format(name), value)
    typed = page.evaluate("Object.fromEntries([...document.querySelectorAll('form input')]"
                          ".map(e => [e.name, e.value]))")
    for name, value in fields.items():
        assert typed[name] == value, (name, typed[name])


def tab_rows(page: Page) -> dict[str, list[str]]:
    return {row[0]: row[1:] for row in page.evaluate(TABLE)}

