"""rowparts: a large benchmark.json's rows decoded in parts — the first here, each other by
a real child — give the columns and the verdict of one process; cuts fall just after a
row's end; a part that is not rows, or a child that fails, leaves the file to the
one-process read, which says what is wrong.

Why: `anvil verify` of a big run is judged from these columns; a row lost or counted twice
where two parts meet would pass or fail a file only where nobody looks: runs large enough
to be cut.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anvil_metrics.post import docscan, rowparts
from anvil_metrics.post.docscan import verify_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "postprocess"


def _bench(tmp_path: Path, name: str = "steady") -> Path:
    path = tmp_path / "benchmark.json"
    shutil.copy(FIXTURES / name / "benchmark.json", path)
    return path


def _rows_start(path: Path) -> int:
    with open(path, "rb") as f:
        found = docscan._head(f, 1 << 20)
    assert found is not None
    return found[2]


def _same(a: Any, b: Any) -> None:
    assert len(a) == len(b) and a.absent == b.absent
    for kind in ("floats", "counts", "present"):
        for k, v in getattr(a, kind).items():
            assert np.array_equal(v, getattr(b, kind)[k], equal_nan=True), k
    assert np.array_equal(a.usage_source, b.usage_source)


def test_cuts_fall_just_after_a_rows_end(tmp_path: Path) -> None:
    path = _bench(tmp_path)
    start, text = _rows_start(path), path.read_bytes()
    for parts in (2, 3, 7, 50):
        cuts = rowparts.cuts(path, start, parts)
        assert cuts == sorted(set(cuts)) and len(cuts) < parts
        assert all(text[c - len(rowparts.ROW_END):c] == rowparts.ROW_END for c in cuts)


@pytest.mark.parametrize("name", ["steady", "mix", "partial"])
@pytest.mark.parametrize("parts", [2, 3, 9])
def test_parts_give_the_columns_of_one_read(tmp_path: Path, name: str, parts: int) -> None:
    path = _bench(tmp_path, name)
    start = _rows_start(path)
    one = rowparts.read_range(path, start, None)
    got = rowparts.read_in_parts(path, start, parts)
    assert one[1] is not None and got is not None
    _same(got[0], one[1])
    assert got[1] == one[0] + len(rowparts.CLOSE)


def test_verify_reads_a_large_file_in_parts_and_finds_what_one_process_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _bench(tmp_path)
    monkeypatch.setattr(rowparts, "MIN_BYTES", 0)
    monkeypatch.setattr(docscan, "usable_cpus", lambda: 2)
    used = []
    real = rowparts.read_in_parts
    monkeypatch.setattr(rowparts, "read_in_parts",
                        lambda *a: used.append(a) or real(*a))
    assert verify_file(path) == []
    assert used
    path.write_text(path.read_text().replace('"e2e_ms": ', '"e2e_ms": 7', 1))  # 7 before it
    found = verify_file(path)
    monkeypatch.setattr(docscan, "usable_cpus", lambda: 1)
    assert found and found == verify_file(path)


def test_a_child_that_fails_or_a_part_that_is_not_rows_gives_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _bench(tmp_path)
    start = _rows_start(path)
    real = subprocess.Popen

    def failing(cmd: list[str], **kw: Any) -> Any:
        return real([sys.executable, "-c", "import sys; sys.exit(3)"], **kw)

    monkeypatch.setattr(subprocess, "Popen", failing)
    assert rowparts.read_in_parts(path, start, 2) is None
    monkeypatch.setattr(subprocess, "Popen", real)
    text = path.read_bytes()
    at = text.rfind(b'"turn": null')
    path.write_bytes(text[:at] + b'"turn": "x" ' + text[at + len(b'"turn": null'):])
    assert rowparts.read_in_parts(path, start, 2) is None
