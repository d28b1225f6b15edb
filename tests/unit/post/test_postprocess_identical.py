"""postprocess, held to the byte: each raw run under `tests/fixtures/postprocess/` becomes
exactly the `benchmark.json` stored beside it, read in one pass or in parts, and it verifies.

Why: users compare runs made months apart, and a faster reader or writer must not move a
single digit. The fixtures are real short `anvil run`s against `anvil sim` (how each was
made: the folder's README), covering what a document can hold: failures of several kinds
and warm-ups, goodput and a server block with its samples; a distributed run whose workers'
clock offsets were measured; a stepped run; a duration run with a measured window; an open
loop; conversations; a mix; cancellations; a trace replay; a steady state judged on the
Responses API with a header; and a partial run (no `run_end`, a torn last line). The stored
bytes are what the code wrote before the typed raw reader and the faster writer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from anvil_metrics.post import rawpart
from anvil_metrics.post.benchmark import build
from anvil_metrics.post.docscan import verify_file
from anvil_metrics.post.postprocess import BENCHMARK_FILE, RAW_FILE, postprocess_run
from anvil_metrics.post.rawread import RawReader

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "postprocess"
RUNS = sorted(p.name for p in FIXTURES.iterdir() if (p / RAW_FILE).is_file())


def _inputs(name: str, into: Path) -> Path:
    """A copy of the fixture's raw inputs (not its benchmark.json) in `into`."""
    for f in (FIXTURES / name).iterdir():
        if f.name not in (BENCHMARK_FILE, "README.md"):
            shutil.copy(f, into / f.name)
    return into


def test_every_kind_of_run_is_here() -> None:
    assert len(RUNS) >= 11 and all((FIXTURES / n / BENCHMARK_FILE).is_file() for n in RUNS)


@pytest.mark.parametrize("name", RUNS)
def test_postprocess_writes_the_stored_bytes_and_they_verify(name: str, tmp_path: Path) -> None:
    done = postprocess_run(_inputs(name, tmp_path))
    assert done.path.read_bytes() == (FIXTURES / name / BENCHMARK_FILE).read_bytes()
    assert verify_file(done.path) == []


@pytest.mark.parametrize("name", RUNS)
def test_a_read_in_parts_builds_the_same_bytes(name: str, tmp_path: Path) -> None:
    """The file cut in three at line starts, each later part read as a child reads it."""
    path = _inputs(name, tmp_path) / RAW_FILE
    data = path.read_bytes()
    starts = [i + 1 for i, b in enumerate(data[:-1]) if b == 0x0A]
    cuts = sorted({starts[len(starts) // 3], starts[2 * len(starts) // 3]})
    reader = RawReader(path, columns=True)
    rawpart.read_parts(reader, cuts, read_in_process=rawpart.read_part)
    raw = reader.raw_columns()
    out = tmp_path / "parts.json"
    build(raw, (raw.run_end or {}).get("client")).write(out)
    assert out.read_bytes() == (FIXTURES / name / BENCHMARK_FILE).read_bytes()
