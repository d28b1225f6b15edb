"""The benchmark/v1 document: build it from raw records, and verify one from its own rows.

Why build and verify live together: a benchmark file is only worth promoting a model on if
every number in it follows from its rows by the spec's definitions. `build_benchmark`
derives rows with `derive.py` and aggregates with `stats.py`; `verify_benchmark` recomputes
every derived row value and every aggregate with those same functions from the file's
`request_timings` and `wall_clock_ms` and compares with exact equality (floats bit for bit,
int vs float and null vs value are mismatches). `build_benchmark` runs `verify_benchmark`
on its own output before returning it, so anvil never hands out a document it cannot verify.

Large runs: `build_benchmark_columns` builds the same document from `rawfile.scan_raw`'s
columns and keeps its rows as columns (`BuiltBenchmark`), written a batch at a time; and
`verify_benchmark` checks plainly typed rows as columns first (`_clean`), falling back to
the row-by-row checks (`_verify_rows`) for the messages whenever that finds anything.
`build_benchmark` and `_verify_rows` are the definitions; tests/test_columns.py holds the
column forms to them, byte for byte and message for message.

What verify can and cannot prove: base values of a row (`e2e_ms`, `ttft_ms`,
`time_to_first_output_ms`, counts) were measured, not derived, so a changed base value shows
up as disagreement with the values derived from it (the message lists the base inputs) or
with a sum over rows, never as a wrong value on its own. A base value with nothing derived
from it in its row (e.g. `e2e_ms` of a request that produced no output) can be checked only
through the aggregates and invariants (ordering of the stamps, `wall_clock_ms ≥ e2e_ms`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson

from anvil_metrics import derive, saturation, stats
from anvil_metrics.errors import VerifyError
from anvil_metrics.rawfile import (
    JSON_OPTIONS,
    NULL,
    RAW_COLUMNS,
    RawColumns,
    RawRun,
    atomic_write_bytes,
    dumps_strict,
    show,
    strict_json_problems,
)
from anvil_metrics.records import RequestRecord, failure_field_problems
from anvil_metrics.urls import strip_credentials

SCHEMA = "anvil-serving.benchmark/v1"

# Copied verbatim from the spec example: the definitions the numbers were computed with.
TIMING_METHODOLOGY: dict[str, str] = {
    "clock": "client time.perf_counter",
    "decode": (
        "usage completion tokens after the first token divided by client-observed generation "
        "time; completion tokens may include reasoning tokens"
    ),
    "effective_prefill": (
        "usage.prompt_tokens divided by client-observed time to first output; includes "
        "queueing, scheduling, prefill, and first-token work"
    ),
    "generation": "client-observed E2E minus time to first output",
    "mean_inter_token_latency": (
        "client-observed generation time divided by completion tokens after the first token; "
        "not a raw per-token timestamp trace"
    ),
    "time_to_first_output": (
        "request start through the first non-empty streamed reasoning or content delta"
    ),
    "ttft": "request start through the first non-empty streamed content delta",
}

# Run parameters copied from the raw header's `params` (missing → null).
PARAM_KEYS = (
    "measurement_protocol",
    "concurrency",
    "context_tokens",
    "max_context_tokens",
    "context_distribution",
    "context_seed",
    "max_tokens",
    "model",
    "engine",
    "gpu",
    "tier",
    "manifest",
    "source_recipe",
    "base_url",
    "serve_flags",
    "run_nonce",
    "prompt_calibration",
    "shared_prefix",
)

# Top-level fields every benchmark/v1 file has (the spec's "Run fields" plus the row list
# and the metrics block). The fields anvil adds are optional in a file but always written.
REQUIRED_FIELDS = frozenset(
    {
        "schema", "run_id", "started_at", "finished_at", "wall_clock_ms", "requests",
        "completed", "failed", "failures", "concurrency", "context_tokens",
        "max_context_tokens", "context_distribution", "context_seed", "max_tokens", "model",
        "engine", "gpu", "tier", "manifest", "source_recipe", "base_url",
        "measurement_protocol", "serve_flags", "timing_methodology", "request_timings",
        "metrics",
    }
)
# Run fields that are names or texts: a string, or null when unknown (as in the example).
TEXT_FIELDS = ("model", "engine", "gpu", "tier", "manifest", "source_recipe", "base_url",
               "measurement_protocol", "run_nonce")
FAILURE_FIELDS = ("request_index", "kind", "http_status", "message", "phase")
CALIBRATION_METHODS = ("tokenize", "probe", "local_tokenizer", "none")
CLIENT_KEYS = ("loop_lag_ms", "cpu_pct", "achieved_concurrency", "saturated", "verdict",
               "start_delay_ms")
CLIENT_SPEC_KEYS = CLIENT_KEYS[:4]  # the spec's `client` fields; the other two are anvil's

# The spec's `benchmark-YYYYMMDDTHHMMSSZ`; the recorder appends `-2`, `-3`, … when two runs
# start in the same second, to keep run ids unique as the spec also requires.
_RUN_ID = re.compile(r"benchmark-\d{8}T\d{6}Z(-[1-9]\d*)?")
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


# --- build ---------------------------------------------------------------------------------


def wall_clock_ms(records: Sequence[RequestRecord],
                  offsets_ns: Mapping[str, int] | None = None) -> float | None:
    """Monotonic duration of the measured run, ms: `(max end − min start) / 1e6`.

    Over the measured (non-warm-up) records, completed and failed: from the moment the first
    of them was written to the socket to the moment the last of them finished or failed. A
    failure without an `end_ns` contributes its `start_ns`. Gaps between requests are
    included (with 12 sequential requests it is a little more than the sum of their
    `e2e_ms`); warm-ups are not. None when there are no measured records.

    In a distributed run (`offsets_ns`: worker -> offset of its clock to the master's) each
    record's stamps are first placed on the master's clock; the offset is exactly 0 for
    workers on the master's kernel, so the figure is then as exact as a single process's.
    """
    if not records:
        return None
    offsets = offsets_ns or {}

    def off(r: RequestRecord) -> int:
        return offsets.get(r.worker, 0) if r.worker is not None else 0

    first = min(r.start_ns + off(r) for r in records)
    last = max((r.start_ns if r.end_ns is None else r.end_ns) + off(r) for r in records)
    return derive.duration_ms(first, last)


def _utc_stamp(wall_ns: int) -> str:
    """`YYYY-MM-DDTHH:MM:SSZ` of a `time.time_ns()` value (floored to the second)."""
    dt = datetime.fromtimestamp(wall_ns // 1_000_000_000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def finished_at(raw: RawRun) -> str | None:
    """When the run ended, as UTC `…Z`: the `run_end` line's `finished_at` if the run
    finished; otherwise the wall time of the last stamp in any record, placed with the
    header's clock anchors (`wall_anchor_ns + (stamp − perf_anchor_ns)`). None when neither
    is known."""
    if raw.run_end is not None and isinstance(raw.run_end.get("finished_at"), str):
        return raw.run_end["finished_at"]
    wall0, perf0 = raw.header.get("wall_anchor_ns"), raw.header.get("perf_anchor_ns")
    if wall0 is None or perf0 is None or not raw.records:
        return None
    offsets = raw.clock_offsets_ns()  # workers' stamps onto the header's (master's) clock
    last = max((r.start_ns if r.end_ns is None else r.end_ns)
               + (offsets.get(r.worker, 0) if r.worker is not None else 0)
               for r in raw.records)
    return _utc_stamp(wall0 + (last - perf0))


def redact_url(url: Any) -> Any:
    """`url` without `user:password@` (the spec: "with any credentials removed")."""
    return strip_credentials(url) if isinstance(url, str) else url


def _client_block(client: Mapping[str, Any] | None,
                  figures: Callable[[], tuple[float | None, dict[str, Any] | None]]
                  ) -> dict[str, Any] | None:
    """The `client` health block: the load generator's own figures from the raw `run_end`
    (loop lag, CPU, the saturation verdict; missing keys → null) and, from the records,
    `achieved_concurrency` and `start_delay_ms` (`figures()`; see `saturation.py`)."""
    if client is None:
        return None
    block = {key: client.get(key) for key in CLIENT_KEYS}
    lag = block["loop_lag_ms"]
    if isinstance(lag, dict):  # the spec's {p50, p99, max}, a missing one null
        block["loop_lag_ms"] = {"p50": None, "p99": None, "max": None, **lag}
    if block["saturated"] is None:  # figures from before the verdict existed
        sat, reasons = saturation.health_verdict(client)
        block["saturated"], block["verdict"] = sat, saturation.verdict_text(sat, reasons)
    elif block["verdict"] is None:
        block["verdict"] = saturation.verdict_text(block["saturated"], [])
    block["achieved_concurrency"], block["start_delay_ms"] = figures()
    return block


def build_benchmark(raw: RawRun, client: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The full benchmark/v1 document of a run read back from its `requests.jsonl`.

    - Run parameters come from the header's `params` (keys named as the spec's fields;
      missing → null); `run_id` and `started_at` from the header; `finished_at` see
      `finished_at()`; `base_url` loses any credentials.
    - Warm-up records are left out of rows, failures and counts; `warmup_requests` is how
      many the raw file holds.
    - `request_index` is renumbered densely from 0 in the order of the raw indices of the
      measured records (identical to the raw index when warm-ups have their own counter;
      shifted down when they share it; in a partial run, requests that never got a record
      are not counted as issued).
    - `client` (generator-health figures from the raw `run_end` line), if given, supplies
      the `client` block ({loop_lag_ms, cpu_pct, achieved_concurrency, saturated}).

    Raises VerifyError if the document does not verify (a bug, or raw data that breaks an
    invariant): anvil does not hand out numbers it cannot reproduce.
    """
    measured = sorted(raw.measured, key=lambda r: r.request_index)
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for new_index, rec in enumerate(measured):
        if rec.ok:
            rows.append(derive.timing_from_record(rec, request_index=new_index).to_dict())
        else:
            assert rec.failure is not None
            failures.append(
                {
                    "request_index": new_index,
                    "kind": rec.failure.kind,
                    "http_status": (
                        rec.failure.http_status
                        if rec.failure.http_status is not None
                        else rec.http_status
                    ),
                    "message": rec.failure.message,
                    "phase": rec.failure.phase,
                }
            )
    wall = wall_clock_ms(measured, raw.clock_offsets_ns())
    doc = _document(
        raw.header, finished=finished_at(raw), partial=raw.partial, wall=wall,
        requests=len(measured), completed=len(rows), failures=failures,
        warmups=len(raw.warmups),
        client=_client_block(client, lambda: (saturation.achieved_concurrency(measured, wall),
                                              saturation.start_delay_ms(measured))),
        rows=rows, metrics=stats.aggregate(rows, wall),
        calibration_error=lambda: stats.planned_vs_counted_error_pct_max(rows),
    )
    problems = verify_benchmark(doc)
    if problems:
        raise VerifyError(problems, source=f"benchmark built from {raw.path or 'raw records'}")
    return doc


def _document(header: Mapping[str, Any], *, finished: str | None, partial: bool,
              wall: float | None, requests: int, completed: int,
              failures: list[dict[str, Any]], warmups: int, client: dict[str, Any] | None,
              rows: Any, metrics: dict[str, Any],
              calibration_error: Any) -> dict[str, Any]:
    """The document's fields, in the order every builder writes them (`rows` is the value of
    `request_timings`; `calibration_error()` gives the measured
    `prompt_calibration.planned_vs_counted_error_pct_max`)."""
    params = header.get("params") or {}
    doc: dict[str, Any] = {"schema": SCHEMA}
    doc.update({key: params.get(key) for key in PARAM_KEYS})
    doc["base_url"] = redact_url(doc["base_url"])
    doc.update(
        {
            "run_id": header["run_id"],
            "started_at": header["started_at"],
            "finished_at": finished,
            "partial": partial,
            "wall_clock_ms": wall,
            "requests": requests,
            "completed": completed,
            "failed": len(failures),
            "failures": failures,
            "warmup_requests": warmups,
            "client": client,
            "timing_methodology": dict(TIMING_METHODOLOGY),
            "request_timings": rows,
            "metrics": metrics,
        }
    )
    calib = doc.get("prompt_calibration")
    if isinstance(calib, dict):  # the method is the run's; the error is measured, from rows
        doc["prompt_calibration"] = {
            **calib,
            "planned_vs_counted_error_pct_max": calibration_error(),
        }
    return doc


# --- build, for a run of any size ------------------------------------------------------------
#
# `anvil postprocess` reads the raw file as columns (`rawfile.scan_raw`) and builds the same
# document with the column forms of the formulas (`derive.derive_columns`,
# `stats.aggregate_columns`), then writes its rows a batch at a time: a million rows never
# exist as a million Python dicts. `build_benchmark` above is the definition this must equal,
# value for value and byte for byte once written (tests/test_columns.py).

ROW_BATCH = 1024  # rows turned into JSON at a time (small batches stay in the CPU caches)


class BuiltBenchmark:
    """A benchmark document whose `request_timings` are held as columns (`rows`);
    `doc["request_timings"]` is an empty placeholder. `to_dict()` gives the plain document;
    `write(path)` writes it as `atomic_write_json` would, without building it whole."""

    def __init__(self, doc: dict[str, Any], rows: derive.RowColumns) -> None:
        self.doc = doc
        self.rows = rows

    def to_dict(self) -> dict[str, Any]:
        return {**self.doc, "request_timings": self.rows.row_dicts()}

    def write(self, path: str | Path) -> None:
        atomic_write_bytes(path, self._json_chunks())

    def _json_chunks(self) -> Iterator[bytes]:
        """`dumps_strict(self.to_dict(), option=JSON_OPTIONS)`, in pieces: the document
        around an empty `request_timings`, then the rows a batch at a time."""
        rows = self.rows
        for name, column in rows.floats.items():  # NaN is null; ±inf cannot be written
            if np.isinf(column).any():
                raise ValueError(f"refusing to write non-strict JSON: request_timings "
                                 f"{name} holds ±inf")
        head = dumps_strict(self.doc, option=JSON_OPTIONS)
        n = len(rows)
        if n == 0:
            yield head
            return
        marker = b'\n  "request_timings": []'  # the top-level key: 2 spaces of indent
        at = head.find(marker)
        if at < 0 or head.find(marker, at + 1) >= 0:
            raise AssertionError("request_timings placeholder not found exactly once")
        yield head[:at] + b'\n  "request_timings": ['
        columns = _row_text(rows)
        for first in range(0, n, ROW_BATCH):
            yield _rows_json(columns, first, min(n, first + ROW_BATCH))
        yield b"\n  ]" + head[at + len(marker):]


# A row as orjson writes it inside the document (OPT_INDENT_2 | OPT_SORT_KEYS: keys sorted,
# the row at 4 spaces of indent, its fields at 6): `cached_tokens` — first in sorted order —
# only where reported, then every other field with orjson's text for its value.
#
# `_ROW_TEMPLATE` is a row's text with a None wherever it varies: slot 0 is the row's
# opening (the separator before it, the brace and, where reported, the whole `cached_tokens`
# line); slot 2 * j is the value of `_ROW_KEYS[j]`, j ≥ 1; the rest is fixed.
_ROW_KEYS = sorted(derive.ROW_FIELDS)
assert _ROW_KEYS[0] == "cached_tokens"
_ROW_OPEN = b",\n    {\n"  # the first row of all has no comma
_ROW_CACHED = b'      "cached_tokens": '
_ROW_TEMPLATE: list[bytes | None] = [
    None,
    b'      "%s": ' % _ROW_KEYS[1].encode(), None,
    *chain.from_iterable((b',\n      "%s": ' % k.encode(), None) for k in _ROW_KEYS[2:]),
    b"\n    }",
]
_SOURCE_JSON = np.array([b'"chunks"', b'"usage"'], dtype=object)  # by `usage_source`


class _RowText(NamedTuple):
    """A RowColumns readied for `_rows_json` (whole columns, made once per write).

    `values`: for each of `_ROW_KEYS[1:]`, its column — an int64 or float64 array (orjson
    writes NaN as null), or an object array of texts (`output_token_source`) — and
    where the column is null (a bool array, or None). `cached`/`cached_shown`:
    `cached_tokens` and where the row has it.
    """

    values: list[tuple[Any, Any]]
    cached: Any
    cached_shown: Any


def _row_text(rows: derive.RowColumns) -> _RowText:
    values: list[tuple[Any, Any]] = []
    for name in _ROW_KEYS[1:]:
        if name in rows.floats:
            values.append((rows.floats[name], None))
        elif name == "output_token_source":
            values.append((_SOURCE_JSON[rows.usage_source.astype(np.intp)], None))
        else:
            present = rows.present.get(name)
            values.append((rows.counts[name], None if present is None else ~present))
    return _RowText(values, rows.counts["cached_tokens"], rows.present["cached_tokens"])


def _json_values(column: Any) -> bytes:
    """orjson's text of a numeric array's elements, `,`-separated (orjson writes a float64
    element as it writes the Python float, NaN as null)."""
    return orjson.dumps(np.ascontiguousarray(column),
                        option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]


def _rows_json(columns: _RowText, first: int, stop: int) -> bytes:
    """Rows [first, stop) as they appear in the document's `request_timings`, each preceded
    by `,\n` (the first row of all by `\n` alone).

    `_ROW_TEMPLATE` repeated once per row, each column's texts put in its slots with one
    slice assignment, all joined in one go: no Python code runs per row, only per null
    count. What is left is orjson, one `split` per column and the join; small batches
    (`ROW_BATCH`) keep the ~17 bytes objects a row makes in the CPU caches, which measured
    faster than larger ones.
    """
    width = len(_ROW_TEMPLATE)
    text = _ROW_TEMPLATE * (stop - first)
    # The openings: `_ROW_OPEN`, plus the `cached_tokens` line where the row has it. The
    # lines come from one replace of the reported values' separators: each `,` ends a line
    # (and `\0` marks where to split) and starts the next.
    opening = np.full(stop - first, _ROW_OPEN, dtype=object)
    shown = columns.cached_shown[first:stop]
    if shown.any():
        line = _ROW_OPEN + _ROW_CACHED
        cached = _json_values(columns.cached[first:stop][shown])
        opening[shown] = (line + cached.replace(b",", b",\n\0" + line) + b",\n").split(b"\0")
    openings = opening.tolist()
    if first == 0:
        openings[0] = openings[0][1:]
    text[0::width] = openings
    for slot, (column, null) in enumerate(columns.values, start=1):
        if column.dtype == object:  # texts already
            values = column[first:stop].tolist()
        else:
            values = _json_values(column[first:stop]).split(b",")
        if null is not None:
            for i in np.flatnonzero(null[first:stop]).tolist():
                values[i] = b"null"
        text[2 * slot::width] = values
    return b"".join(text)  # type: ignore[arg-type]  # every None slot is filled


def build_benchmark_columns(raw: RawColumns,
                            client: Mapping[str, Any] | None = None) -> BuiltBenchmark:
    """`build_benchmark` of a run read with `scan_raw`: the same document (rows as columns).

    Raises VerifyError, with the messages `build_benchmark` gives, if it does not verify.
    """
    t = raw.table
    col = {name: t[:, i] for i, name in enumerate(RAW_COLUMNS)}
    measured = np.flatnonzero(col["warmup"] == 0)
    order = measured[np.argsort(col["request_index"][measured], kind="stable")]
    failed = col["failed"][order] != 0
    failures = []
    for new_index, pos in zip(np.flatnonzero(failed).tolist(), order[failed].tolist(),
                              strict=True):
        kind, message, status, phase, record_status = raw.failures[pos]
        failures.append({"request_index": new_index, "kind": kind,
                         "http_status": status if status is not None else record_status,
                         "message": message, "phase": phase})
    rows = _row_columns(t[order[~failed]], np.flatnonzero(~failed))
    offsets = raw.clock_offsets_ns()
    # offset of each record's clock (worker -1, no worker, indexes the trailing 0)
    offset = np.array([offsets.get(name, 0) for name in raw.worker_names] + [0],
                      dtype=np.int64)[col["worker"]]
    last = np.where(col["end_ns"] != NULL, col["end_ns"], col["start_ns"]) + offset
    wall = None
    if len(order):
        wall = derive.duration_ms(int((col["start_ns"][order] + offset[order]).min()),
                                  int(last[order].max()))
    finished = None
    if raw.run_end is not None and isinstance(raw.run_end.get("finished_at"), str):
        finished = raw.run_end["finished_at"]
    else:  # as finished_at(): the last stamp of any record, placed with the anchors
        wall0, perf0 = raw.header.get("wall_anchor_ns"), raw.header.get("perf_anchor_ns")
        if wall0 is not None and perf0 is not None and len(t):
            finished = _utc_stamp(wall0 + (int(last.max()) - perf0))
    doc = _document(
        raw.header, finished=finished, partial=raw.partial, wall=wall,
        requests=len(order), completed=len(rows), failures=failures,
        warmups=len(t) - len(measured),
        client=_client_block(client, lambda: _client_figures(col, order, wall)),
        rows=[], metrics=stats.aggregate_columns(rows, wall),
        calibration_error=lambda: stats.planned_vs_counted_error_pct_max_columns(rows),
    )
    built = BuiltBenchmark(doc, rows)
    # the row-by-row check says what is wrong, if anything is
    if not _clean(doc, rows, recompute=False):
        problems = _verify_rows(built.to_dict())
        if problems:
            raise VerifyError(problems,
                              source=f"benchmark built from {raw.path or 'raw records'}")
    return built


def _row_columns(t: Any, new_index: Any) -> derive.RowColumns:
    """The rows of the completed records `t` (rows of a RawColumns table, in row order),
    as `derive.timing_from_record` makes them, numbered `new_index`."""
    c = {name: t[:, i] for i, name in enumerate(RAW_COLUMNS)}
    start = c["start_ns"]
    e2e = derive.durations_ms(start, c["end_ns"], c["end_ns"] != NULL)
    ttfo = derive.durations_ms(start, c["first_output_ns"], c["first_output_ns"] != NULL)
    ttft = derive.durations_ms(start, c["first_content_ns"], c["first_content_ns"] != NULL)
    present = {name: c[name] != NULL for name in derive.OPTIONAL_COUNT_FIELDS}
    counts = {name: np.where(present[name], c[name], 0)
              for name in derive.OPTIONAL_COUNT_FIELDS}
    counts.update(request_index=new_index.astype(np.int64), output_tokens=c["output_tokens"],
                  reasoning_chunks=c["reasoning_chunks"], content_chunks=c["content_chunks"])
    floats = {"e2e_ms": e2e, "time_to_first_output_ms": ttfo, "ttft_ms": ttft}
    floats.update(derive.derive_columns(e2e, ttfo, ttft, counts["output_tokens"],
                                        counts["prompt_tokens"], present["prompt_tokens"]))
    return derive.RowColumns(floats=floats, counts=counts, present=present,
                             usage_source=c["usage_source"] != 0)


def _client_figures(col: Mapping[str, Any], order: Any, wall: float | None
                    ) -> tuple[float | None, dict[str, Any] | None]:
    """`achieved_concurrency` and `start_delay_ms` of the measured records at `order`, as
    `saturation.py` computes them from RequestRecords."""
    end = col["end_ns"][order]
    delay = col["start_delay_ns"][order]
    return (saturation.achieved_concurrency_columns(col["start_ns"][order], end, end != NULL,
                                                    wall),
            saturation.start_delay_ms_columns(delay[delay != NULL]))


def load_benchmark(path: str | Path) -> dict[str, Any]:
    """Read a benchmark file with a strict JSON parser (NaN/Infinity are refused, unlike the
    standard library's `json`). Raises VerifyError naming the file if it is not a JSON
    object."""
    p = Path(path)
    try:
        doc = orjson.loads(p.read_bytes())
    except OSError as exc:
        raise VerifyError([f"cannot open it ({exc.strerror or exc})"], source=str(p)) from exc
    except orjson.JSONDecodeError as exc:
        raise VerifyError([f"not strict JSON ({exc})"], source=str(p)) from exc
    if not isinstance(doc, dict):
        raise VerifyError(["the top level is not a JSON object"], source=str(p))
    return doc


# --- verify --------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Exact equality as verify means it: same JSON type (int ≠ float, null ≠ anything
    else), floats equal bit for bit (0.0 ≠ -0.0, NaN ≠ NaN), containers element-wise."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


FMT_MAX = 200  # characters of a value a message shows (a damaged file's may be megabytes)


def fmt(v: Any) -> str:
    """A value as it reads in the JSON file (floats with all their digits)."""
    if isinstance(v, float):
        return repr(v)
    try:
        text = orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # not JSON, or nested deeper than orjson writes (and repr recurses)
        return show(v)
    return text if len(text) <= FMT_MAX else text[:FMT_MAX - 3] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_count(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _is_ms(v: Any) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v >= 0


def _is_float(v: Any) -> bool:
    return isinstance(v, float) and math.isfinite(v)


# row field -> (check, description, nullable)
_ROW_TYPES: dict[str, tuple[Any, str, bool]] = {
    "request_index": (_is_count, "a non-negative integer", False),
    "planned_context_tokens": (_is_count, "a non-negative integer", True),
    "prompt_tokens": (_is_count, "a non-negative integer", True),
    "output_tokens": (_is_count, "a non-negative integer", False),
    "output_token_source": (
        lambda v: v in derive.OUTPUT_TOKEN_SOURCES, '"usage" or "chunks"', False),
    "cached_tokens": (
        _is_count, "a non-negative integer (omit the field when not reported)", False),
    "reasoning_chunks": (_is_count, "a non-negative integer", False),
    "content_chunks": (_is_count, "a non-negative integer", False),
    "e2e_ms": (_is_ms, "a non-negative float", False),
    "time_to_first_output_ms": (_is_ms, "a non-negative float", True),
    "ttft_ms": (_is_ms, "a non-negative float", True),
    "generation_ms": (_is_float, "a float", True),
    "visible_generation_ms": (_is_float, "a float", True),
    "decode_tok_s": (_is_float, "a float", True),
    "mean_inter_token_latency_ms": (_is_float, "a float", True),
    "effective_prefill_tok_s": (_is_float, "a float", True),
}


def verify_benchmark(doc: Any) -> list[str]:
    """Every way `doc` fails to be a correct benchmark/v1 document; [] when it is one.

    The checks are `_verify_rows`'s (below). A document whose rows are all plainly typed is
    first checked as columns (`_clean`, the same checks with numpy): when that finds nothing
    the answer is []; otherwise — or for any row it does not model — the row-by-row checks
    run and give the messages.
    """
    if isinstance(doc, dict):
        rows = derive.RowColumns.from_rows(doc.get("request_timings"))
        if rows is not None and _clean(doc, rows):
            return []
    return _verify_rows(doc)


def columns_are_clean(doc: dict[str, Any], rows: derive.RowColumns) -> bool:
    """True only if `verify_benchmark` finds nothing in `doc` with `rows` (`RowColumns`) as
    its `request_timings` (the key itself is not read: it may be a placeholder). False
    does not mean a problem: `verify_benchmark` of the whole document says."""
    return _clean(doc, rows)


def _verify_rows(doc: Any) -> list[str]:
    """Every way `doc` fails to be a correct benchmark/v1 document; [] when it is one.

    Each message starts with the field path it is about (`request_timings[3].decode_tok_s:
    file has X, recomputed Y from …`, `metrics.ttft_p95_ms: …`, `completed: …`). Checked:
    strict JSON (no NaN/±inf); schema string, required fields, run_id and timestamp shapes;
    row field types; every derived row value against `derive.derive_row` of the row's base
    values; stamp-order invariants; `output_tokens` of chunk-counted rows; failure entries;
    `requests == completed + failed`, `completed == len(request_timings)`,
    `failed == len(failures)`; request_index unique, dense from 0 and ascending; planned
    sizes against `context_distribution`; `wall_clock_ms` not shorter than any request; and
    the whole `metrics` block against `stats.aggregate(request_timings, wall_clock_ms)`.
    """
    if not isinstance(doc, dict):
        return [f"document: expected a JSON object, got {type(doc).__name__}"]
    problems = strict_json_problems(doc)
    _check_run_fields(doc, problems)
    rows, rows_ok = _check_rows(doc, problems)
    _check_failures(doc, problems)
    _check_client(doc, problems)
    _check_counts(doc, problems)
    _check_indices(doc, problems)
    _check_context_distribution(doc, rows, problems)
    wall = _check_wall_clock(doc, rows, problems)
    _check_metrics(doc, [row for _, row in rows] if rows_ok else None, wall, problems)
    if rows_ok:
        _check_prompt_calibration(doc, [row for _, row in rows], problems)
    return problems


def _clean(doc: dict[str, Any], rows: derive.RowColumns, *, recompute: bool = True) -> bool:
    """True only if `_verify_rows(doc)` would find nothing, where `rows` are the document's
    rows (`doc["request_timings"]` itself is not read: it may be a placeholder). `rows`
    holds only values of the right JSON type (see `RowColumns.from_rows`), so what is left
    to check is done here over whole columns; the rest of the document by the row-by-row
    code itself. False does not mean a problem: `_verify_rows` says.

    `recompute=False` is for a document just built from these very columns: its derived
    fields, metrics and calibration error are what `derive.derive_columns`,
    `stats.aggregate_columns` and `planned_vs_counted_error_pct_max_columns` returned for
    them, so computing them again could only give the same values; every invariant of the
    data is still checked."""
    problems = strict_json_problems({k: v for k, v in doc.items() if k != "request_timings"})
    _check_run_fields(doc, problems)
    _check_failures(doc, problems)
    _check_client(doc, problems)
    if problems:
        return False
    n = len(rows)
    failures = doc["failures"]
    counts = [doc[key] for key in ("requests", "completed", "failed")]
    if not all(_is_count(c) for c in counts) or counts != [n + len(failures), n, len(failures)]:
        return False
    f, c, present = rows.floats, rows.counts, rows.present
    # each row's derived values, bit for bit
    derived = derive.derive_columns(f["e2e_ms"], f["time_to_first_output_ms"], f["ttft_ms"],
                                    c["output_tokens"], c["prompt_tokens"],
                                    present["prompt_tokens"]) if recompute else {}
    for name in derive.DERIVED_FIELDS if recompute else ():
        if not _same_floats(f[name], derived[name]):
            return False
    output = c["reasoning_chunks"] + c["content_chunks"]
    chunks = ~rows.usage_source
    if (c["output_tokens"][chunks] != output[chunks]).any():
        return False
    ttfo, ttft, e2e = f["time_to_first_output_ms"], f["ttft_ms"], f["e2e_ms"]
    no_ttfo, no_ttft = np.isnan(ttfo), np.isnan(ttft)
    if (~no_ttft & no_ttfo).any():  # content without first output
        return False
    with np.errstate(invalid="ignore"):  # comparisons with NaN (null) are False, as skipped
        if (ttfo > ttft).any() or (ttft > e2e).any() or (ttfo > e2e).any():
            return False
    if (no_ttft != (c["content_chunks"] == 0)).any() or (no_ttfo != (output == 0)).any():
        return False
    # request_index: ascending in each list, together exactly 0 … N−1
    try:
        fail_index = np.array([x["request_index"] for x in failures], dtype=np.int64)
    except OverflowError:
        return False
    for index in (c["request_index"], fail_index):
        if len(index) > 1 and (np.diff(index) <= 0).any():
            return False
    both = np.sort(np.concatenate([c["request_index"], fail_index]))
    if not np.array_equal(both, np.arange(len(both))):
        return False
    # planned sizes against the plan
    dist = doc.get("context_distribution")
    if dist is not None:
        if not (isinstance(dist, dict) and all(k.isdigit() and _is_count(v)
                                                for k, v in dist.items())):
            return False
        planned = present["planned_context_tokens"]
        if not planned.all():
            return False
        sizes, used = np.unique(c["planned_context_tokens"], return_counts=True)
        for size, k in zip(sizes.tolist(), used.tolist(), strict=True):
            if k > dist.get(str(size), -1):
                return False
    # wall clock
    wall = doc["wall_clock_ms"]
    if wall is None:
        if n:
            return False
    elif not _is_ms(wall) or (n and e2e.max() > wall):
        return False
    # metrics
    metrics = doc["metrics"]
    if not isinstance(metrics, dict) or metrics.keys() - stats.METRIC_KEYS:
        return False
    if not recompute:
        return True
    expected = stats.aggregate_columns(rows, wall)
    if not all(key in metrics and same(metrics[key], value) for key, value in expected.items()):
        return False
    calib = doc.get("prompt_calibration")
    if isinstance(calib, dict) and "planned_vs_counted_error_pct_max" in calib:
        want = stats.planned_vs_counted_error_pct_max_columns(rows)
        if not same(calib["planned_vs_counted_error_pct_max"], want):
            return False
    return True


def _same_floats(a: Any, b: Any) -> bool:
    """`same` element-wise over float64 columns with NaN for null: null where the other is
    null, else the same double bit for bit (so 0.0 ≠ -0.0)."""
    nulls = np.isnan(a)
    if not np.array_equal(nulls, np.isnan(b)):
        return False
    return bool(np.array_equal(a[~nulls].view(np.int64), b[~nulls].view(np.int64)))


def _check_prompt_calibration(doc: dict[str, Any], rows: list[dict[str, Any]],
                              problems: list[str]) -> None:
    """`prompt_calibration.planned_vs_counted_error_pct_max`, where present, is the rows'."""
    calib = doc.get("prompt_calibration")
    if not isinstance(calib, dict) or "planned_vs_counted_error_pct_max" not in calib:
        return
    have = calib["planned_vs_counted_error_pct_max"]
    want = stats.planned_vs_counted_error_pct_max(rows)
    if not same(have, want):
        problems.append(f"prompt_calibration.planned_vs_counted_error_pct_max: file has "
                        f"{fmt(have)}, recomputed {fmt(want)} from the rows' planned and "
                        "counted prompt tokens")


def _check_run_fields(doc: dict[str, Any], problems: list[str]) -> None:
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema: file has {fmt(doc.get('schema'))}, expected {fmt(SCHEMA)}")
    for key in sorted(REQUIRED_FIELDS - doc.keys()):
        problems.append(f"{key}: missing")
    run_id = doc.get("run_id")
    if "run_id" in doc and not (isinstance(run_id, str) and _RUN_ID.fullmatch(run_id)):
        problems.append(f"run_id: {fmt(run_id)} is not benchmark-YYYYMMDDTHHMMSSZ[-N]")
    if "started_at" in doc and not (
        isinstance(doc["started_at"], str) and _STAMP.fullmatch(doc["started_at"])
    ):
        problems.append(f"started_at: {fmt(doc['started_at'])} is not a UTC ISO-8601 …Z stamp")
    fin = doc.get("finished_at")
    if "finished_at" in doc and not (
        (isinstance(fin, str) and _STAMP.fullmatch(fin))
        or (fin is None and doc.get("partial") is True)
    ):
        problems.append(
            f"finished_at: {fmt(fin)} is not a UTC ISO-8601 …Z stamp "
            "(null is allowed only in a partial run)"
        )
    for key in ("concurrency", "context_tokens", "max_context_tokens", "context_seed",
                "max_tokens"):
        if doc.get(key) is not None and not _is_int(doc[key]):
            problems.append(f"{key}: expected an integer or null, file has {fmt(doc[key])}")
    for key in TEXT_FIELDS:
        if doc.get(key) is not None and not isinstance(doc[key], str):
            problems.append(f"{key}: expected a string or null, file has {fmt(doc[key])}")
    url = doc.get("base_url")
    if isinstance(url, str) and strip_credentials(url) != url.strip():
        # the value itself is not shown: it is the secret
        problems.append("base_url: holds credentials (a user:password@ part), which a "
                        "benchmark never stores; `anvil postprocess` removes them")
    if "partial" in doc and not isinstance(doc["partial"], bool):
        problems.append(f"partial: expected true or false, file has {fmt(doc['partial'])}")
    if "warmup_requests" in doc and not _is_count(doc["warmup_requests"]):
        problems.append(
            f"warmup_requests: expected a non-negative integer, file has "
            f"{fmt(doc['warmup_requests'])}"
        )
    if "timing_methodology" in doc and not (
        isinstance(doc["timing_methodology"], dict)
        and all(isinstance(v, str) for v in doc["timing_methodology"].values())
    ):
        problems.append("timing_methodology: expected an object of strings")
    cal = doc.get("prompt_calibration")
    if cal is not None and not (
        isinstance(cal, dict) and cal.get("method") in CALIBRATION_METHODS
    ):
        problems.append(
            f"prompt_calibration: expected {{method: one of {list(CALIBRATION_METHODS)}, "
            f"planned_vs_counted_error_pct_max}}, file has {fmt(cal)}"
        )
    flags = doc.get("serve_flags")
    if flags is not None and not isinstance(flags, dict):
        problems.append(f"serve_flags: expected an object or null, file has {fmt(flags)}")
    elif (
        isinstance(flags, dict)
        and flags.get("shared_prefix_burst") is True
        and "shared_prefix" in doc
    ):
        sp = doc["shared_prefix"]
        if not (isinstance(sp, dict) and _is_count(sp.get("prefix_tokens"))
                and _is_count(sp.get("group_size"))):
            problems.append(
                "shared_prefix: serve_flags.shared_prefix_burst is true, so it must be "
                f"{{prefix_tokens, group_size}} integers; file has {fmt(sp)}"
            )


# A well-formed entry of request_timings or failures, with its position in the document.
_Entry = tuple[int, dict[str, Any]]


def _check_rows(doc: dict[str, Any], problems: list[str]) -> tuple[list[_Entry], bool]:
    """Type-check and re-derive every row. Returns the well-formed rows with their
    positions, and whether all rows were well-formed (aggregates are recomputed only then)."""
    rows = doc.get("request_timings")
    if not isinstance(rows, list):
        if "request_timings" in doc:
            problems.append(f"request_timings: expected a list, file has {fmt(rows)}")
        return [], False
    good: list[_Entry] = []
    all_ok = True
    for i, row in enumerate(rows):
        path = f"request_timings[{i}]"
        if not isinstance(row, dict):
            problems.append(f"{path}: expected an object, file has {fmt(row)}")
            all_ok = False
            continue
        ok = True
        for name in derive.ROW_FIELDS:
            check, what, nullable = _ROW_TYPES[name]
            if name not in row:
                if name not in derive.OPTIONAL_ROW_FIELDS:
                    problems.append(f"{path}.{name}: missing")
                    ok = False
                continue
            v = row[name]
            if not ((v is None and nullable) or (v is not None and check(v))):
                problems.append(f"{path}.{name}: expected {what}"
                                f"{' or null' if nullable else ''}, file has {fmt(v)}")
                ok = False
        for name in sorted(row.keys() - set(derive.ROW_FIELDS)):
            problems.append(f"{path}.{name}: unknown field")
        if not ok:
            all_ok = False
            continue
        good.append((i, row))
        _check_row_values(path, row, problems)
    return good, all_ok


def _check_row_values(path: str, row: dict[str, Any], problems: list[str]) -> None:
    recomputed = derive.derive_row(row)
    for name, (formula, inputs) in derive.DERIVED_FIELDS.items():
        if not same(row[name], recomputed[name]):
            given = ", ".join(f"{k}={fmt(row[k])}" for k in inputs)
            problems.append(
                f"{path}.{name}: file has {fmt(row[name])}, recomputed "
                f"{fmt(recomputed[name])} = {formula} from {given}"
            )
    if row["output_token_source"] == "chunks":
        expected = row["reasoning_chunks"] + row["content_chunks"]
        if row["output_tokens"] != expected:
            problems.append(
                f"{path}.output_tokens: file has {row['output_tokens']}, recomputed {expected}"
                f" = reasoning_chunks + content_chunks from output_token_source=\"chunks\", "
                f"reasoning_chunks={row['reasoning_chunks']}, "
                f"content_chunks={row['content_chunks']}"
            )
    ttfo, ttft, e2e = row["time_to_first_output_ms"], row["ttft_ms"], row["e2e_ms"]
    if ttft is not None and ttfo is None:
        problems.append(f"{path}.time_to_first_output_ms: null although ttft_ms={fmt(ttft)} "
                        "(content is output, so first output came no later)")
    for a_name, a, b_name, b in (
        ("time_to_first_output_ms", ttfo, "ttft_ms", ttft),
        ("ttft_ms", ttft, "e2e_ms", e2e),
        ("time_to_first_output_ms", ttfo, "e2e_ms", e2e),
    ):
        if a is not None and b is not None and a > b:
            problems.append(f"{path}.{a_name}: {fmt(a)} is after {b_name}={fmt(b)}, "
                            "impossible for stamps of one request")
    if (ttft is None) != (row["content_chunks"] == 0):
        problems.append(f"{path}.ttft_ms: {fmt(ttft)} with content_chunks="
                        f"{row['content_chunks']} (a first content stamp exists exactly when "
                        "content chunks arrived)")
    if (ttfo is None) != (row["reasoning_chunks"] + row["content_chunks"] == 0):
        problems.append(f"{path}.time_to_first_output_ms: {fmt(ttfo)} with reasoning_chunks="
                        f"{row['reasoning_chunks']}, content_chunks={row['content_chunks']} "
                        "(a first output stamp exists exactly when output chunks arrived)")


def _is_number(v: Any) -> bool:
    """A finite JSON number, integer or not (JSON may write a whole figure as 0)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_figure(v: Any) -> bool:
    return _is_number(v) and v >= 0


def _check_client(doc: dict[str, Any], problems: list[str]) -> None:
    """The `client` block, where there is one: an object with the spec's keys (null where
    not measured) and anvil's two, nothing else; figures that are non-negative numbers,
    p50 <= p99 <= max; `saturated` exactly when the block's own loop lag p99 and CPU cross
    `saturation`'s limits (in a distributed run they are the worst worker's, whose verdict
    decides), and a `verdict` that says the same."""
    client = doc.get("client")
    if client is None:
        return
    if not isinstance(client, dict):
        problems.append(f"client: expected an object or null, file has {fmt(client)}")
        return
    _check_keys("client", client, CLIENT_SPEC_KEYS, CLIENT_KEYS, problems,
                missing="missing (null when it was not measured)")
    p99 = _check_quantiles(client, "loop_lag_ms", _LAG_EXTRA, _is_figure,
                           "a non-negative number", problems)
    _check_quantiles(client, "start_delay_ms", {}, _is_number, "a number", problems)
    for key in ("cpu_pct", "achieved_concurrency"):
        v = client.get(key)
        if v is not None and not _is_figure(v):
            problems.append(f"client.{key}: expected a non-negative number or null, "
                            f"file has {fmt(v)}")
    saturated = client.get("saturated")
    if saturated is not None and not isinstance(saturated, bool):
        problems.append(f"client.saturated: expected true, false or null, "
                        f"file has {fmt(saturated)}")
        return
    cpu = client.get("cpu_pct")
    want, _ = saturation.verdict(p99, cpu if _is_figure(cpu) else None)
    if saturated is not want:
        problems.append(
            f"client.saturated: file has {fmt(saturated)}, its own figures (loop lag p99 "
            f"{fmt(p99)} ms, CPU {fmt(cpu)} %) give {fmt(want)} (saturated when p99 > "
            f"{saturation.LAG_P99_LIMIT_MS:g} ms or CPU > {saturation.CPU_LIMIT_PCT:g} %)")
    verdict = client.get("verdict")
    if verdict is None:
        return
    if not isinstance(verdict, str):
        problems.append(f"client.verdict: expected a string or null, file has {fmt(verdict)}")
    elif not (verdict.startswith("saturated: ") if saturated
              else verdict == saturation.verdict_text(saturated, [])):
        problems.append(f"client.verdict: {fmt(verdict)} does not say what saturated "
                        f"{fmt(saturated)} says ("
                        + ('"saturated: <why>"' if saturated
                           else fmt(saturation.verdict_text(saturated, []))) + ")")


def _check_keys(path: str, obj: dict[str, Any], required: Sequence[str], known: Sequence[str],
                problems: list[str], missing: str = "missing") -> None:
    """Each `required` key absent from `obj` (in that order), then each key not `known`
    (sorted), named under `path`."""
    for key in required:
        if key not in obj:
            problems.append(f"{path}.{key}: {missing}")
    for key in sorted(obj.keys() - set(known), key=str):
        problems.append(f"{path}.{key}: unknown field")


def _is_stall(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_is_figure(x) for x in v)


# `loop_lag_ms`'s keys beside p50/p99/max (lagmon.py, saturation.py): check, description
_LAG_EXTRA: dict[str, tuple[Any, str]] = {
    "samples": (_is_count, "a non-negative integer"),
    "over_5ms": (_is_count, "a non-negative integer"),
    "max_at_s": (lambda v: v is None or _is_figure(v), "a non-negative number or null"),
    "stalls": (lambda v: isinstance(v, list) and all(_is_stall(x) for x in v),
               "a list of [seconds into the load, ms late] pairs"),
}


def _check_quantiles(client: dict[str, Any], key: str, extra: dict[str, tuple[Any, str]],
                     check: Callable[[Any], bool], what: str, problems: list[str]
                     ) -> float | None:
    """`client[key]`: null, or {p50, p99, max} (each `check`ed, or null) with p50 <= p99 <=
    max, plus only the `extra` keys; returns its p99 where it is a valid number."""
    block = client.get(key)
    if block is None:
        return None
    if not isinstance(block, dict):
        problems.append(f"client.{key}: expected an object or null, file has {fmt(block)}")
        return None
    values = []
    for q in ("p50", "p99", "max"):
        if q not in block:
            problems.append(f"client.{key}.{q}: missing (null when there was no sample)")
        v = block.get(q)
        if v is not None and not check(v):
            problems.append(f"client.{key}.{q}: expected {what} or null, file has {fmt(v)}")
        values.append(v if v is not None and check(v) else None)
    if None not in values and not values[0] <= values[1] <= values[2]:
        problems.append(f"client.{key}: p50 {fmt(values[0])} <= p99 {fmt(values[1])} <= "
                        f"max {fmt(values[2])} does not hold")
    for name in sorted(block.keys() - {"p50", "p99", "max"}, key=str):
        if name not in extra:
            problems.append(f"client.{key}.{name}: unknown field")
        elif not extra[name][0](block[name]):
            problems.append(f"client.{key}.{name}: expected {extra[name][1]}, "
                            f"file has {fmt(block[name])}")
    return values[1]


def raw_header_problems(header: Mapping[str, Any]) -> list[str]:
    """`_check_run_fields`'s problems with the fields a raw `"run"` header (its `run_id`,
    `started_at` and `params`) becomes in a benchmark, or []: the raw reader asks, so that
    a damaged header is named with its line rather than when the benchmark built from it
    fails verification."""
    params = header.get("params") or {}
    doc = {"schema": SCHEMA, **{key: params.get(key) for key in PARAM_KEYS},
           "run_id": header.get("run_id"), "started_at": header.get("started_at")}
    doc["base_url"] = redact_url(doc["base_url"])  # as the build does
    problems: list[str] = []
    _check_run_fields(doc, problems)
    return [p for p in problems if not p.endswith(": missing")]  # the rest of a document


def raw_client_problems(client: Any) -> list[str]:
    """`_check_client`'s problems with the `client` block a raw `run_end` line's `client`
    (generator figures; `load_s`/`cpu_s` are not copied) becomes in a benchmark, or [].
    The raw reader asks, so that a damaged one is named with its line rather than found
    when the benchmark built from it fails verification."""
    if client is None:
        return []
    if not isinstance(client, dict):
        return [f"client: expected an object or null, file has {fmt(client)}"]
    problems: list[str] = []
    _check_client({"client": _client_block(client, lambda: (None, None))}, problems)
    return problems


def _check_failures(doc: dict[str, Any], problems: list[str]) -> None:
    """Each failure entry is {request_index, kind, http_status, message, phase}, typed."""
    failures = doc.get("failures")
    if not isinstance(failures, list):
        if "failures" in doc:
            problems.append(f"failures: expected a list, file has {fmt(failures)}")
        return
    for i, f in enumerate(failures):
        path = f"failures[{i}]"
        if not isinstance(f, dict):
            problems.append(f"{path}: expected an object, file has {fmt(f)}")
            continue
        _check_keys(path, f, FAILURE_FIELDS, FAILURE_FIELDS, problems)
        if "request_index" in f and not _is_count(f["request_index"]):
            problems.append(f"{path}.request_index: expected a non-negative integer, "
                            f"file has {fmt(f['request_index'])}")
        for key, expected in failure_field_problems(f):
            problems.append(f"{path}.{key}: expected {expected}, file has {fmt(f[key])}")


def _check_counts(doc: dict[str, Any], problems: list[str]) -> None:
    counts = {}
    for key in ("requests", "completed", "failed"):
        if key in doc and not _is_count(doc[key]):
            problems.append(f"{key}: expected a non-negative integer, file has {fmt(doc[key])}")
        elif key in doc:
            counts[key] = doc[key]
    n_rows = len(doc["request_timings"]) if isinstance(doc.get("request_timings"), list) else 0
    n_fail = len(doc["failures"]) if isinstance(doc.get("failures"), list) else 0
    if "completed" in counts and counts["completed"] != n_rows:
        problems.append(f"completed: file has {counts['completed']}, "
                        f"but request_timings has {n_rows} rows")
    if "failed" in counts and counts["failed"] != n_fail:
        problems.append(f"failed: file has {counts['failed']}, "
                        f"but failures has {n_fail} entries")
    if len(counts) == 3 and counts["requests"] != counts["completed"] + counts["failed"]:
        problems.append(f"requests: file has {counts['requests']}, but completed + failed = "
                        f"{counts['completed'] + counts['failed']}")


def _check_indices(doc: dict[str, Any], problems: list[str]) -> None:
    """request_index: unique, dense from 0 across rows and failures, ascending in each.

    Every entry counts towards the expected 0..N−1, even one malformed elsewhere (its other
    faults are reported by the row and failure checks); a non-integer index is reported
    there too and is simply absent here."""
    entries: list[tuple[str, int]] = []
    total = 0
    for group in ("request_timings", "failures"):
        items = doc.get(group)
        if not isinstance(items, list):
            continue
        total += len(items)
        prev: int | None = None
        for pos, item in enumerate(items):
            idx = item.get("request_index") if isinstance(item, dict) else None
            if not _is_count(idx):
                continue
            path = f"{group}[{pos}].request_index"
            entries.append((path, idx))
            if prev is not None and idx <= prev:
                problems.append(f"{path}: {idx} does not follow {prev}; "
                                f"{group} must be sorted by request_index")
            prev = idx
    users: dict[int, list[str]] = {}
    for path, idx in entries:
        users.setdefault(idx, []).append(path)
    for idx, paths in sorted(users.items()):
        if len(paths) > 1:
            for path in paths:
                others = ", ".join(p for p in paths if p != path)
                problems.append(f"{path}: {idx} is also used by {others}")
        if idx >= total:
            for path in paths:
                problems.append(f"{path}: {idx} is outside 0..{total - 1}; indices must be "
                                "dense across request_timings and failures")
    missing = sorted(set(range(total)) - users.keys())
    if missing:
        problems.append(f"request_index: {missing[:10]} missing from request_timings and "
                        "failures (indices must be dense from 0)")


def _check_context_distribution(
    doc: dict[str, Any], rows: list[_Entry], problems: list[str]
) -> None:
    """Every row's planned size is a size the plan has, no more often than planned."""
    dist = doc.get("context_distribution")
    if dist is None:
        return
    if not (isinstance(dist, dict) and all(
        k.isdigit() and _is_count(v) for k, v in dist.items())):
        problems.append("context_distribution: expected an object of planned size (digits) "
                        f"→ request count, file has {fmt(dist)}")
        return
    used: Counter[str] = Counter()
    for pos, row in rows:
        path = f"request_timings[{pos}].planned_context_tokens"
        planned = row["planned_context_tokens"]
        if planned is None:
            problems.append(f"{path}: null, but context_distribution plans a size for every "
                            "request")
        elif str(planned) not in dist:
            problems.append(f"{path}: {planned} is not a planned size in context_distribution "
                            f"{fmt(dist)}")
        else:
            used[str(planned)] += 1
    for size, n in sorted(used.items()):
        if n > dist[size]:
            problems.append(f"context_distribution.{size}: plans {dist[size]} requests, but "
                            f"request_timings has {n} rows of that size")


def _check_wall_clock(
    doc: dict[str, Any], rows: list[_Entry], problems: list[str]
) -> float | None:
    """wall_clock_ms is a non-negative float (null only without completed requests) and not
    shorter than any request: max end − min start ≥ end − start of each, and `/ 1e6` is
    monotonic, so this holds exactly for any file anvil builds."""
    if "wall_clock_ms" not in doc:
        return None
    wall = doc["wall_clock_ms"]
    if wall is None:
        if rows:
            problems.append("wall_clock_ms: null, but the run has completed requests")
        return None
    if not _is_ms(wall):
        problems.append(f"wall_clock_ms: expected a non-negative float or null, "
                        f"file has {fmt(wall)}")
        return None
    for pos, row in rows:
        if row["e2e_ms"] > wall:
            problems.append(f"wall_clock_ms: {fmt(wall)} is shorter than "
                            f"request_timings[{pos}].e2e_ms={fmt(row['e2e_ms'])}; "
                            "the run cannot be shorter than one of its requests")
    return wall


def _check_metrics(
    doc: dict[str, Any],
    rows: list[dict[str, Any]] | None,
    wall: float | None,
    problems: list[str],
) -> None:
    if "metrics" not in doc:
        return
    metrics = doc["metrics"]
    if not isinstance(metrics, dict):
        problems.append(f"metrics: expected an object, file has {fmt(metrics)}")
        return
    for key in sorted(metrics.keys() - stats.METRIC_KEYS):
        problems.append(f"metrics.{key}: unknown field; verify cannot check it")
    if rows is None:
        problems.append("metrics: not recomputed, because request_timings has malformed rows "
                        "(see above)")
        return
    expected = stats.aggregate(rows, wall)
    for key in sorted(expected):
        path = f"metrics.{key}"
        if key not in metrics:
            problems.append(f"{path}: missing (recomputed {fmt(expected[key])})")
        elif not same(metrics[key], expected[key]):
            note = ""
            if key == "throughput_tok_s":
                note = (f" = output_tokens / (wall_clock_ms / 1000) from output_tokens="
                        f"{expected['output_tokens']}, wall_clock_ms={fmt(doc['wall_clock_ms'])}")
            problems.append(
                f"{path}: file has {fmt(metrics[key])}, recomputed {fmt(expected[key])}{note}"
            )
