"""Atomic writes: the target is the old file or the whole new one, never a part, whichever
side of the write-behind fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from anvil_metrics.jsonio import atomic_write_bytes


def test_many_chunks_arrive_whole_and_in_order(tmp_path: Path) -> None:
    target = tmp_path / "big.json"
    chunks = [bytes([65 + i % 26]) * (1000 + i) for i in range(300)]
    atomic_write_bytes(target, iter(chunks))
    assert target.read_bytes() == b"".join(chunks)
    assert [p.name for p in tmp_path.iterdir()] == ["big.json"]


def test_a_maker_that_fails_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "b.json"
    target.write_bytes(b"old")

    def chunks() -> Iterator[bytes]:
        yield b"x" * 100_000
        yield b"y" * 100_000
        raise ValueError("refusing to write non-strict JSON")

    with pytest.raises(ValueError, match="non-strict"):
        atomic_write_bytes(target, chunks())
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_a_write_that_fails_is_raised_and_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "b.json"
    target.write_bytes(b"old")
    made = []

    def chunks() -> Iterator[object]:
        for i in range(1000):
            made.append(i)
            yield "not bytes" if i == 3 else b"z"  # the writer's f.write raises TypeError

    with pytest.raises(TypeError):
        atomic_write_bytes(target, chunks())  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert len(made) < 1000  # the maker stopped once the writer had failed
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_the_writer_hands_what_it_wrote_to_the_disk_as_it_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `WRITEBACK_BYTES` written are handed over (sync_file_range), in order and
    without gaps, so the fsync at the end has little left to wait for."""
    from anvil_metrics import jsonio

    handed: list[tuple[int, int]] = []
    monkeypatch.setattr(jsonio, "WRITEBACK_BYTES", 10)
    real = jsonio._writeback
    monkeypatch.setattr(jsonio, "_writeback",
                        lambda fd, at, n: handed.append((at, n)) or real(fd, at, n))
    chunks = [bytes([65 + i]) * 7 for i in range(9)]
    atomic_write_bytes(tmp_path / "f", iter(chunks))
    assert (tmp_path / "f").read_bytes() == b"".join(chunks)
    assert handed and handed[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(handed, handed[1:], strict=False))
    assert all(n >= 10 for _, n in handed) and handed[-1][0] + handed[-1][1] <= 63


def test_the_file_replaced_has_its_cached_pages_dropped_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replacing a large file frees its cached pages; the writer thread asks for that while
    the new file is made (POSIX_FADV_DONTNEED), and nothing is asked of a new path."""
    import os

    advised: list[int] = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, at, n, advice: advised.append(advice) or real(fd, at, n,
                                                                                 advice))
    atomic_write_bytes(tmp_path / "f", iter([b"old"]))
    assert advised == []
    atomic_write_bytes(tmp_path / "f", iter([b"new"]))
    assert advised == [os.POSIX_FADV_DONTNEED] and (tmp_path / "f").read_bytes() == b"new"
