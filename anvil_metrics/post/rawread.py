"""Reading `requests.jsonl` back, strictly.

Why strict: every figure in a benchmark file is rebuilt from these records, so a record that
is silently skipped or misread changes the numbers users act on. The one damage tolerated is
the one a crash causes by design — a torn *last* line (the writer died mid-line, so the file
does not end in a newline) — and it is reported, and the run is marked partial. Anything
malformed earlier in the file raises `RawFileError` naming the line.

The line format is described in `records.py`: a `"run"` header first, then `"request"` (and,
in a distributed run, `"worker"`) lines, then a `"run_end"` line if the run finished.

One reader, two outputs, one pass over the file line by line (never the whole file in
memory): `read_raw` gives RequestRecord objects (`RawRun`); `RawReader(columns=True)` the same
run as integer columns (`rawcolumns.RawColumns`) — what `anvil postprocess` needs, via
`rawpart.scan_raw`, which also reads a large file in parallel parts. Both apply the same
checks and raise the same errors: a request line is judged by its typed definition
(`records.RequestLine`, decoded by msgspec; the rules a type cannot say in
`records.line_problem`), and the header and `run_end` lines by the benchmark's own field
rules (`schema.py`), so a damaged one is named with its line.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import orjson

from anvil_metrics.errors import RawFileError
from anvil_metrics.post import schema
from anvil_metrics.post.clientblock import raw_client_problems
from anvil_metrics.post.rawchild import line_batches
from anvil_metrics.post.rawcolumns import COL, ColumnBuilder, RawColumns, RawRunFields
from anvil_metrics.records import (
    MAX_LINE_DEPTH,
    PARTIAL_ENDS,
    RAW_SCHEMA,
    STAMP_LIMIT,
    RequestRecord,
    decode_line,
    line_gaps,
    line_problem,
    nested_too_deep,
    read_request,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RawRun(RawRunFields):
    """A `requests.jsonl` read back: `records`, every request line in file order, warm-ups
    included, and the run's fields (`rawcolumns.RawRunFields`)."""

    records: tuple[RequestRecord, ...]

    @property
    def measured(self) -> tuple[RequestRecord, ...]:
        """Records that count in the benchmark (warm-ups excluded), in file order."""
        return tuple(r for r in self.records if not r.warmup)

    @property
    def warmups(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if r.warmup)

    def columns(self) -> RawColumns:
        """The same run as columns (rows in record order; their `line` is 0)."""
        cols = ColumnBuilder()
        for rec in self.records:
            cols.add_record(0, rec)
        return RawColumns(header=self.header, table=cols.table(), failures=cols.failures,
                          worker_names=tuple(cols.worker_codes), run_end=self.run_end,
                          partial=self.partial, torn_lines=self.torn_lines, notes=self.notes,
                          path=self.path, workers=self.workers, steps=self.steps,
                          steps_end_ns=self.steps_end_ns, window_ns=self.window_ns,
                          hooks=self.hooks)


def read_raw(path: str | Path) -> RawRun:
    """Read a `requests.jsonl` into a RawRun.

    Tolerated and reported: a torn last line (no final newline, not parseable), and a
    missing `run_end` — both mark the run partial. Raised as RawFileError (with the line
    number): unreadable file, no `"run"` header first, a malformed or invalid line anywhere
    else, an unknown line type, a line after `run_end`, a duplicate request_index, and — in a
    run that finished — measured request indices with gaps (records were lost).

    When a file has several faults, the one raised is the first unparseable line if any
    (every line is parsed before any is interpreted), else the first invalid line.
    """
    reader = RawReader(Path(path), columns=False)
    with no_cyclic_gc():
        reader.read_lines()
    return reader.raw_run()


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector off for a read: it would walk every record read so far, again
    and again, and nothing read forms a cycle (reference counting frees each line's objects
    as before)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class RawReader:
    """One pass over a `requests.jsonl`, a line at a time, into RequestRecords (`raw_run()`)
    or columns (`columns=True`, `raw_columns()`).

    The outcome is the one of reading every line first and then interpreting them in order:
    an unparseable line raises at once; the first error found while interpreting is kept
    and raised at the end, after every later line has been parsed (a later unparseable line
    wins over it).

    The parallel reader (`rawpart.py`) drives it through its public part: `read_lines` for
    the parts it reads here, `line` / `tail` for the lines a child handed back, and
    `append_rows` for a child's plain request rows, `interpret` for what the state of the run
    (`deferred`, `run_end`) makes of a line the child could not judge alone.
    """

    def __init__(self, p: Path, *, columns: bool) -> None:
        self.p = p
        self.columns = columns
        self.header: dict[str, Any] | None = None
        self.run_end: dict[str, Any] | None = None
        self.workers: dict[str, dict[str, Any]] = {}
        self.steps: list[dict[str, Any]] = []
        self.steps_end_ns: int | None = None
        self.window_ns: tuple[int, int] | None = None
        self.hooks: list[dict[str, Any]] = []  # the control hooks' lines (`live/hooks.py`)
        self.notes: list[str] = []
        self.torn_lines = 0
        self.parsed = 0
        self.deferred: Exception | None = None
        self.deferred_line = 0
        self.records: list[RequestRecord] = []  # without columns
        self.seen: dict[tuple[bool, int], int] = {}
        self.cols = ColumnBuilder()  # with columns

    def read_lines(self, start: int = 0, stop: int | None = None, line0: int = 0) -> int:
        """Lines from byte `start` (a line start; its line is `line0 + 1`) to `stop` (a line
        start) or the end; returns the last line's number."""
        p = self.p
        n = line0
        try:
            with open(p, "rb", buffering=1 << 20) as f:
                f.seek(start)
                for batch in line_batches(f, None if stop is None else stop - start):
                    for raw in batch:
                        n += 1
                        if raw[-1:] == b"\n":
                            self.line(n, raw)
                        else:
                            self.tail(n, raw)
        except OSError as exc:
            raise RawFileError(p, f"cannot open it ({exc.strerror or exc})",
                               fix="check the path; it is the requests.jsonl of a run") from exc
        if n == 0:
            raise RawFileError(p, "the file is empty", fix="the run wrote nothing; run it again")
        if not self.parsed:
            raise RawFileError(p, "no complete line; the run header itself is torn",
                               line=1, fix="the run died before it started; run it again")
        return n

    # --- one line -------------------------------------------------------------------------

    def line(self, n: int, raw: bytes) -> None:
        """Line `n`, with its newline."""
        if self._plain(n, raw):
            return
        try:
            obj = orjson.loads(raw)  # the newline is JSON whitespace
        except orjson.JSONDecodeError:
            _parse(self.p, n, raw[:-1])  # raises, with the line's message
            raise
        self.parsed += 1
        if self.deferred is None:
            self.interpret(n, obj, raw)

    def tail(self, n: int, raw: bytes) -> None:
        """The last line, without a newline: kept if it parses, else a torn line."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.torn_lines = 1
            self.notes.append(f"line {n}: torn last line ({len(raw)} bytes, no newline) "
                              "ignored: the run was interrupted mid-write")
            return
        self.notes.append(f"line {n}: last line has no newline (the writer stopped after it)")
        if not self._plain(n, raw):
            self.parsed += 1
            if self.deferred is None:
                self.interpret(n, obj, raw)

    def _plain(self, n: int, raw: bytes) -> bool:
        """A request line decoded straight into the columns (`records.decode_line`, its
        types checked as it is parsed): True when taken, or kept as the run's error (a
        rule of `records.line_problem` it breaks). Any other line, one a type refuses, and
        every line of a reader without columns or in a state where a request line is not
        plain (before the header, after the run_end line or an error) is for `interpret`."""
        if not (self.columns and self.header is not None and self.run_end is None
                and self.deferred is None):
            return False
        try:
            line = decode_line(raw)
        except msgspec.MsgspecError:
            return False
        self.parsed += 1
        problem = line_problem(line)
        if problem is None:
            self.cols.add(n, line)
        else:
            self.deferred, self.deferred_line = RawFileError(
                self.p, f"invalid request record: {problem}", line=n), n
        return True

    def skip(self, lines: int) -> None:
        """`lines` request lines parsed and not interpreted (after the run_end line, or an
        error kept for the end: the merge of a child's part, `rawpart.merge_part`)."""
        self.parsed += lines

    def append_rows(self, rows: Any, failures: dict[int, Any], first: int) -> None:
        """Plain request rows read elsewhere (`rows`: int64 rows of `RAW_COLUMNS` with this
        reader's line numbers and worker codes; `failures` by their position in a table of
        which `rows` start at `first`), as if read here."""
        cols = self.cols
        shift = cols.n_records - first
        for pos, f in failures.items():
            cols.failures[pos + shift] = f
        cols.take_rows(rows)
        self.parsed += len(rows)

    def interpret(self, n: int, obj: Any, raw: bytes | None = None) -> None:
        """Line `n`'s parsed `obj` (its text `raw`), judged and taken; an error is kept for
        the end."""
        try:
            self._interpret_now(n, obj, raw)
        except Exception as exc:  # raised once every line has been parsed
            self.deferred, self.deferred_line = exc, n

    def _interpret_now(self, n: int, obj: Any, raw: bytes | None) -> None:
        p = self.p
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise RawFileError(p, "line is not a JSON object with a string \"type\"", line=n)
        kind = obj["type"]
        if self.header is None:
            if kind != "run":
                raise RawFileError(p, f"first line has type {kind!r}, expected \"run\"", line=n,
                                   fix="this is not an anvil requests.jsonl")
            self.header = _check_header(p, n, obj)
            return
        if self.run_end is not None:
            raise RawFileError(p, f"{kind!r} line after the run_end line", line=n)
        if kind == "request":
            line = read_request(obj, raw)
            if isinstance(line, str):
                raise RawFileError(p, f"invalid request record: {line}", line=n)
            if self.columns:
                self.cols.add(n, line)
                return
            # the gaps as the line's text says (orjson reads an integer past 64 bits as a
            # float; the columns took the text)
            rec = RequestRecord.from_json_dict({**obj, "chunk_deltas_ns": line_gaps(line)})
            key = (rec.warmup, rec.request_index)
            if key in self.seen:
                raise RawFileError(
                    p, f"request_index {rec.request_index} already used on line "
                    f"{self.seen[key]}", line=n)
            self.seen[key] = n
            self.records.append(rec)
        elif kind == "run_end":
            _check_depth(p, n, obj)
            _refuse(p, n, "run_end ", raw_client_problems(obj.get("client")))
            _refuse(p, n, "run_end ", schema.end_problems(obj))
            self.run_end = obj
        elif kind == "worker":
            off = obj.get("perf_offset_ns")
            if not isinstance(obj.get("worker"), str) or not (
                    off is None or (type(off) is int and -STAMP_LIMIT < off < STAMP_LIMIT)):
                raise RawFileError(p, "a \"worker\" line needs a string worker and an integer "
                                   "(within ±2**62) or null perf_offset_ns", line=n)
            _check_depth(p, n, obj)
            self.workers[obj["worker"]] = obj
        elif kind in ("step", "step_end"):
            self._step_line(n, kind, obj)
        elif kind == "window":  # a duration run's measured window (`--warmup`/`--cooldown`)
            lo, hi = obj.get("from_ns"), obj.get("to_ns")
            if (type(lo) is not int or type(hi) is not int or not -STAMP_LIMIT < lo <= hi
                    < STAMP_LIMIT or self.window_ns is not None):
                raise RawFileError(p, "a \"window\" line needs integer from_ns <= to_ns, once",
                                   line=n)
            self.window_ns = (lo, hi)
        elif kind == "hook":  # a control hook called (checked by its block's type)
            _check_depth(p, n, obj)
            self.hooks.append(obj)
        elif kind == "run":
            raise RawFileError(p, "a second \"run\" header", line=n,
                               fix="two runs were written into one file; split it")
        else:
            raise RawFileError(p, f"unknown line type {kind!r}", line=n)

    def _step_line(self, n: int, kind: str, obj: dict[str, Any]) -> None:
        """A step of a stepped run (`steps.py`): `{"type": "step", "step", "t_ns", "users",
        "rate"}` in step order, then `{"type": "step_end", "t_ns"}`; stamps on the master's
        clock, never going back."""
        t = obj.get("t_ns")
        last = self.steps[-1]["t_ns"] if self.steps else None
        if type(t) is not int or not -STAMP_LIMIT < t < STAMP_LIMIT or (
                last is not None and t < last) or self.steps_end_ns is not None:
            raise RawFileError(self.p, f"a {kind!r} line needs an integer t_ns, not before the "
                               "previous step's, and none may follow step_end", line=n)
        if kind == "step_end":
            self.steps_end_ns = t
            return
        users, rate = obj.get("users"), obj.get("rate")
        if obj.get("step") != len(self.steps) or not (
                (users is None or (type(users) is int and users >= 0))
                and (rate is None or (type(rate) in (int, float) and rate > 0))):
            raise RawFileError(self.p, f"step line {obj.get('step')!r}: steps are numbered "
                               "0, 1, … in order, with users (a count) or rate (> 0)", line=n)
        self.steps.append({"step": obj["step"], "t_ns": t, "users": users,
                           "rate": None if rate is None else float(rate)})

    # --- the end ----------------------------------------------------------------------------

    def _raise_deferred(self, duplicate: RawFileError | None = None) -> None:
        """Raise the first error in line order: the kept one or a duplicate found later."""
        if duplicate is not None and (self.deferred is None
                                      or (duplicate.line or 0) < self.deferred_line):
            raise duplicate
        if self.deferred is not None:
            raise self.deferred

    def _run_fields(self) -> dict[str, Any]:
        """What a RawRun and a RawColumns both hold about the run (not its requests); notes
        that the run did not finish."""
        assert self.header is not None
        if self.run_end is None:
            self.notes.append("no run_end line: the run did not finish")
        return {"header": self.header, "run_end": self.run_end,
                "partial": (self.run_end is None or self.torn_lines > 0
                            or self.run_end.get("ended_by") in PARTIAL_ENDS),
                "torn_lines": self.torn_lines, "notes": tuple(self.notes),
                "path": str(self.p), "workers": self.workers, "steps": tuple(self.steps),
                "steps_end_ns": self.steps_end_ns, "window_ns": self.window_ns,
                "hooks": tuple(self.hooks)}

    def _lost(self, missing: list[int]) -> RawFileError:
        return RawFileError(
            self.p, f"the run finished but measured requests {missing[:10]} have no record",
            fix="records were lost between worker and file; the run cannot be trusted")

    def raw_run(self) -> RawRun:
        self._raise_deferred()
        fields = self._run_fields()
        if self.run_end is not None:
            indices = sorted(r.request_index for r in self.records if not r.warmup)
            missing = first_missing(indices)
            if missing:
                raise self._lost(missing)
        return RawRun(records=tuple(self.records), **fields)

    def raw_columns(self) -> RawColumns:
        import numpy as np

        table = self.cols.table()
        self._raise_deferred(self._first_duplicate(table))
        fields = self._run_fields()
        measured = table[table[:, COL["warmup"]] == 0, COL["request_index"]]
        if self.run_end is not None and len(measured):
            missing = first_missing(np.sort(measured))
            if missing:
                raise self._lost(missing)
        return RawColumns(table=table, failures=self.cols.failures,
                          worker_names=tuple(self.cols.worker_codes), **fields)

    def _first_duplicate(self, table: Any) -> RawFileError | None:
        """The error read_raw raises for the first line (in file order) whose
        (warmup, request_index) an earlier line already used, if any."""
        import numpy as np

        if len(table) < 2:
            return None
        line, warm, idx = (table[:, COL[c]] for c in ("line", "warmup", "request_index"))
        order = np.lexsort((line, idx, warm))
        line, warm, idx = line[order], warm[order], idx[order]
        repeat = (warm[1:] == warm[:-1]) & (idx[1:] == idx[:-1])
        if not repeat.any():
            return None
        at = np.flatnonzero(repeat) + 1  # sorted positions of lines whose key came before
        j = int(at[np.argmin(line[at])])
        first = j - 1
        while first > 0 and repeat[first - 1]:
            first -= 1
        return RawFileError(self.p, f"request_index {int(idx[j])} already used on line "
                            f"{int(line[first])}", line=int(line[j]))


def first_missing(indices: Any) -> list[int]:
    """Up to 10 smallest integers between the first and last of ascending, distinct
    `indices` that are not among them (the gaps)."""
    if len(indices) == 0 or indices[-1] - indices[0] + 1 == len(indices):
        return []
    missing: list[int] = []
    prev = int(indices[0])
    for x in indices[1:]:
        x = int(x)
        if x > prev + 1:
            missing.extend(range(prev + 1, min(x, prev + 1 + 10 - len(missing))))
            if len(missing) >= 10:
                break
        prev = x
    return missing[:10]


def _parse(p: Path, n: int, raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RawFileError(
            p, f"not valid JSON ({exc})", line=n,
            fix="only a torn last line is tolerated; this file is damaged in the middle",
        ) from exc


def _check_depth(p: Path, n: int, obj: dict[str, Any]) -> None:
    where = nested_too_deep(obj)
    if where is not None:
        _refuse(p, n, "", [f"{where} holds values nested more than {MAX_LINE_DEPTH} levels "
                           f"deep (anvil writes {obj['type']!r} lines a few levels deep)"])


def _refuse(p: Path, n: int, what: str, problems: list[str]) -> None:
    """Line `n` is damaged if the benchmark's own checks found `problems` in what it holds."""
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RawFileError(p, f"{what}{problems[0]}{more}", line=n,
                           fix="the file is damaged; restore it or run again")


def _check_header(p: Path, n: int, obj: dict[str, Any]) -> dict[str, Any]:
    header_schema = obj.get("schema")
    if header_schema is not None and header_schema != RAW_SCHEMA:
        raise RawFileError(p, f"schema {header_schema!r} is not {RAW_SCHEMA!r}", line=n,
                           fix="read it with the anvil version that wrote it")
    for key in ("run_id", "started_at"):
        if not isinstance(obj.get(key), str):
            raise RawFileError(p, f"run header has no string {key!r}", line=n)
    if not isinstance(obj.get("params", {}), dict):
        raise RawFileError(p, "run header 'params' must be an object", line=n)
    _check_depth(p, n, obj)
    for key in ("wall_anchor_ns", "perf_anchor_ns"):
        v = obj.get(key)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool)):
            raise RawFileError(p, f"run header {key!r} must be an integer", line=n)
    _refuse(p, n, "run header: ", schema.raw_header_problems(obj))
    return obj
