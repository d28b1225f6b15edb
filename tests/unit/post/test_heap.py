"""heap: a post-processing process asks glibc to keep 64 MiB of freed memory at the top of
its heap (M_TOP_PAD) and blocks up to 32 MiB in it (M_MMAP_THRESHOLD), and where there is
no such call it does nothing.

Why: every post-processing process makes it first; a missing symbol must not stop one.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from anvil_metrics.post import heap


def test_it_sets_glibcs_top_pad(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    class Libc:
        def __init__(self, *_: Any) -> None:
            def mallopt(param: int, value: int) -> int:
                calls.append((param, value))
                return 1
            self.mallopt = mallopt

    monkeypatch.setattr(ctypes, "CDLL", Libc)
    heap.keep_freed_memory()
    assert calls == [(heap.M_TOP_PAD, 64 << 20), (heap.M_MMAP_THRESHOLD, 32 << 20)]


def test_without_mallopt_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoLibc:
        def __init__(self, *_: Any) -> None:
            raise OSError("no such library")

    monkeypatch.setattr(ctypes, "CDLL", NoLibc)
    assert heap.keep_freed_memory() is None
