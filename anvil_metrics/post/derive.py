"""The rows of a benchmark as columns: made from raw records, read from a file, derived.

Why columns only: `anvil postprocess` (raw records → rows) and `anvil verify` (rows in a
file → the same rows again) must agree to the last bit, and a run may hold a million rows.
So both hold `request_timings` as columns (`RowColumns`) and compute every derived field
with the catalogue's formulas (`catalog.derive`) — one implementation; a single row, as the
live web UI derives it, is a column of one (`derive_row`).

Durations from integer `perf_counter_ns` stamps are `(b − a) / 1e6`: the integer difference
is exact (stamps lie within ±2**62, `records.STAMP_LIMIT`), and one correctly rounded
division makes the milliseconds. Counts are below 2**53 (`records.COUNT_LIMIT`), so each
converts to a double exactly, as Python's `int / float` converts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from anvil_metrics import catalog
from anvil_metrics.catalog import (
    FLOAT_FIELDS,
    OPTIONAL_COUNT_FIELDS,
    ROW_FIELDS,
)
from anvil_metrics.post import rowmodel
from anvil_metrics.post.rawcolumns import COL, NULL, ColumnBuilder
from anvil_metrics.records import RequestRecord

if TYPE_CHECKING:
    import numpy.typing as npt

# a column of a table, as its readers see it (the strings are types, never evaluated)
Ints: TypeAlias = "npt.NDArray[np.int64]"  # stamps, counts, positions; NULL where missing
Floats: TypeAlias = "npt.NDArray[np.float64]"  # figures; NaN where missing (null)
Flags: TypeAlias = "npt.NDArray[np.bool_]"  # a mask

_MEASURED_FLOATS = tuple(n for n in FLOAT_FIELDS if not catalog.BY_NAME[n].derived)
NULLABLE_FLOATS = frozenset(n for n in FLOAT_FIELDS if catalog.BY_NAME[n].nullable)
# the measured fields some formula reads (only these are converted for `catalog.derive`)
_FORMULA_INPUTS = tuple(n for n in ROW_FIELDS if not catalog.BY_NAME[n].derived and any(
    n in f.inputs for f in catalog.DERIVED))


def durations_ms(start_ns: Any, stop_ns: Any, stop_present: Any) -> Any:
    """`(stop − start) / 1e6` over int64 columns, NaN where `stop` is missing."""
    out = (np.where(stop_present, stop_ns, start_ns) - start_ns).astype(np.float64) / 1e6
    out[~stop_present] = np.nan
    return out


@dataclass(frozen=True, slots=True)
class RowColumns:
    """`request_timings` as columns, one numpy array per field, in row order.

    - `floats`: each of FLOAT_FIELDS as float64, NaN for null;
    - `counts`: each of COUNT_FIELDS and OPTIONAL_COUNT_FIELDS as int64 (0 where null);
    - `present`: for each of OPTIONAL_COUNT_FIELDS, a bool array (False = null; for
      `cached_tokens`, the row has no such key);
    - `usage_source`: bool array, True where `output_token_source` is "usage";
    - `absent`: the catalogue's `added` fields the rows do not have (a file written before
      anvil had them: `catalog.absent_given`); their columns hold nulls and are neither
      written nor checked.
    """

    floats: dict[str, Any]
    counts: dict[str, Any]
    present: dict[str, Any]
    usage_source: Any
    absent: frozenset[str] = field(default=frozenset())

    def __len__(self) -> int:
        return len(self.usage_source)

    def values(self, name: str) -> Any:
        """Field `name` as float64, NaN for null (counts convert exactly)."""
        if name in self.floats:
            return self.floats[name]
        if name == "output_token_source":
            raise KeyError("output_token_source is not a number")
        col = self.counts[name].astype(np.float64)
        if name in self.present:
            col[~self.present[name]] = np.nan
        return col

    def fields(self) -> tuple[str, ...]:
        """The row fields these rows have, in row order."""
        return tuple(n for n in ROW_FIELDS if n not in self.absent)

    def row_dicts(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        """Rows [start, stop) as dicts in row order (`cached_tokens` only where reported)."""
        stop = len(self) if stop is None else stop
        names = self.fields()
        cols: dict[str, list[Any]] = {}
        for name in names:
            if name == "output_token_source":
                cols[name] = ["usage" if u else "chunks"
                              for u in self.usage_source[start:stop].tolist()]
                continue
            if name in self.floats:
                values = self.floats[name][start:stop]
                lst = values.tolist()
                nulls = np.isnan(values)
            else:
                lst = self.counts[name][start:stop].tolist()
                nulls = ~self.present[name][start:stop] if name in self.present else None
            if nulls is not None:
                for i in np.flatnonzero(nulls).tolist():
                    lst[i] = None
            cols[name] = lst
        rows = [dict(zip(names, values, strict=True))
                for values in zip(*(cols[name] for name in names), strict=True)]
        for i in np.flatnonzero(~self.present["cached_tokens"][start:stop]).tolist():
            del rows[i]["cached_tokens"]
        return rows

    @classmethod
    def from_rows(cls, rows: Any) -> RowColumns | None:
        """The columns of `request_timings` as read from a file (parsed), or None unless
        `rows` are rows as `rowmodel.Row` defines them (every field of its JSON type and
        bounds, `cached_tokens` only where reported, the `added` fields in every row or in
        none). None means: the row-by-row type checks say what is wrong."""
        typed = rowmodel.convert(rows)
        return None if typed is None else cls._of(typed, parsed=True)

    @classmethod
    def from_text(cls, text: bytes) -> RowColumns | None:
        """`from_rows` of `text`, a JSON array of rows, decoded (and checked) at once."""
        typed = rowmodel.decode(text)
        return None if typed is None else cls._of(typed)

    @classmethod
    def _of(cls, typed: list[Any], parsed: bool = False) -> RowColumns | None:
        got = rowmodel.columns(typed, parsed)
        if got is None:
            return None
        floats, counts, present, usage, absent = got
        return cls(floats=floats, counts=counts, present=present, usage_source=usage,
                   absent=absent)

    def select(self, mask: Any) -> RowColumns:
        """The rows where `mask` (a bool array) is True."""
        return RowColumns(floats={k: v[mask] for k, v in self.floats.items()},
                          counts={k: v[mask] for k, v in self.counts.items()},
                          present={k: v[mask] for k, v in self.present.items()},
                          usage_source=self.usage_source[mask], absent=self.absent)

    @classmethod
    def concat(cls, parts: Sequence[RowColumns]) -> RowColumns:
        """The rows of `parts` (one or more, with the same fields), one part after another."""
        if len(parts) == 1:
            return parts[0]

        def joined(name: str, kind: str) -> Any:
            return np.concatenate([getattr(p, kind)[name] for p in parts])

        first = parts[0]
        return cls(floats={k: joined(k, "floats") for k in first.floats},
                   counts={k: joined(k, "counts") for k in first.counts},
                   present={k: joined(k, "present") for k in first.present},
                   usage_source=np.concatenate([p.usage_source for p in parts]),
                   absent=first.absent)


def derive_columns(rows: RowColumns) -> dict[str, Any]:
    """Every derived field of `rows` (not those absent), from its measured fields, with the
    catalogue's formulas: name -> float64 column, NaN for null."""
    columns = {name: rows.values(name) for name in _FORMULA_INPUTS}
    derived = catalog.derive(columns, skip=rows.absent)
    return {f.name: derived[f.name] for f in catalog.DERIVED if f.name not in rows.absent}


def rows_from_raw(t: Any, new_index: Any, step: Any = None, start_ns: Any = None,
                  anchor_ns: int | None = None, at: Any = None) -> RowColumns:
    """The rows of the completed records `t` (rows of a raw table, `rawcolumns.RAW_COLUMNS`;
    those at positions `at`, None: all of them), in row order, numbered `new_index`, in
    steps `step` (int64, NULL for none; None: a run without steps), started at `start_ns`
    on the run's one clock (None: the records' own) after the header's `anchor_ns` (None:
    no start offsets): the measured fields from the raw stamps and counts, the derived ones
    from the catalogue. (The table's columns are taken one at a time: it is held in column
    order, `ColumnBuilder.table`.)"""
    c = {name: t[:, i] if at is None else t[:, i][at] for name, i in COL.items()}
    n = len(c["start_ns"])
    c["step"] = np.full(n, NULL, dtype=np.int64) if step is None else step
    start = c["start_ns"]
    floats = {name: durations_ms(start, c[stamp], c[stamp] != NULL) for name, stamp in (
        ("e2e_ms", "end_ns"), ("time_to_first_output_ms", "first_output_ns"),
        ("ttft_ms", "first_content_ns"))}
    lag = c["start_delay_ns"]
    floats["schedule_lag_ms"] = durations_ms(np.zeros_like(lag), lag, lag != NULL)
    chunk = c["first_chunk_ns"]
    floats["time_to_first_chunk_ms"] = durations_ms(start, chunk, chunk != NULL)
    if anchor_ns is None:
        floats["start_offset_ms"] = np.full(n, np.nan)
    else:  # the integer difference is exact, one division rounds it (module docstring)
        floats["start_offset_ms"] = ((start if start_ns is None else start_ns) - anchor_ns
                                     ).astype(np.float64) / 1e6
    # the agent replay's waits before a turn; the prefill gate's before a send
    for name in ("tool_wait", "join_wait", "prefill_gate_wait"):
        wait = c[f"{name}_ns"]
        floats[f"{name}_ms"] = durations_ms(np.zeros_like(wait), wait, wait != NULL)
    assert tuple(floats) == _MEASURED_FLOATS
    present = {name: c[name] != NULL for name in OPTIONAL_COUNT_FIELDS}
    counts = {name: np.where(present[name], c[name], 0) for name in OPTIONAL_COUNT_FIELDS}
    counts.update(request_index=new_index.astype(np.int64), output_tokens=c["output_tokens"],
                  reasoning_chunks=c["reasoning_chunks"], content_chunks=c["content_chunks"])
    rows = RowColumns(floats=floats, counts=counts, present=present,
                      usage_source=c["usage_source"] != 0)
    floats.update(derive_columns(rows))  # the formulas read only the measured fields
    return rows


def derive_row(record: RequestRecord) -> dict[str, Any]:
    """The row of one completed record, as `request_timings` would hold it (its own
    `request_index`; the live web UI's per-request figures)."""
    if not record.ok or record.end_ns is None:
        raise ValueError(f"request {record.request_index} did not complete; "
                         "only completed requests have rows")
    cols = ColumnBuilder()
    cols.add_record(0, record)
    table = cols.table()
    return rows_from_raw(table, table[:, COL["request_index"]]).row_dicts()[0]

