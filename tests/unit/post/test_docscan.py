"""docscan: a benchmark.json read without its rows gives the document, the row count and
the rows above a cached-tokens limit exactly as a whole parse does, whatever the block size;
`verify_file` gives `verify_benchmark`'s verdict of the whole document, and loads a clean
file without a problem never whole; a file not laid out as anvil writes it is parsed whole;
a bad file is named."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from anvil_metrics.errors import VerifyError
from anvil_metrics.jsonio import atomic_write_json
from anvil_metrics.post import cachecheck
from anvil_metrics.post.benchmark import build_benchmark, load_benchmark
from anvil_metrics.post.docscan import scan_benchmark, verify_file
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.verify import verify_benchmark

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "benchmark-v1.000_51f6de0d03ca0563.json"


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


@settings(max_examples=examples(40), deadline=None)
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


# -- verify_file: verify_benchmark's verdict, loading only a file with a problem whole ---------


def _built(tmp_path: Path, n: int) -> dict[str, Any]:
    """A correct document of `n` requests, built from raw records: failures, chunk-counted
    rows (no usage) and cached tokens on some."""
    header = {"type": "run", "run_id": "benchmark-20260801T160039Z",
              "started_at": "2026-08-01T16:00:39Z", "params": {}}
    lines = [orjson.dumps(header)]
    for i in range(n):
        s = 10**9 + i * 10**7
        usage = None if i % 5 == 4 else {"completion_tokens": 9 + i % 3, "prompt_tokens": 100,
                                          "prompt_tokens_details": {"cached_tokens": i % 4 * 7}}
        lines.append(orjson.dumps({
            "type": "request", "request_index": i, "warmup": False,
            "planned_context_tokens": 100, "start_ns": s, "first_output_ns": s + 10**6 + i,
            "first_content_ns": s + 2 * 10**6 + 3 * i, "end_ns": s + 9 * 10**6 + 7 * i,
            "reasoning_chunks": 3, "content_chunks": 6, "chunk_deltas_ns": [10**6] * 9,
            "chunk_channels": "rrrcccccc", "usage": usage, "finish_reason": "stop",
            "http_status": 200, "worker": None, "extra": {},
            "failure": {"kind": "truncated", "message": f"lost {i}", "phase": "decode"}
            if i % 7 == 3 else None}))
    lines.append(b'{"type":"run_end","finished_at":"2026-08-01T16:09:00Z","client":{}}')
    raw = tmp_path / f"requests-{n}.jsonl"
    raw.write_bytes(b"\n".join(lines) + b"\n")
    return build_benchmark(read_raw(raw))


def _never(path: Path) -> Any:
    raise AssertionError(f"{path} was loaded whole")


def _outcome(path: Path, block: int | None = None) -> Any:
    """verify_file's answer (its exception's text if it raises); whole: verify_benchmark of
    the whole file."""
    try:
        if block is None:
            return verify_benchmark(load_benchmark(path))
        return verify_file(path, block_bytes=block)
    except VerifyError as e:
        return str(e)


@pytest.mark.parametrize("n_rows", [0, 1, 3, 40])
@pytest.mark.parametrize("block", [1, 7, 100, 4096, 1 << 22])
def test_a_clean_file_is_verified_without_loading_it_whole(tmp_path: Path, n_rows: int,
                                                           block: int) -> None:
    doc = _built(tmp_path, n_rows)
    assert len(doc["request_timings"]) == n_rows - len(doc["failures"])
    path = tmp_path / "benchmark.json"
    atomic_write_json(path, doc)
    assert verify_benchmark(doc) == []
    assert verify_file(path, block_bytes=block, load=_never) == []


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), n=st.integers(1, 25), block=st.integers(1, 5000))
def test_an_altered_file_gets_the_whole_documents_verdict(tmp_path_factory: Any,
                                                          data: st.DataObject, n: int,
                                                          block: int) -> None:
    d = tmp_path_factory.mktemp("verify")
    doc = _built(d, n)
    rows = doc["request_timings"]
    if rows:
        row = rows[data.draw(st.integers(0, len(rows) - 1), label="row")]
        name = data.draw(st.sampled_from(sorted(row)), label="field")
        value = row[name]
        bad = data.draw(st.sampled_from(
            [None, True, -0.0, 0.0, 1, 1.0, -1, 2**53, 2**63, "x",
             math.nextafter(value, math.inf) if isinstance(value, float) else value]),
            label="value")
        action = data.draw(st.sampled_from(["set", "drop", "extra key", "none"]))
        if action == "set":
            row[name] = bad
        elif action == "drop":
            del row[name]
        elif action == "extra key":
            row["other"] = 1
    if data.draw(st.booleans(), label="alter a metric"):
        doc["metrics"]["e2e_p50_ms"] = 1.5
    path = d / "benchmark.json"
    atomic_write_json(path, doc)
    assert _outcome(path, block) == _outcome(path) == verify_benchmark(doc)


def _in_rows(text: bytes, old: bytes, new: bytes) -> bytes:
    """`text` with the first `old` in `request_timings` (after the `failures`) made `new`."""
    at = text.index(b'\n  "request_timings": [')
    return text[:at] + text[at:].replace(old, new, 1)


def _edited(tmp_path: Path, edit: Any) -> Path:
    path = tmp_path / "benchmark.json"
    atomic_write_json(path, _built(tmp_path, 9))
    text = path.read_bytes()
    path.write_bytes(edit(text))
    assert path.read_bytes() != text
    return path


@pytest.mark.parametrize("edit", [
    # a second key after the rows (a whole parse keeps it: no rows at all)
    lambda t: t[:t.rindex(b"\n}")] + b',\n  "request_timings": []\n}',
    # not JSON: a comma missing between two rows, one too many after the last
    lambda t: _in_rows(t, b"\n    },\n    {", b"\n    }\n    {"),
    lambda t: _in_rows(t, b"\n    }\n  ]", b"\n    },\n  ]"),
    # another layout of the same document, or of the same rows
    lambda t: orjson.dumps(orjson.loads(t)),
    lambda t: _in_rows(t, b"\n    },\n    {", b"\n    } ,\n    {"),
    # a row whose values the columns cannot hold
    lambda t: _in_rows(t, b'"output_tokens": 9', b'"output_tokens": 9.0'),
    # the same key spelled with an escape, after the rows (kept) or before them, the line
    # found then being another object's
    lambda t: t[:t.rindex(b"\n}")] + b',\n  "request\\u005ftimings": []\n}',
    lambda t: t[:t.rindex(b"\n}")] + b',\n  "\\u0072equest_timings": null\n}',
    lambda t: (b'{\n  "request_timing\\u0073": [],\n  "other": {' + t[1:t.rindex(b"\n}")]
               + b"}\n}"),
], ids=["second key", "missing comma", "trailing comma", "compact", "space", "float count",
        "escaped key after", "escaped key null", "escaped key before"])
@pytest.mark.parametrize("block", [1, 2, 3, 5, 8, 13, 4096])  # cuts at every place
def test_a_file_laid_out_otherwise_gets_the_whole_documents_verdict(
        tmp_path: Path, edit: Any, block: int) -> None:
    path = _edited(tmp_path, edit)
    assert _outcome(path, block) == _outcome(path)


def test_verify_file_names_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "benchmark.json"
    path.write_bytes(b'{\n  "request_timings": [\n    {\n')
    with pytest.raises(VerifyError) as e:
        verify_file(path)
    assert str(path) in str(e.value)


# --- files an earlier anvil wrote (tests/fixtures/older/README.md): still verify ---------

OLDER = Path(__file__).resolve().parents[2] / "fixtures" / "older"


@pytest.mark.parametrize("folder", sorted(p.parent for p in OLDER.glob("*/*/benchmark.json")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_file_an_earlier_anvil_wrote_verifies(folder: Path) -> None:
    doc = orjson.loads((folder / "benchmark.json").read_bytes())
    assert "steady_state" not in (doc.get("server") or {})  # truly from before
    assert verify_file(folder / "benchmark.json") == []


def test_a_member_an_older_file_holds_is_still_recomputed(tmp_path: Path) -> None:
    """Absent is allowed; present and wrong is still a mismatch."""
    src = OLDER / "073b95f" / "plain"
    for f in src.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    doc = orjson.loads((tmp_path / "benchmark.json").read_bytes())
    doc["server"]["e2e_ms_mean"] += 1.0
    (tmp_path / "benchmark.json").write_bytes(orjson.dumps(doc))
    problems = verify_file(tmp_path / "benchmark.json")
    assert any("server.e2e_ms_mean" in p for p in problems), problems
