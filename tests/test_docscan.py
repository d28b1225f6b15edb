"""docscan: a benchmark.json read without its rows gives the document, the row count and
the rows above a cached-tokens limit exactly as a whole parse does, whatever the block size;
a file not laid out as anvil writes it is parsed whole; a bad file is named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anvil_metrics import cachecheck
from anvil_metrics.docscan import scan_benchmark
from anvil_metrics.errors import VerifyError
from anvil_metrics.rawfile import atomic_write_json

EXAMPLE = Path(__file__).resolve().parent / "data" / "benchmark-v1.000_51f6de0d03ca0563.json"


def _doc(n_rows: int, cached: list[int | None]) -> dict[str, Any]:
    """The spec example with `n_rows` rows (its own, repeated) and `cached[i % len]` as
    row i's cached_tokens (None: the field absent); a failure message that looks like the
    layout's lines."""
    doc = orjson.loads(EXAMPLE.read_bytes())
    base = doc["request_timings"]
    rows = []
    for i in range(n_rows):
        row = copy.deepcopy(base[i % len(base)])
        row.pop("cached_tokens", None)
        c = cached[i % len(cached)] if cached else None
        if c is not None:
            row["cached_tokens"] = c
        rows.append(row)
    doc["request_timings"] = rows
    doc["failures"] = [{"request_index": 0, "kind": "http_error", "http_status": 500,
                        "phase": "headers",
                        "message": '\n  "request_timings": [\n    {\n      "cached_tokens": 9'
                        '\n    }\n  ]'}]
    return doc


def _expected(doc: dict[str, Any], above: int | None) -> tuple[dict, int, list]:
    rows = doc["request_timings"]
    hits = [] if above is None else [r for r in rows if (r.get("cached_tokens") or 0) > above]
    return {**doc, "request_timings": []}, len(rows), hits


@pytest.mark.parametrize("n_rows", [0, 1, 3, 40])
@pytest.mark.parametrize("block", [1, 7, 100, 4096, 1 << 22])
def test_scan_equals_a_whole_parse(tmp_path: Path, n_rows: int, block: int) -> None:
    doc = _doc(n_rows, [0, 5000, None, 64, 65])
    path = tmp_path / "benchmark.json"
    atomic_write_json(path, doc)  # the layout anvil writes (byte-equal to the column writer)
    for above in (None, 64, 4999):
        got = scan_benchmark(path, above, block_bytes=block)
        assert (got.doc, got.rows, got.cached_hits) == _expected(doc, above)


@settings(max_examples=40, deadline=None)
@given(n_rows=st.integers(0, 30), block=st.integers(1, 3000),
       cached=st.lists(st.one_of(st.none(), st.integers(0, 10**6)), max_size=7),
       above=st.one_of(st.none(), st.integers(0, 10**6)))
def test_scan_property(tmp_path_factory: Any, n_rows: int, block: int,
                       cached: list[int | None], above: int | None) -> None:
    doc = _doc(n_rows, cached)
    path = tmp_path_factory.mktemp("scan") / "benchmark.json"
    atomic_write_json(path, doc)
    got = scan_benchmark(path, above, block_bytes=block)
    assert (got.doc, got.rows, got.cached_hits) == _expected(doc, above)


def test_other_layouts_are_parsed_whole(tmp_path: Path) -> None:
    doc = _doc(5, [7000])
    path = tmp_path / "compact.json"
    path.write_bytes(orjson.dumps(doc))  # one line: no row lines to find
    got = scan_benchmark(path, 100, block_bytes=64)
    assert (got.doc, got.rows, got.cached_hits) == _expected(doc, 100)


def test_the_summary_warning_is_the_one_post_processing_gives(tmp_path: Path) -> None:
    doc = _doc(12, [0, 3000, None])
    path = tmp_path / "benchmark.json"
    atomic_write_json(path, doc)
    params = {"prompt_sizing": {"expected_shared_tokens": 40}}
    got = scan_benchmark(path, cachecheck.limit(params), block_bytes=50)
    line = cachecheck.warning_for_scan(got, params)
    assert line is not None and line == cachecheck.warning_for(doc["request_timings"], params)
    assert line.startswith("4 of 12 requests")
    quiet = {**params, "nonce_reused": True}
    assert cachecheck.limit(quiet) is None
    assert cachecheck.warning_for_scan(scan_benchmark(path, None), quiet) is None


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]",
                                     b'{\n  "request_timings": [\n    {\n'])
def test_bad_files_are_named(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "benchmark.json"
    path.write_bytes(content)
    with pytest.raises(VerifyError) as e:
        scan_benchmark(path)
    assert str(path) in str(e.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(VerifyError) as e:
        scan_benchmark(tmp_path / "nope.json")
    assert "nope.json" in str(e.value)
