"""rawpart: where a file is cut into parts (line starts only, small files not at all), and
a file read in parts — by real children, by a child that fails — gives the columns of the
one-pass read.

Why: a large run's document is built from the parts; a cut inside a line, or a failed
child whose lines are lost, would change the document only where nobody looks: runs
large enough to be cut.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.post import rawpart
from anvil_metrics.post.rawcolumns import RawColumns
from anvil_metrics.post.rawread import RawReader


def _raw(tmp_path: Path, n: int = 6) -> Path:
    path = tmp_path / "requests.jsonl"
    records = [failed(i) if i % 3 == 2 else completed(i, worker=f"w{i % 2}") for i in range(n)]
    write_raw(path, HEADER, records, run_end={"finished_at": "2026-08-01T16:01:00Z"})
    return path


def _same(a: RawColumns, b: RawColumns) -> None:
    assert a.table.tolist() == b.table.tolist()
    assert (a.failures, a.worker_names, a.run_end, a.partial, a.header) == (
        b.failures, b.worker_names, b.run_end, b.partial, b.header)


def _line_starts(path: Path) -> list[int]:
    starts, at = [], 0
    for line in path.read_bytes().splitlines(keepends=True)[:-1]:
        at += len(line)
        starts.append(at)
    return starts


def test_line_start_after(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"ab\ncd\n")
    assert [rawpart.line_start_after(path, x) for x in range(7)] == [0, 3, 3, 3, None, None,
                                                                     None]


def test_a_small_file_is_not_cut(tmp_path: Path) -> None:
    assert rawpart.split_offsets(_raw(tmp_path), 4) == []


def test_cuts_fall_on_line_starts_without_repeats(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = _raw(tmp_path)
    monkeypatch.setattr(rawpart, "MIN_BYTES", 0)
    starts = set(_line_starts(path))
    for parts in (2, 3, 8, 50):
        cuts = rawpart.split_offsets(path, parts)
        assert cuts == sorted(set(cuts)) and set(cuts) <= starts and len(cuts) < parts
    assert rawpart.split_offsets(path, 1) == []


def test_read_in_parts_by_real_children_is_the_one_pass_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _raw(tmp_path)
    one_pass = rawpart.scan_raw(path, parallel=False)
    reader = RawReader(path, columns=True)
    starts = _line_starts(path)
    rawpart.read_parts(reader, [starts[2], starts[4]])  # two children
    _same(reader.raw_columns(), one_pass)


def test_a_part_whose_child_failed_is_read_here(tmp_path: Path) -> None:
    path = _raw(tmp_path)
    one_pass = rawpart.scan_raw(path, parallel=False)
    starts = _line_starts(path)
    for cut in (starts[1], starts[3], starts[-1]):
        reader = RawReader(path, columns=True)
        rawpart.read_parts(reader, [cut], lambda p, a, b: None)
        _same(reader.raw_columns(), one_pass)
        reader = RawReader(path, columns=True)
        rawpart.read_parts(reader, [cut], rawpart.read_part)  # in process
        _same(reader.raw_columns(), one_pass)
