"""Building the benchmark/v1 document of a run from its raw records.

Why build checks itself: a benchmark file is only worth promoting a model on if every
number in it follows from its rows by the spec's definitions, so `build` runs verify's
checks on what it built (`verify.columns_are_clean`; the full `verify_benchmark` for the
messages if anything is off) and raises rather than hand out a document it cannot verify.

One path for a run of any size: the raw records as columns (`rawpart.scan_raw`, or
`RawRun.columns()` for records read one by one) → rows as columns (`derive.rows_from_raw`,
the catalogue's formulas) → aggregates (`stats.aggregate`) → `BuiltBenchmark`, whose rows
are written a batch at a time (`rowjson.py`): a million rows never exist as a million
Python dicts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from anvil_metrics import catalog
from anvil_metrics.errors import VerifyError
from anvil_metrics.jsonio import JsonFileError, JsonObject, JsonValue, atomic_write_bytes, read_json
from anvil_metrics.load.criteria import parse_criteria
from anvil_metrics.post import rowjson, schema, stats
from anvil_metrics.post.blockkit import ABSENT, Block, BuildInputs, Measured
from anvil_metrics.post.blocks import BLOCKS
from anvil_metrics.post.derive import Flags, Ints, RowColumns, durations_ms, rows_from_raw
from anvil_metrics.post.rawcolumns import COL, NULL, RawColumns
from anvil_metrics.post.rawread import RawRun
from anvil_metrics.post.steps import attribute
from anvil_metrics.post.verify import columns_are_clean, verify_benchmark


class BuiltBenchmark:
    """A benchmark document whose `request_timings` are held as columns (`rows`);
    `doc["request_timings"]` is an empty placeholder. `to_dict()` gives the plain document;
    `write(path)` writes it as `jsonio.atomic_write_json` would, without building it whole."""

    def __init__(self, doc: JsonObject, rows: RowColumns) -> None:
        self.doc = doc
        self.rows = rows

    def to_dict(self) -> JsonObject:
        return {**self.doc, "request_timings": self.rows.row_dicts()}

    def write(self, path: str | Path) -> None:
        atomic_write_bytes(path, self.json_chunks())

    def json_chunks(self) -> Iterator[bytes]:
        return rowjson.json_chunks(self.doc, self.rows)


def build_benchmark(raw: RawRun | RawColumns, client: Mapping[str, JsonValue] | None = None,
                    blocks: tuple[Block, ...] = BLOCKS) -> JsonObject:
    """`build(raw, client, blocks)` as a plain document (rows as dicts)."""
    return build(raw, client, blocks).to_dict()


def build(raw: RawRun | RawColumns, client: Mapping[str, JsonValue] | None = None,
          blocks: tuple[Block, ...] = BLOCKS) -> BuiltBenchmark:
    """The full benchmark/v1 document of a run read back from its `requests.jsonl`.

    - Run parameters come from the header's `params` (keys named as the spec's fields;
      missing → null); `run_id` and `started_at` from the header; `finished_at` is the
      `run_end` line's, else the last stamp placed with the header's clock anchors;
      `base_url` loses any credentials.
    - Warm-up records are left out of rows, failures and counts; `warmup_requests` is how
      many the raw file holds.
    - `request_index` is renumbered densely from 0 in the order of the measured records'
      raw indices (the raw index when warm-ups have their own counter, shifted down when
      they share it; a partial run's requests that never got a record are not issued).
    - Then each of `blocks` (`blocks.BLOCKS`) in order, where the run has it; `client`
      (generator-health figures from the raw `run_end` line), if given, supplies the
      `client` block.
    Raises VerifyError if the document does not verify (a bug, or raw data that breaks an
    invariant): anvil does not hand out numbers it cannot reproduce.
    """
    if isinstance(raw, RawRun):
        raw = raw.columns()
    t = raw.table
    col = {name: t[:, i] for name, i in COL.items()}
    m = measured_order(raw)
    order = m.order
    start = col["start_ns"] + m.offset_ns  # every record's start on the master's clock
    failed = col["failed"][order] != 0
    step = attribute([s["t_ns"] for s in raw.steps], start[order])
    failures = _failures(raw, order, failed, step)
    anchor = _anchor(raw.header)
    done = order[~failed]
    rows = rows_from_raw(t, np.flatnonzero(~failed), step[~failed], start[done], anchor, done)
    last = np.where(col["end_ns"] != NULL, col["end_ns"], col["start_ns"]) + m.offset_ns
    wall = wall_clock_ms(start[order], last[order])
    doc = _document(raw, finished=_finished_at(raw, last), wall=wall, requests=len(order),
                    failures=failures, warmups=len(t) - len(order), rows=rows)
    params = raw.header.get("params") or {}
    load = params.get("load")
    if isinstance(load, dict) and load.get("mode") != "budget" and (
            doc["context_distribution"] is None) and not (
            params.get("conversation") or params.get("dataset") or _unplanned_class(params)):
        doc["context_distribution"] = _issued_sizes(col["planned_context_tokens"][order])
    users = [s["users"] for s in raw.steps if s.get("users") is not None]
    if users and isinstance(doc["concurrency"], int):  # the most streams the load held
        doc["concurrency"] = max([doc["concurrency"], *users])
    inputs = BuildInputs(
        raw=raw, params=params, client=client, rows=rows, anchor_ns=anchor, doc=doc,
        measured=Measured(table=t, order=order, start_ns=start[order], last_ns=last[order]),
        # criteria the run was given (checked when it started)
        criteria=(tuple(parse_criteria(params["goodput"], flag="params.goodput"))
                  if params.get("goodput") else None), outside=m.outside)
    for block in blocks:
        value = block.build(inputs)
        if value is not ABSENT:
            doc[block.name] = value
    built = BuiltBenchmark(doc, rows)
    if not columns_are_clean(doc, rows, recompute=False, blocks=blocks):
        problems = verify_benchmark(built.to_dict(), blocks)  # then it says what is wrong
        if problems:
            raise VerifyError(problems,
                              source=f"benchmark built from {raw.path or 'raw records'}")
    return built


def _failures(raw: RawColumns, order: Ints, failed: Flags, step: Ints
              ) -> list[JsonObject]:
    """`failures[]`: the measured records that failed, in the document's order (with the
    step each started in, in a stepped run; the job of an agent job's request; the replica of
    a run over several)."""
    out = []
    jobs, replicas = raw.table[:, COL["job_id"]], raw.table[:, COL["replica"]]
    for new_index, pos, in_step in zip(np.flatnonzero(failed).tolist(), order[failed].tolist(),
                                       step[failed].tolist(), strict=True):
        kind, message, status, phase, record_status = raw.failures[pos]
        out.append({"request_index": new_index, "kind": kind,
                    "http_status": status if status is not None else record_status,
                    "message": message, "phase": phase})
        if raw.steps:
            out[-1]["step"] = in_step
        if jobs[pos] != NULL:
            out[-1]["job_id"] = int(jobs[pos])
        if replicas[pos] != NULL:
            out[-1]["replica"] = int(replicas[pos])
    return out


@dataclass(frozen=True, slots=True)
class MeasuredOrder:
    """Which raw records a run's document counts, in its order.

    - `order`: positions in `raw.table` of the measured records (not warm-ups; within the
      measured window when the run has one), sorted by raw request index: the document's
      `request_index` i is `order[i]`, its completed rows are `order[failed == 0]`;
    - `offset_ns`: per raw record, its worker's clock offset to the master's (0 for
      records on the master's clock): `stamp + offset_ns` is on the run's one time line;
    - `outside`: `{"warmup": n, "cooldown": n}` measured records started outside the
      window (None without one).
    """

    order: Ints
    offset_ns: Ints
    outside: dict[str, int] | None


def _anchor(header: Mapping[str, JsonValue]) -> int | None:
    """The header's `perf_anchor_ns` (None in a raw file without one)."""
    anchor = header.get("perf_anchor_ns")
    return anchor if type(anchor) is int else None


def measured_order(raw: RawColumns) -> MeasuredOrder:
    """The records `build` counts and their order (`MeasuredOrder`); the report's time
    lines use the same, so a request drawn is a request counted."""
    col = {name: raw.table[:, i] for name, i in COL.items()}
    offsets = raw.clock_offsets_ns()
    # offset of each record's clock (worker -1, no worker, indexes the trailing 0)
    offset = np.array([offsets.get(name, 0) for name in raw.worker_names] + [0],
                      dtype=np.int64)[col["worker"]]
    start = col["start_ns"] + offset  # every record's start on the master's clock
    measured = np.flatnonzero(col["warmup"] == 0)
    outside = None
    if raw.window_ns is not None:  # --warmup / --cooldown: only requests started within
        early = start[measured] < raw.window_ns[0]
        late = start[measured] >= raw.window_ns[1]
        outside = {"warmup": int(np.count_nonzero(early)),
                   "cooldown": int(np.count_nonzero(late))}
        measured = measured[~(early | late)]
    order = measured[np.argsort(col["request_index"][measured], kind="stable")]
    return MeasuredOrder(order, offset, outside)


def _unplanned_class(params: Mapping[str, object]) -> bool:
    """A mix has a class whose requests plan no size (a dataset's, a check's): no
    distribution, as a budget's header has none (`live/session.py`)."""
    mix = params.get("mix")
    classes = mix.get("request_class") if isinstance(mix, dict) else None
    return any(isinstance(c, dict) and (c.get("dataset") or c.get("check"))
               for c in classes or ())


def _issued_sizes(planned: Ints) -> dict[str, int]:
    """A run without a request budget: its `context_distribution` is what it issued, the
    measured requests (completed and failed) by planned size, in the order sizes first
    appear."""
    planned = planned[planned != NULL]
    sizes, first, counts = np.unique(planned, return_index=True, return_counts=True)
    by_first = np.argsort(first, kind="stable")
    return {str(sizes[i]): int(counts[i]) for i in by_first.tolist()}


def wall_clock_ms(start_ns: Ints, last_ns: Ints) -> float | None:
    """Monotonic duration of the measured run, ms: `(max last − min start) / 1e6`.

    Over the measured (non-warm-up) records, completed and failed (`last_ns`: each one's
    end, or its start if it has none): from the moment the first of them was written to the
    socket to the moment the last of them finished or failed. Gaps between requests are
    included (with 12 sequential requests it is a little more than the sum of their
    `e2e_ms`); warm-ups are not. None when there are no measured records.

    In a distributed run each record's stamps are first placed on the master's clock (the
    caller adds each worker's offset; exactly 0 for workers on the master's kernel, so the
    figure is then as exact as a single process's).
    """
    if not len(start_ns):
        return None
    first, last = np.array([start_ns.min()]), np.array([last_ns.max()])
    return float(durations_ms(first, last, np.array([True]))[0])


def _utc_stamp(wall_ns: int) -> str:
    """`YYYY-MM-DDTHH:MM:SSZ` of a `time.time_ns()` value (floored to the second)."""
    dt = datetime.fromtimestamp(wall_ns // 1_000_000_000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _finished_at(raw: RawColumns, last_ns: Ints) -> str | None:
    """When the run ended, as UTC `…Z`: the `run_end` line's `finished_at` if the run
    finished; otherwise the wall time of the last stamp of any record (`last_ns`, on the
    master's clock), placed with the header's clock anchors (`wall_anchor_ns + (stamp −
    perf_anchor_ns)`). None when neither is known."""
    if raw.run_end is not None and isinstance(raw.run_end.get("finished_at"), str):
        return raw.run_end["finished_at"]
    wall0, perf0 = raw.header.get("wall_anchor_ns"), raw.header.get("perf_anchor_ns")
    if wall0 is None or perf0 is None or not len(last_ns):
        return None
    return _utc_stamp(wall0 + (int(last_ns.max()) - perf0))


def _document(raw: RawColumns, *, finished: str | None, wall: float | None, requests: int,
              failures: list[JsonObject], warmups: int, rows: RowColumns
              ) -> JsonObject:
    """The document's fields around an empty `request_timings`."""
    header = raw.header
    params = header.get("params") or {}
    doc: JsonObject = {"schema": schema.SCHEMA}
    doc.update({key: params.get(key) for key in schema.PARAM_KEYS})
    doc["base_url"] = schema.redact_url(doc["base_url"])
    doc.update(
        {
            "run_id": header["run_id"],
            "started_at": header["started_at"],
            "finished_at": finished,
            "partial": raw.partial,
            # why it ended: null when the run did not finish (no run_end line)
            "ended_by": (raw.run_end or {}).get("ended_by"),
            "end_reason": (raw.run_end or {}).get("end_reason"),
            "wall_clock_ms": wall,
            "requests": requests,
            "completed": len(rows),
            "failed": len(failures),
            "failures": failures,
            "warmup_requests": warmups,
            "timing_methodology": catalog.timing_methodology(),
            "request_timings": [],
            "metrics": stats.aggregate(rows, wall),
        }
    )
    calib = doc.get("prompt_calibration")
    if isinstance(calib, dict):  # the method is the run's; the error is measured, from rows
        doc["prompt_calibration"] = {
            **calib,
            "planned_vs_counted_error_pct_max": stats.planned_vs_counted_error_pct_max(rows),
        }
    return doc


def load_benchmark(path: str | Path) -> JsonObject:
    """Read a benchmark file with a strict JSON parser (`jsonio.read_json`: NaN/Infinity
    are refused, unlike the standard library's `json`). Raises VerifyError naming the file
    and what is wrong with it if it is not a JSON object."""
    p = Path(path)
    try:
        doc = read_json(p, "a benchmark.json")
    except JsonFileError as exc:
        raise VerifyError([f"the file {exc.reason}"], source=str(p)) from exc
    if not isinstance(doc, dict):
        raise VerifyError(["the top level is not a JSON object"], source=str(p))
    return doc
