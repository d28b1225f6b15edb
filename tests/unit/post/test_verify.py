"""verify: the spec example reproduces bit for bit, and any altered number is named.

The example file is read from `../shared/spec/examples/` beside the repository (override
the shared folder with ANVIL_SHARED). A property test builds documents from random raw
records and checks that they are strict JSON, verify clean, and that altering any derived
value or aggregate is reported at that field's path.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from fuzzing import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rawbuild import stamps, write_raw

from anvil_metrics import catalog
from anvil_metrics.errors import VerifyError
from anvil_metrics.jsonio import atomic_write_json, strict_json_problems
from anvil_metrics.post import stats
from anvil_metrics.post.benchmark import build_benchmark, load_benchmark
from anvil_metrics.post.derive import RowColumns, derive_columns
from anvil_metrics.post.rawread import RawRun, read_raw
from anvil_metrics.post.schema import SCHEMA, same
from anvil_metrics.post.verify import ADDED_KEYS, verify_benchmark
from anvil_metrics.records import FAILURE_KINDS, PHASES, RAW_SCHEMA, Failure, RequestRecord

DERIVED_FIELDS = [f.name for f in catalog.DERIVED]
TIMING_METHODOLOGY = catalog.timing_methodology()

SHARED = Path(os.environ.get("ANVIL_SHARED") or Path(__file__).resolve().parents[4] / "shared")
EXAMPLE_NAME = "benchmark-v1.000_51f6de0d03ca0563.json"
SHARED_EXAMPLE = SHARED / "spec/examples" / EXAMPLE_NAME
# A copy travels with the tests, so the first regression test never depends on a checkout
# beside the repository; where ../shared is present, the two must be identical.
VENDORED_EXAMPLE = Path(__file__).resolve().parents[2] / "data" / EXAMPLE_NAME


@pytest.fixture(scope="module")
def example_bytes() -> bytes:
    vendored = VENDORED_EXAMPLE.read_bytes()
    if SHARED_EXAMPLE.is_file():
        assert SHARED_EXAMPLE.read_bytes() == vendored, (
            f"{VENDORED_EXAMPLE} differs from the spec's {SHARED_EXAMPLE}: copy the spec's")
    return vendored


@pytest.fixture
def example(example_bytes: bytes) -> dict[str, Any]:
    return orjson.loads(example_bytes)


# --- the spec example ----------------------------------------------------------------------


def test_example_verifies(example):
    assert verify_benchmark(example) == []


def test_example_rows_and_metrics_reproduce_bit_exact(example):
    rows = RowColumns.from_rows(example["request_timings"])
    assert rows is not None and rows.absent == catalog.ADDED  # written before they existed
    derived = derive_columns(rows)
    for i, row in enumerate(example["request_timings"]):
        for name, column in derived.items():
            value = None if math.isnan(column[i]) else float(column[i])
            assert same(row[name], value), (row["request_index"], name)
    recomputed = stats.aggregate(rows, example["wall_clock_ms"])
    # keys added since (input_throughput_tok_s) are recomputed; the example predates them
    assert set(recomputed) - ADDED_KEYS == set(example["metrics"])
    assert set(recomputed) == stats.expected_keys(catalog.ADDED)
    for key in example["metrics"]:
        assert same(example["metrics"][key], recomputed[key]), key
    assert example["timing_methodology"] == TIMING_METHODOLOGY


def test_a_key_added_since_may_be_absent_but_not_wrong(example):
    doc = copy.deepcopy(example)
    assert "input_throughput_tok_s" not in doc["metrics"] and verify_benchmark(doc) == []
    right = stats.aggregate(RowColumns.from_rows(doc["request_timings"]),
                            doc["wall_clock_ms"])["input_throughput_tok_s"]
    assert right == doc["metrics"]["prompt_tokens"] / (doc["wall_clock_ms"] / 1000)
    doc["metrics"]["input_throughput_tok_s"] = right
    assert verify_benchmark(doc) == []
    doc["metrics"]["input_throughput_tok_s"] = right * 1.01
    assert [m for m in verify_benchmark(doc) if m.startswith("metrics.input_throughput")]


def test_example_rewrites_to_identical_bytes(example_bytes, example, tmp_path: Path):
    out = tmp_path / "b.json"
    atomic_write_json(out, example)
    assert out.read_bytes() == example_bytes
    assert verify_benchmark(load_benchmark(out)) == []


def _alterations(value: Any) -> list[tuple[str, Any]]:
    """Small wrong versions of a value: one ulp either way, ±1, null, int↔float."""
    if isinstance(value, bool):
        return [("flip", not value)]
    if isinstance(value, int):
        return [("+1", value + 1), ("-1", value - 1), ("null", None), ("float", float(value))]
    if isinstance(value, float):
        return [
            ("ulp up", math.nextafter(value, math.inf)),
            ("ulp down", math.nextafter(value, -math.inf)),
            ("null", None),
            ("int", int(value)),
        ]
    if value is None:
        return [("0.0", 0.0), ("1", 1)]
    if isinstance(value, dict):
        out: list[tuple[str, Any]] = [("null", None), ("extra key", {**value, "other": 1})]
        for k, v in value.items():
            out.append((f"{k}+1", {**value, k: v + 1}))
        return out
    if isinstance(value, str):
        return [("other", "chunks" if value != "chunks" else "usage")]
    raise AssertionError(value)


SUM_FIELDS = {"output_tokens", "prompt_tokens", "reasoning_chunks", "content_chunks"}


def _names(messages: list[str], path: str) -> bool:
    """Some message is about exactly `path`, or — for a measured base value of a row, which
    can only be caught through what it feeds — lists it as an input of a recomputed value
    of the same row, or feeds a sum of that name."""
    if any(m.startswith(f"{path}:") for m in messages):
        return True
    row = re.fullmatch(r"(request_timings\[\d+\])\.(\w+)", path)
    if row:
        prefix, field = row.groups()
        listed = re.compile(rf"(?<![\w.]){field}=")
        if any(m.startswith(f"{prefix}.") and listed.search(m) for m in messages):
            return True
        if field in SUM_FIELDS and any(m.startswith(f"metrics.{field}:") for m in messages):
            return True
    return False


def test_every_row_value_altered_is_named(example):
    missed = []
    for i, row in enumerate(example["request_timings"]):
        for field, value in row.items():
            for how, bad in _alterations(value):
                doc = copy.deepcopy(example)
                doc["request_timings"][i][field] = bad
                messages = verify_benchmark(doc)
                if not _names(messages, f"request_timings[{i}].{field}"):
                    missed.append((i, field, how, messages[:3]))
    assert missed == []


def test_every_derived_row_value_altered_is_named_at_its_own_path(example):
    for i, row in enumerate(example["request_timings"]):
        for field in (f for f in DERIVED_FIELDS if f in row):  # the example's: v1's first
            for how, bad in _alterations(row[field]):
                doc = copy.deepcopy(example)
                doc["request_timings"][i][field] = bad
                path = f"request_timings[{i}].{field}"
                messages = verify_benchmark(doc)
                assert any(m.startswith(f"{path}:") for m in messages), (path, how, messages)


def test_every_metric_altered_is_named(example):
    for key, value in example["metrics"].items():
        for how, bad in _alterations(value):
            doc = copy.deepcopy(example)
            doc["metrics"][key] = bad
            messages = verify_benchmark(doc)
            assert any(m.startswith(f"metrics.{key}:") for m in messages), (key, how, messages)


def test_counts_altered_are_named(example):
    for key in ("requests", "completed", "failed"):
        for how, bad in _alterations(example[key]):
            doc = copy.deepcopy(example)
            doc[key] = bad
            messages = verify_benchmark(doc)
            assert any(m.startswith(f"{key}:") for m in messages), (key, how, messages)


def test_wall_clock_altered_is_named(example):
    # wall_clock_ms only feeds throughput_tok_s, a division that rounds: a one-ulp change
    # of it may leave the quotient identical, so nothing could detect that. A change of a
    # few hundred ulps always shows.
    wall = example["wall_clock_ms"]
    for bad in (wall * (1 + 1e-13), wall * (1 - 1e-13), None, int(wall)):
        doc = copy.deepcopy(example)
        doc["wall_clock_ms"] = bad
        messages = verify_benchmark(doc)
        assert any(m.startswith("wall_clock_ms:") or "wall_clock_ms=" in m
                   for m in messages), (bad, messages)
    doc = copy.deepcopy(example)
    doc["wall_clock_ms"] = example["request_timings"][7]["e2e_ms"] / 2
    assert any(m.startswith("wall_clock_ms:") and "shorter" in m for m in verify_benchmark(doc))


def test_non_finite_values_are_named(example):
    doc = copy.deepcopy(example)
    doc["request_timings"][2]["decode_tok_s"] = math.nan
    doc["metrics"]["throughput_tok_s"] = math.inf
    messages = verify_benchmark(doc)
    assert any(m.startswith("request_timings[2].decode_tok_s:") and "strict JSON" in m
               for m in messages)
    assert any(m.startswith("metrics.throughput_tok_s:") and "strict JSON" in m
               for m in messages)


def test_structure_problems_are_named(example):
    doc = copy.deepcopy(example)
    doc["schema"] = "anvil-serving.benchmark/v2"
    del doc["model"]
    doc["metrics"]["ttft_p99_ms"] = 1.0
    doc["request_timings"][1]["cached_tokens"] = None
    doc["request_timings"][4]["surprise"] = 1
    doc["run_id"] = "run-1"
    messages = verify_benchmark(doc)
    for start in ("schema:", "model: missing", "metrics.ttft_p99_ms: unknown",
                  "request_timings[1].cached_tokens:", "request_timings[4].surprise: unknown",
                  "run_id:"):
        assert any(m.startswith(start) for m in messages), (start, messages)


def test_index_problems_are_named(example):
    doc = copy.deepcopy(example)
    doc["request_timings"][3], doc["request_timings"][4] = (
        doc["request_timings"][4], doc["request_timings"][3])
    assert any(m.startswith("request_timings[4].request_index:") and "sorted" in m
               for m in verify_benchmark(doc))
    doc = copy.deepcopy(example)
    doc["failures"].append({"request_index": 5, "kind": "timeout", "http_status": None,
                            "message": "x", "phase": "decode"})
    doc["failed"], doc["requests"] = 1, 13
    messages = verify_benchmark(doc)
    assert any(m.startswith("failures[0].request_index: 5 is also used by request_timings[5]")
               for m in messages), messages
    assert any(m.startswith("request_index: [12] missing") for m in messages), messages


def test_failure_fields_of_the_wrong_type_are_named(example):
    """A failure against its definition (`schema.Failure`, the raw reader's `records.Failure`
    in a benchmark's words), each field named at its path."""
    doc = copy.deepcopy(example)
    doc["failures"].append({"request_index": 12, "kind": "bogus", "http_status": "500",
                            "message": 5, "phase": "x"})
    doc["failed"], doc["requests"] = 1, 13
    messages = verify_benchmark(doc)
    for start in ('failures[0].kind: expected one of "aborted", ',
                  "failures[0].message: expected a string, file has 5",
                  "failures[0].http_status: expected an integer or null, file has \"500\"",
                  'failures[0].phase: expected one of "connect", '):
        assert any(m.startswith(start) for m in messages), (start, messages)
    doc["failures"][0].update(kind="timeout", http_status=None, message="m", phase=None)
    assert verify_benchmark(doc) == []


def test_run_id_may_carry_the_recorders_uniqueness_suffix(example):
    doc = copy.deepcopy(example)
    doc["run_id"] = "benchmark-20260801T160039Z-2"
    assert verify_benchmark(doc) == []
    doc["run_id"] = "benchmark-20260801T160039Z-0"
    assert [m for m in verify_benchmark(doc) if m.startswith("run_id:")]


@pytest.mark.parametrize("key", ["model", "engine", "gpu", "tier", "manifest",
                                 "source_recipe", "base_url", "measurement_protocol",
                                 "run_nonce"])
@pytest.mark.parametrize("value", [5, ["sglang"], {"name": "x"}, True])
def test_text_run_fields_must_be_strings_or_null(example, key: str, value: Any):
    doc = copy.deepcopy(example)
    doc[key] = value
    messages = verify_benchmark(doc)
    assert any(m.startswith(f"{key}: expected a string or null") for m in messages), messages
    doc[key] = None
    assert verify_benchmark(doc) == []


@pytest.mark.parametrize("url", ["http://alice:s3cr3t@127.0.0.1:8000/v1",
                                 "https://tok3n@gpu-box/v1", "alice:s3cr3t@127.0.0.1:8000/v1"])
def test_a_base_url_with_credentials_is_named_without_showing_them(example, url: str):
    doc = copy.deepcopy(example)
    doc["base_url"] = url
    messages = verify_benchmark(doc)
    assert [m for m in messages if m.startswith("base_url: holds credentials")], messages
    assert not any("s3cr3t" in m or "tok3n" in m for m in messages)


def test_not_a_document():
    assert verify_benchmark([]) == ["document: expected a JSON object, got list"]


def test_load_benchmark_refuses_nan(tmp_path: Path):
    p = tmp_path / "b.json"
    p.write_text('{"wall_clock_ms": NaN}')
    with pytest.raises(VerifyError, match="not strict JSON"):
        load_benchmark(p)
    with pytest.raises(VerifyError, match="does not exist"):
        load_benchmark(tmp_path / "missing.json")


# --- build_benchmark -----------------------------------------------------------------------

HEADER = {
    "schema": RAW_SCHEMA,
    "run_id": "benchmark-20260801T160039Z",
    "started_at": "2026-08-01T16:00:39Z",
    "wall_anchor_ns": 1_785_600_039_000_000_000,
    "perf_anchor_ns": 5_000_000_000,
    "params": {
        "measurement_protocol": "capacity-v4",
        "concurrency": 2,
        "context_distribution": {"128": 4},
        "model": "m",
        "base_url": "http://user:secret@127.0.0.1:8000/v1",
        "serve_flags": {"no_thinking": False, "reasoning_effort": None,
                        "shared_prefix_burst": False, "thinking_mode": "default"},
        "prompt_calibration": {"method": "probe", "planned_vs_counted_error_pct_max": 0.5},
    },
}


def _ok(i: int, start: int, *, warmup: bool = False, tokens: int | None = 6) -> RequestRecord:
    return RequestRecord(
        request_index=i, start_ns=start, first_output_ns=start + 100_000_000,
        first_content_ns=start + 200_000_000, end_ns=start + 600_000_000, warmup=warmup,
        planned_context_tokens=128, reasoning_chunks=2, content_chunks=3,
        usage=None if tokens is None else {"prompt_tokens": 140, "completion_tokens": tokens},
    )


def _failed(i: int, start: int) -> RequestRecord:
    return RequestRecord(
        request_index=i, start_ns=start, end_ns=None, planned_context_tokens=128,
        failure=Failure(kind="connection", message="refused", phase="connect"),
    )


def _raw(records, run_end=None, header=HEADER) -> RawRun:
    return RawRun(header=header, records=tuple(records), run_end=run_end,
                  partial=run_end is None)


def test_build_excludes_warmups_and_renumbers_densely():
    s = 5_000_000_000
    records = [
        _ok(0, s, warmup=True), _ok(1, s + 10**9, warmup=True),
        _ok(2, s + 2 * 10**9), _ok(3, s + 2 * 10**9 + 1, tokens=None),
        _failed(4, s + 3 * 10**9), _ok(5, s + 4 * 10**9),
    ]
    doc = build_benchmark(_raw(records, {"finished_at": "2026-08-01T16:01:00Z"}))
    assert verify_benchmark(doc) == []
    assert [r["request_index"] for r in doc["request_timings"]] == [0, 1, 3]
    assert doc["failures"] == [{"request_index": 2, "kind": "connection",
                                "http_status": None, "message": "refused",
                                "phase": "connect"}]
    assert (doc["requests"], doc["completed"], doc["failed"]) == (4, 3, 1)
    assert doc["warmup_requests"] == 2
    # first measured start → last measured end, warm-ups not included
    assert doc["wall_clock_ms"] == (s + 4 * 10**9 + 600_000_000 - (s + 2 * 10**9)) / 1e6
    assert doc["request_timings"][1]["output_token_source"] == "chunks"
    assert doc["metrics"]["output_token_sources"] == {"chunks": 1, "usage": 2}
    assert doc["base_url"] == "http://127.0.0.1:8000/v1"
    assert doc["finished_at"] == "2026-08-01T16:01:00Z" and doc["partial"] is False
    assert doc["schema"] == SCHEMA and doc["timing_methodology"] == TIMING_METHODOLOGY
    assert doc["gpu"] is None and doc["client"] is None
    assert strict_json_problems(doc) == []


def test_build_partial_run_places_finished_at_with_the_anchors():
    s = 5_000_000_000  # = perf_anchor_ns, i.e. wall 16:00:39 exactly
    doc = build_benchmark(_raw([_ok(0, s + 62 * 10**9)]))
    # last end = anchor + 62.6 s → 16:01:41.6 → floored to the second
    assert doc["finished_at"] == "2026-08-01T16:01:41Z"
    assert doc["partial"] is True


def test_build_client_block():
    doc = build_benchmark(_raw([_ok(0, 10**9)]), {"cpu_pct": 12.5, "saturated": False})
    assert doc["client"] == {"loop_lag_ms": None, "cpu_pct": 12.5,
                             "achieved_concurrency": 1.0, "saturated": False, "verdict": "ok",
                             "start_delay_ms": None}
    # figures without a verdict (an older raw file): the verdict is derived from them
    doc = build_benchmark(_raw([_ok(0, 10**9), _ok(1, 10**9)]),
                          {"cpu_pct": 95.0, "loop_lag_ms": {"p50": 1.0, "p99": 2.0}})
    assert doc["client"]["saturated"] is True and "CPU 95 %" in doc["client"]["verdict"]


_LAG = {"p50": 0.2, "p99": 1.5, "max": 9.0, "samples": 900, "over_5ms": 2}


@pytest.mark.parametrize("client", [
    None,
    {"loop_lag_ms": _LAG, "cpu_pct": 40.0, "saturated": False, "verdict": "ok"},
    {"loop_lag_ms": {**_LAG, "p99": 12.0, "max": 30.0}, "cpu_pct": 40.0, "saturated": True,
     "verdict": "saturated: event-loop lag p99 12.0 ms > 10 ms"},
    {"loop_lag_ms": _LAG, "cpu_pct": 91, "saturated": True,  # a distributed run's text
     "verdict": "saturated: worker w2: CPU 91 % of one core > 90 %"},
    {"loop_lag_ms": {"p50": None, "p99": None, "max": None, "samples": 0, "over_5ms": 0},
     "cpu_pct": None, "saturated": None, "verdict": "not measured"},
    {"cpu_pct": 10.0},  # an older raw file's figures: the verdict is derived from them
    {"loop_lag_ms": {**_LAG, "max_at_s": 2.5, "stalls": [[2.5, 9.0]]}, "cpu_pct": 5.0,
     "saturated": False, "verdict": "ok", "load_s": 3.0, "cpu_s": 0.15},  # as run_end has it
])
def test_client_blocks_anvil_builds_verify(client):
    doc = build_benchmark(_raw([_ok(0, 10**9), _ok(1, 2 * 10**9)]), client)
    assert verify_benchmark(doc) == []


@pytest.mark.parametrize(("change", "path", "words"), [
    (lambda c: c.update(saturated=True), "client.saturated", "give false"),
    (lambda c: c.update(saturated=None), "client.saturated", "give false"),
    (lambda c: c.update(cpu_pct=95.0), "client.saturated", "give true"),
    (lambda c: c["loop_lag_ms"].update(p99=10.5), "client.saturated", "give true"),
    (lambda c: c.update(saturated="no"), "client.saturated", "expected true, false or null"),
    (lambda c: c.update(verdict="fine"), "client.verdict", "does not say"),
    (lambda c: c.update(verdict=7), "client.verdict", "expected a string or null"),
    (lambda c: c.update(cpu_pct=-1.0), "client.cpu_pct", "non-negative number"),
    (lambda c: c.update(cpu_pct=True), "client.cpu_pct", "non-negative number"),
    (lambda c: c.update(achieved_concurrency="2"), "client.achieved_concurrency", "number"),
    (lambda c: c.pop("achieved_concurrency"), "client.achieved_concurrency", "missing"),
    (lambda c: c.pop("loop_lag_ms"), "client.loop_lag_ms", "missing"),
    (lambda c: c.update(loop_lag_ms=[1.0]), "client.loop_lag_ms", "expected an object"),
    (lambda c: c["loop_lag_ms"].update(p50=2.0), "client.loop_lag_ms", "does not hold"),
    (lambda c: c["loop_lag_ms"].update(max="9"), "client.loop_lag_ms.max", "number"),
    (lambda c: c.update(start_delay_ms={"p50": 1.0, "p99": 0.5, "max": 2.0}),
     "client.start_delay_ms", "does not hold"),
    (lambda c: c.update(start_delay_ms={"p50": None, "p99": "x", "max": 2.0}),
     "client.start_delay_ms.p99", "a number"),
    (lambda c: c.update(loop_lag_ms={}), "client.loop_lag_ms.p50", "missing"),
    (lambda c: c.update(start_delay_ms={"p50": 1.0}), "client.start_delay_ms.max", "missing"),
    (lambda c: c.update(start_delay_ms={"p50": 1.0}), "client.start_delay_ms.p99", "missing"),
    (lambda c: c.update(extra=1), "client.extra", "unknown field"),
    (lambda c: c["loop_lag_ms"].update(note="x"), "client.loop_lag_ms.note", "unknown field"),
    (lambda c: c["loop_lag_ms"].update(samples=-1), "client.loop_lag_ms.samples", "integer"),
    (lambda c: c["loop_lag_ms"].update(stalls=[[1.0]]), "client.loop_lag_ms.stalls[0]",
     "a pair"),
    (lambda c: c["loop_lag_ms"].update(max_at_s="x"), "client.loop_lag_ms.max_at_s", "number"),
])
def test_client_block_altered_is_named(change, path, words):
    """The `client` block is the run's verdict on its own generator: a hand-edited or
    corrupt one is named, as any other figure is."""
    doc = build_benchmark(_raw([_ok(0, 10**9), _ok(1, 2 * 10**9)]),
                          {"loop_lag_ms": dict(_LAG), "cpu_pct": 40.0, "saturated": False,
                           "verdict": "ok"})
    assert verify_benchmark(doc) == []
    change(doc["client"])
    problems = verify_benchmark(doc)
    assert any(p.startswith(path + ":") and words in p for p in problems), problems


def test_a_huge_value_is_shown_cut_short():
    doc = build_benchmark(_raw([_ok(0, 10**9)]), {"cpu_pct": 10.0})
    doc["client"]["verdict"] = "x" * 1_000_000
    problems = verify_benchmark(doc)
    assert any(p.startswith("client.verdict:") for p in problems), problems
    assert max(len(p) for p in problems) < 400


@pytest.mark.parametrize("client", [[1], "ok", 3])
def test_client_block_must_be_an_object_or_null(client):
    doc = build_benchmark(_raw([_ok(0, 10**9)]))
    doc["client"] = client
    assert [p for p in verify_benchmark(doc) if p.startswith("client:")] == [
        f"client: expected an object or null, file has {json.dumps(client)}"]


def test_build_refuses_what_it_cannot_verify():
    header = {**HEADER, "run_id": "my-run"}
    with pytest.raises(VerifyError, match="run_id"):
        build_benchmark(_raw([_ok(0, 10**9)], header=header))


def test_wall_clock_definition():
    def wall(records):
        return build_benchmark(_raw(records, header={**HEADER, "params": {}}))["wall_clock_ms"]

    assert wall([]) is None
    assert wall([_failed(0, 7_000_000)]) == 0.0  # a failure without an end: its start
    assert wall([_ok(0, 1_000_000), _failed(1, 9_000_000)]) == 600.0


# --- the property: random runs build, verify, and catch any altered value ------------------

_DUR = st.one_of(st.sampled_from([0, 1, 1_000_000, 7_777_777]), st.integers(0, 5 * 10**10))
_COUNT = st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 5000))

_RECORD_PARTS = st.fixed_dictionaries(
    {
        "failed": st.integers(0, 6).map(lambda x: x == 0),
        "warmup": st.integers(0, 9).map(lambda x: x == 0),
        "start": st.one_of(st.just(0), st.integers(0, 10**11)),
        "ttfo": _DUR, "to_content": _DUR, "to_end": _DUR,
        "output": st.sampled_from(["none", "reasoning", "content", "both"]),
        "reasoning_chunks": st.integers(1, 400), "content_chunks": st.integers(1, 400),
        "usage": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "completion_tokens": _COUNT,
                    "prompt_tokens": _COUNT,
                    "prompt_tokens_details": st.fixed_dictionaries(
                        {}, optional={"cached_tokens": _COUNT}),
                },
            ),
        ),
        "planned": st.sampled_from([128, 4096, 30720]),
        # "aborted" only in a run with a [cancel] plan (post/cancelblock.py checks so)
        "kind": st.sampled_from([k for k in FAILURE_KINDS if k != "aborted"]),
        "phase": st.one_of(st.none(), st.sampled_from(PHASES)),
        "status": st.one_of(st.none(), st.sampled_from([429, 500, 503])),
    }
)


def _assemble(parts: dict[str, Any], index: int, base_ns: int) -> RequestRecord:
    start = base_ns + parts["start"]
    reasoning, content, first_output, first_content, end = stamps(parts, start)
    failure = None
    if parts["failed"]:
        failure = Failure(kind=parts["kind"], message="boom", http_status=parts["status"],
                          phase=parts["phase"])
    return RequestRecord(
        request_index=index, start_ns=start, end_ns=end, first_output_ns=first_output,
        first_content_ns=first_content, warmup=parts["warmup"],
        planned_context_tokens=parts["planned"], reasoning_chunks=reasoning,
        content_chunks=content, usage=parts["usage"], failure=failure,
    )


@st.composite
def raw_runs(draw) -> RawRun:
    parts = draw(st.lists(_RECORD_PARTS, min_size=1, max_size=60))
    parts.sort(key=lambda p: not p["warmup"])  # warm-ups run first, sharing the counter
    base_ns = draw(st.one_of(st.just(0), st.integers(0, 2**62 - 10**12)))  # stamps < 2**62
    records = [_assemble(p, i, base_ns) for i, p in enumerate(parts)]
    measured = [r for r in records if not r.warmup]
    finished = draw(st.booleans())
    params: dict[str, Any] = {"concurrency": draw(st.integers(1, 64))}
    if draw(st.booleans()):
        params["context_distribution"] = {
            str(k): v for k, v in Counter(r.planned_context_tokens for r in measured).items()
        }
    header = {
        "type": "run", "schema": RAW_SCHEMA, "run_id": "benchmark-20260801T160039Z",
        "started_at": "2026-08-01T16:00:39Z", "params": params,
        "wall_anchor_ns": 1_785_600_039_000_000_000, "perf_anchor_ns": base_ns,
    }
    run_end = {"type": "run_end", "finished_at": "2026-08-01T16:09:00Z"} if finished else None
    return RawRun(header=header, records=tuple(records), run_end=run_end,
                  partial=not finished)


def _targets(doc: dict[str, Any]) -> list[tuple[str, list[Any], Any]]:
    """(path, container, key) of every derived row value and every aggregate."""
    out: list[tuple[str, Any, Any]] = []
    for i, row in enumerate(doc["request_timings"]):
        for field in DERIVED_FIELDS:
            out.append((f"request_timings[{i}].{field}", row, field))
    for key in doc["metrics"]:
        out.append((f"metrics.{key}", doc["metrics"], key))
    return out


def _strict_loads(text: bytes) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(f"non-strict JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=raw_runs(), data=st.data())
def test_random_runs_build_verify_and_catch_alterations(raw: RawRun, data: st.DataObject):
    doc = build_benchmark(raw)

    # strict JSON, and what is written is what verifies
    assert strict_json_problems(doc) == []
    text = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    assert same(_strict_loads(text), doc)
    assert verify_benchmark(doc) == []
    assert verify_benchmark(orjson.loads(text)) == []

    measured = [r for r in raw.records if not r.warmup]
    assert doc["requests"] == len(measured)
    assert doc["completed"] == sum(r.ok for r in measured) == len(doc["request_timings"])
    assert doc["warmup_requests"] == len(raw.records) - len(measured)
    indices = sorted([r["request_index"] for r in doc["request_timings"]]
                     + [f["request_index"] for f in doc["failures"]])
    assert indices == list(range(len(measured)))

    path, container, key = data.draw(st.sampled_from(_targets(doc)), label="target")
    value = container[key]
    choices = _alterations(value)
    _, bad = data.draw(st.sampled_from(choices), label="alteration")
    altered = copy.deepcopy(doc)
    # find the same container in the copy
    if path.startswith("metrics."):
        altered["metrics"][key] = bad
    else:
        i = int(path[path.index("[") + 1: path.index("]")])
        altered["request_timings"][i][key] = bad
    messages = verify_benchmark(altered)
    assert any(m.startswith(f"{path}:") for m in messages), (path, value, bad, messages)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=raw_runs())
def test_random_runs_roundtrip_through_files(raw: RawRun):
    with tempfile.TemporaryDirectory() as d:
        raw_path = Path(d) / "requests.jsonl"
        write_raw(raw_path, raw.header, raw.records, raw.run_end)
        back = read_raw(raw_path)
        assert back.records == raw.records and back.partial == raw.partial
        doc = build_benchmark(back)
        out = Path(d) / "benchmark.json"
        atomic_write_json(out, doc)
        assert verify_benchmark(load_benchmark(out)) == []
        assert same(load_benchmark(out), doc)
