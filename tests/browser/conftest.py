"""The browser tests' fixtures: Chromium, installed when missing (or every test here skips,
loudly, with the reason), and one fresh page per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium_cdp import Chromium, Page, ensure_chromium


@pytest.fixture(scope="module")
def chromium_available() -> None:
    reason = ensure_chromium()
    if reason is not None:
        print(f"\n*** SKIPPING the headless-Chromium web UI test: {reason} ***",
              file=sys.stderr)
        pytest.skip(f"headless Chromium unavailable: {reason}")


@pytest.fixture
def page(chromium_available: None, tmp_path: Path) -> Iterator[Page]:
    browser = Chromium(tmp_path / "chromium-profile", tmp_path / "chromium.log")
    try:
        yield browser.new_page()
    finally:
        browser.close()

