"""requests.jsonl read back, damage tolerated only where a crash puts it, strict atomic writes."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.errors import RawFileError
from anvil_metrics.jsonio import atomic_write_json, dump_line, strict_json_problems
from anvil_metrics.post.rawread import read_raw


def _rec(i: int, *, warmup: bool = False, failed_: bool = False):
    return failed(i, warmup=warmup) if failed_ else completed(i, warmup=warmup)


RECORDS = [_rec(0, warmup=True), _rec(1), _rec(2, failed_=True), _rec(3)]
RUN_END = {"finished_at": "2026-08-01T16:01:42Z"}


def test_roundtrip(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    write_raw(p, HEADER, RECORDS, RUN_END)
    raw = read_raw(p)
    assert raw.records == tuple(RECORDS)
    assert raw.header == {**HEADER, "type": "run"}
    assert raw.run_end == {**RUN_END, "type": "run_end"}
    assert raw.partial is False and raw.torn_lines == 0 and raw.notes == ()
    assert [r.request_index for r in raw.measured] == [1, 2, 3]
    assert [r.request_index for r in raw.warmups] == [0]


def test_missing_run_end_is_partial(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    write_raw(p, HEADER, RECORDS)
    raw = read_raw(p)
    assert raw.partial is True and raw.run_end is None and raw.torn_lines == 0
    assert any("run_end" in n for n in raw.notes)


def test_torn_last_line_is_tolerated_and_reported(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    write_raw(p, HEADER, RECORDS)
    torn = dump_line(_rec(4).to_json_dict())[:40]  # the writer died mid-line
    with open(p, "ab") as f:
        f.write(torn)
    raw = read_raw(p)
    assert raw.partial is True and raw.torn_lines == 1
    assert raw.records == tuple(RECORDS)
    assert any("line 6" in n and "torn" in n for n in raw.notes)


def test_last_line_without_newline_but_complete_is_kept(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    write_raw(p, HEADER, RECORDS)
    with open(p, "ab") as f:
        f.write(dump_line(_rec(4).to_json_dict()).rstrip(b"\n"))
    raw = read_raw(p)
    assert raw.torn_lines == 0 and raw.records[-1] == _rec(4)


def test_malformed_middle_line_raises_naming_the_line(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    write_raw(p, HEADER, RECORDS, RUN_END)
    lines = p.read_bytes().split(b"\n")
    lines[2] = lines[2][:30]  # damaged line 3, newline intact
    p.write_bytes(b"\n".join(lines))
    with pytest.raises(RawFileError) as exc:
        read_raw(p)
    assert exc.value.line == 3
    assert f"{p}:3" in str(exc.value)


def test_torn_line_in_the_middle_is_not_tolerated(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    write_raw(p, HEADER, RECORDS[:2])
    with open(p, "ab") as f:
        f.write(dump_line(_rec(2).to_json_dict())[:25] + b"\n")  # torn, then more lines
        f.write(dump_line(_rec(3).to_json_dict()))
    with pytest.raises(RawFileError) as exc:
        read_raw(p)
    assert exc.value.line == 4


@pytest.mark.parametrize(
    ("change", "line", "words"),
    [
        (lambda d: d.update(start_ns=1.5), 2, "start_ns"),
        (lambda d: d.update(first_content_ns=d["end_ns"] + 1), 2, "out of order"),
        (lambda d: d.update(content_chunks=0), 2, "content chunks"),
        (lambda d: d.update(end_ns=None), 2, "end_ns"),
        (lambda d: d.update(type="bogus"), 2, "unknown line type"),
    ],
)
def test_invalid_records_raise(tmp_path: Path, change, line, words):
    p = tmp_path / "requests.jsonl"
    d = _rec(1).to_json_dict()
    change(d)
    p.write_bytes(dump_line({**HEADER, "type": "run"}) + dump_line(d))
    with pytest.raises(RawFileError, match=words) as exc:
        read_raw(p)
    assert exc.value.line == line


def test_header_must_come_first(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    p.write_bytes(dump_line(_rec(1).to_json_dict()))
    with pytest.raises(RawFileError, match="expected \"run\"") as exc:
        read_raw(p)
    assert exc.value.line == 1


def test_empty_and_missing_files(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    p.write_bytes(b"")
    with pytest.raises(RawFileError, match="empty"):
        read_raw(p)
    with pytest.raises(RawFileError, match="cannot open"):
        read_raw(tmp_path / "nope.jsonl")
    p.write_bytes(b'{"type": "ru')
    with pytest.raises(RawFileError, match="header itself is torn"):
        read_raw(p)


def test_duplicate_index_and_lost_records(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    write_raw(p, HEADER, [_rec(1), _rec(1)])
    with pytest.raises(RawFileError, match="already used on line 2") as exc:
        read_raw(p)
    assert exc.value.line == 3
    # A finished run whose measured indices have a gap lost records: refuse it ...
    write_raw(p, HEADER, [_rec(1), _rec(3)], RUN_END)
    with pytest.raises(RawFileError, match=r"\[2\] have no record"):
        read_raw(p)
    # ... but a crashed run may have had requests in flight that never got a line.
    write_raw(p, HEADER, [_rec(1), _rec(3)])
    assert read_raw(p).partial is True


def test_line_after_run_end_raises(tmp_path: Path):
    p = tmp_path / "requests.jsonl"
    write_raw(p, HEADER, RECORDS, RUN_END)
    with open(p, "ab") as f:
        f.write(dump_line(_rec(9).to_json_dict()))
    with pytest.raises(RawFileError, match="after the run_end") as exc:
        read_raw(p)
    assert exc.value.line == 7


# --- atomic_write_json ---------------------------------------------------------------------


def test_atomic_write_json_sorted_indented_and_strict(tmp_path: Path):
    p = tmp_path / "out.json"
    obj = {"b": 1, "a": {"d": 0.1, "c": None}, "e": [1.0, 2]}
    atomic_write_json(p, obj)
    text = p.read_bytes()
    assert orjson.loads(text) == obj
    assert text.startswith(b'{\n  "a": {\n    "c": null,\n    "d": 0.1')
    assert [x.name for x in tmp_path.iterdir()] == ["out.json"]  # no temp file left
    # Overwrite replaces, never appends.
    atomic_write_json(p, {"z": 2})
    assert orjson.loads(p.read_bytes()) == {"z": 2}
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(p).st_mode & 0o777 == 0o666 & ~umask  # as a plain open() would make it


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_atomic_write_json_refuses_non_finite(tmp_path: Path, bad: float):
    p = tmp_path / "out.json"
    atomic_write_json(p, {"ok": 1})
    with pytest.raises(ValueError, match=r"metrics\.x\[1\]"):
        atomic_write_json(p, {"metrics": {"x": [1.0, bad]}})
    assert orjson.loads(p.read_bytes()) == {"ok": 1}  # old file untouched
    assert [x.name for x in tmp_path.iterdir()] == ["out.json"]


def test_atomic_write_json_refuses_non_json_values(tmp_path: Path):
    with pytest.raises(ValueError, match="set"):
        atomic_write_json(tmp_path / "o.json", {"a": {1, 2}})
    with pytest.raises(ValueError, match="key 1"):
        atomic_write_json(tmp_path / "o.json", {1: "a"})
    assert list(tmp_path.iterdir()) == []


def _recursive_walk(obj: Any, path: str, problems: list[str]) -> None:
    """strict_json_problems' walk as it was written first, recursively: the reference."""
    where = path or "document"
    if obj is None or isinstance(obj, bool | str | int):
        return
    if isinstance(obj, float):
        if not math.isfinite(obj):
            problems.append(f"{where}: {obj!r} is not allowed in strict JSON (use null)")
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                problems.append(f"{where}: object key {key!r} is not a string")
                continue
            _recursive_walk(value, f"{path}.{key}" if path else key, problems)
        return
    if isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            _recursive_walk(value, f"{path}[{i}]", problems)
        return
    problems.append(f"{where}: {type(obj).__name__} is not a JSON type")


_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3),
                    st.floats(), st.sampled_from([frozenset(), b"x", 1j]))
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.one_of(st.text(max_size=2), st.integers(0, 3), st.none()), inner,
                    max_size=4)), max_leaves=25)


@settings(max_examples=examples(300), deadline=None)
@given(obj=_VALUES)
def test_strict_json_problems_are_the_recursive_walks_in_its_order(obj: Any) -> None:
    expected: list[str] = []
    _recursive_walk(obj, "", expected)
    assert strict_json_problems(obj) == expected


def test_strict_json_problems_of_a_document_nested_as_deep_as_orjson_reads() -> None:
    deep: Any = [math.nan]
    for _ in range(1022):
        deep = [deep]
    assert strict_json_problems({"a": deep}) == [
        "a" + "[0]" * 1023 + ": nan is not allowed in strict JSON (use null)"]
    text = b'{"a":' + b"[" * 1022 + b"[]" + b"]" * 1022 + b"}"  # orjson's deepest
    assert strict_json_problems(orjson.loads(text)) == []


def test_dump_line_refuses_nan():
    with pytest.raises(ValueError):
        dump_line({"x": math.nan})
