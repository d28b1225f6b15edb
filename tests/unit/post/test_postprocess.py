"""postprocess: a run folder's raw file becomes its `benchmark.json`, the document the
builder gives; the summary handed back is that document without its rows; a folder
without a raw file is refused, naming the file.

Why: the live run and `anvil postprocess` share this function, so a benchmark rebuilt
after a crash must be the one the run would have written.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.errors import RawFileError
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.postprocess import BENCHMARK_FILE, RAW_FILE, build_run, postprocess_run
from anvil_metrics.post.rawread import read_raw


def _run(tmp_path: Path, **params: object) -> Path:
    write_raw(tmp_path / RAW_FILE, {**HEADER, "params": {"concurrency": 1, **params}},
              [completed(0), failed(1), completed(2)],
              run_end={"finished_at": "2026-08-01T16:01:00Z"})
    return tmp_path


def test_the_written_file_is_the_built_document(tmp_path: Path) -> None:
    done = postprocess_run(_run(tmp_path))
    assert done.path == tmp_path / BENCHMARK_FILE
    written = orjson.loads(done.path.read_bytes())
    assert written == build_benchmark(read_raw(tmp_path / RAW_FILE))
    assert written["finished_at"] == "2026-08-01T16:01:00Z" and written["partial"] is False
    assert done.summary["request_timings"] == [] and done.summary["completed"] == 2
    assert done.rows is not None and len(done.rows) == 2
    assert done.cache_warning is None


def test_an_unexpected_cache_hit_is_named(tmp_path: Path) -> None:
    write_raw(tmp_path / RAW_FILE, {**HEADER, "params": {
        "prompt_sizing": {"expected_shared_tokens": 10}}},
        [completed(0, usage={"prompt_tokens": 500, "completion_tokens": 6,
                             "prompt_tokens_details": {"cached_tokens": 400}}), completed(1)])
    line = postprocess_run(tmp_path).cache_warning
    assert line is not None and line.startswith("1 of 2 requests were served partly")


def test_build_run_writes_nothing(tmp_path: Path) -> None:
    raw, built = build_run(_run(tmp_path))
    assert not (tmp_path / BENCHMARK_FILE).exists()
    assert len(raw.table) == 3 and built.doc["requests"] == 3


def test_a_folder_without_raw_records_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RawFileError, match="requests.jsonl: it does not exist; pass a run"):
        postprocess_run(tmp_path)
