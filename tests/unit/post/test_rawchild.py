"""rawchild: one part of a raw file read as a child reads it — plain request lines into
column rows, every other line handed back as it is, nothing after an unparseable line —
and the bytes a real child writes read back by its parent.

Why: the parent merges a child's part as if it had read those lines itself; a line
dropped or a row counted twice here changes the run's document only for files large
enough to be read in parts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.post import rawchild, rawpart
from anvil_metrics.post.rawchild import line_batches, read_part
from anvil_metrics.post.rawcolumns import COL, RAW_COLUMNS


def _raw(tmp_path: Path) -> Path:
    path = tmp_path / "requests.jsonl"
    write_raw(path, HEADER, [completed(0), completed(1), failed(2)],
              run_end={"finished_at": "2026-08-01T16:01:00Z"})
    return path


def _table(buf: object) -> np.ndarray:
    """A part's rows: its buffer, or the blocks a real child sent."""
    parts = buf if isinstance(buf, list) else [buf]
    return np.concatenate([np.frombuffer(b, dtype=np.int64) for b in parts]).reshape(
        -1, len(RAW_COLUMNS))


def test_a_part_holds_rows_for_requests_and_hands_back_the_rest(tmp_path: Path) -> None:
    part = read_part(_raw(tmp_path), 0)
    assert part.lines == 5
    kinds = [seg[0] for seg in part.segments]
    assert kinds == ["line", "rows", "line"]  # the header, 3 requests, run_end
    assert part.segments[1] == ("rows", 0, 3)
    assert part.segments[0][1] == 1 and part.segments[2][1] == 5  # line numbers from 1
    table = _table(part.buf)
    assert table[:, COL["request_index"]].tolist() == [0, 1, 2]
    assert table[:, COL["line"]].tolist() == [2, 3, 4]
    assert list(part.failures) == [2]  # by the part's own row position


def test_a_part_from_a_line_start_to_a_stop(tmp_path: Path) -> None:
    path = _raw(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    start = len(lines[0]) + len(lines[1])  # the second request's line
    part = read_part(path, start, start + len(lines[2]))
    assert part.lines == 1 and part.segments == [("rows", 0, 1)]
    assert _table(part.buf)[0, COL["request_index"]] == 1


def test_reading_stops_after_an_unparseable_line(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    good = completed(0)
    write_raw(path, HEADER, [good])
    path.write_bytes(path.read_bytes() + b"{torn\n" + path.read_bytes().splitlines(True)[1])
    part = read_part(path, 0)
    assert part.lines == 3
    assert part.segments[-1] == ("line", 3, b"{torn\n")


def test_line_batches_stop_at_the_line_that_reaches_the_size(tmp_path: Path,
                                                             monkeypatch) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"ab\nc\nd\ne")
    for batch in (1, 3, 5, 100):  # a batch of a byte, a line, several lines, all
        monkeypatch.setattr(rawchild, "BATCH_BYTES", batch)
        with open(path, "rb") as f:
            assert sum(line_batches(f, 5), []) == [b"ab\n", b"c\n"]
        with open(path, "rb") as f:
            f.seek(3)
            assert sum(line_batches(f), []) == [b"c\n", b"d\n", b"e"]


def test_a_real_childs_output_is_what_read_part_gives(tmp_path: Path) -> None:
    path = _raw(tmp_path)
    proc = rawpart.start_child(path, 0)
    got = rawpart.child_result(proc)
    want = read_part(path, 0)
    assert got is not None and proc.returncode == 0
    assert (got.segments, got.lines, got.failures) == (want.segments, want.lines, want.failures)
    assert _table(got.buf).tolist() == _table(want.buf).tolist()
