"""`anvil verify`: is a benchmark/v1 document right, to the last bit?

Why it exists: a benchmark file is only worth promoting a model on if every number in it
follows from its rows by the spec's definitions. Verify recomputes every derived row value
and every aggregate from the file's `request_timings` and `wall_clock_ms` with the very
functions that built it (the catalogue's formulas over columns, `derive.derive_columns`,
`stats.aggregate`) and compares with exact equality (floats bit for bit, int vs float and
null vs value are mismatches). Messages are written only for what differs, each starting
with the field path it is about (`request_timings[3].decode_tok_s: file has X, recomputed Y
= formula from inputs`, `metrics.ttft_p95_ms: …`, `completed: …`).

What verify can and cannot prove: base values of a row (`e2e_ms`, `ttft_ms`,
`time_to_first_output_ms`, counts) were measured, not derived, so a changed base value shows
up as disagreement with the values derived from it (the message lists the base inputs) or
with a sum over rows, never as a wrong value on its own. A base value with nothing derived
from it in its row (e.g. `e2e_ms` of a request that produced no output) can be checked only
through the aggregates and invariants (ordering of the stamps, `wall_clock_ms ≥ e2e_ms`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from anvil_metrics import catalog, fieldtypes
from anvil_metrics.jsonio import JsonObject, JsonValue, strict_json_problems
from anvil_metrics.post import schema, stats
from anvil_metrics.post.blockkit import Block
from anvil_metrics.post.blocks import BLOCKS
from anvil_metrics.post.derive import Flags, Floats, Ints, RowColumns, derive_columns
from anvil_metrics.post.rowmodel import Row
from anvil_metrics.post.schema import fmt, same

# the rows checked for values: their columns, and each one's position in the document
_Typed = tuple[RowColumns, Ints]
_RowAt = Callable[[int], JsonObject]  # the i-th of them, as the file has it
_Found = tuple[int, int, str]  # a row's problem: (position, which check, message)


def verify_benchmark(doc: JsonValue, blocks: tuple[Block, ...] = BLOCKS) -> list[str]:
    """Every way `doc` fails to be a correct benchmark/v1 document; [] when it is one.

    Checked: strict JSON (no NaN/±inf); every run field against its definition and the
    rules around them (`schema.py`); each row against the catalogue's (`rowmodel.Row`);
    every derived row value against the catalogue's formulas of the row's base values;
    stamp-order invariants; `output_tokens` of chunk-counted rows; each block of `blocks`
    against its definition, then its own rules (`blocks.BLOCKS`); `requests == completed +
    failed`, `completed == len(request_timings)`, `failed == len(failures)`; request_index
    unique, dense from 0 and ascending; planned sizes against `context_distribution`;
    `wall_clock_ms` not shorter than any request; the whole `metrics` block and the
    calibration error against `stats` of the rows.
    """
    if not isinstance(doc, dict):
        return [f"document: expected a JSON object, got {type(doc).__name__}"]
    rows = RowColumns.from_rows(doc.get("request_timings"))
    if rows is not None:  # every row plainly typed: strict already, and no type message
        problems = strict_json_problems({k: v for k, v in doc.items()
                                         if k != "request_timings"})
        typed: _Typed | None = (rows, np.arange(len(rows)))
        all_typed = True
    else:
        problems = strict_json_problems(doc)
        typed, all_typed = None, False
    schema.check_run_fields(doc, problems)
    found: list[_Found] = []
    if typed is None:
        typed, all_typed = _typed_rows(doc, problems, found)
    listed = doc.get("request_timings")
    _check(doc, typed, all_typed, (lambda i: listed[i]) if isinstance(listed, list) else None,
           problems, found, blocks=blocks)
    return problems


def columns_are_clean(doc: JsonObject, rows: RowColumns, *,
                      recompute: bool = True, blocks: tuple[Block, ...] = BLOCKS) -> bool:
    """True only if `verify_benchmark` finds nothing in `doc` with `rows` as its
    `request_timings` (the key itself is not read: it may be a placeholder). False does not
    mean a problem: `verify_benchmark` of the whole document says.

    `recompute=False` is for a document just built from these very columns: its derived
    fields, metrics and calibration error are what the same functions returned for them,
    so computing them again could only give the same values; every invariant is checked."""
    problems = strict_json_problems({k: v for k, v in doc.items() if k != "request_timings"})
    schema.check_run_fields(doc, problems)
    if problems:
        return False
    _check(doc, (rows, np.arange(len(rows))), True, lambda i: rows.row_dicts(i, i + 1)[0],
           problems, [], recompute=recompute, n_rows=len(rows), blocks=blocks)
    return not problems


def check_blocks(doc: JsonObject, rows: RowColumns | None, problems: list[str],
                 blocks: tuple[Block, ...] = BLOCKS) -> None:
    """Each block against its definition; a well-typed (or absent) one then by its own
    rules (`Block.verify`, with the rows when they are all well typed)."""
    for block in blocks:
        wrong = (fieldtypes.problems(doc[block.name], block.model, block.name)
                 if block.name in doc else [])
        problems += wrong
        if not wrong and block.verify is not None:
            block.verify(doc, rows, problems)


def _check(doc: JsonObject, typed: _Typed, all_typed: bool, row_at: _RowAt | None,
           problems: list[str], found: list[_Found], *, recompute: bool = True,
           n_rows: int | None = None, blocks: tuple[Block, ...] = BLOCKS) -> None:
    """Everything after the run fields, in the order the messages are given; `found`: the
    rows' type problems, merged in row order with their value problems."""
    rows, at = typed
    if row_at is not None:
        _check_row_values(rows, at, row_at, found, recompute)
    found.sort(key=lambda x: (x[0], x[1]))
    problems.extend(message for _, _, message in found)
    check_blocks(doc, rows if all_typed else None, problems, blocks)
    _check_counts(doc, problems, n_rows)
    _check_indices(doc, rows if all_typed else None, problems)
    if row_at is not None:
        _check_context_distribution(doc, rows, at, problems)
    wall = _check_wall_clock(doc, rows, at, problems)
    if recompute:
        _check_metrics(doc, rows if all_typed else None, wall, problems)
        if all_typed:
            _check_prompt_calibration(doc, rows, problems)
    elif not isinstance(doc.get("metrics"), dict) or doc["metrics"].keys() - catalog.METRIC_KEYS:
        problems.append("metrics: not the catalogue's keys")


# --- rows ------------------------------------------------------------------------------------


_FLOATS = tuple(f.name for f in catalog.ROW if f.kind in ("duration", "float"))
ROW_FIELDS = frozenset(catalog.ROW_FIELDS)


def _typed_rows(doc: JsonObject, problems: list[str], found: list[_Found]
                ) -> tuple[_Typed, bool]:
    """Type-check every row, naming each problem (into `found`). Returns the well-typed rows
    as columns with their positions, and whether all rows were (aggregates are recomputed
    only then)."""
    rows = doc.get("request_timings")
    empty = (RowColumns.from_rows([]), np.arange(0))
    if not isinstance(rows, list):
        if "request_timings" in doc:
            problems.append(f"request_timings: expected a list, file has {fmt(rows)}")
        return empty, False  # type: ignore[return-value]
    first = next((r for r in rows if isinstance(r, dict)), {})
    absent = catalog.absent_given(first.keys()) or frozenset()
    good: list[JsonObject] = []
    at: list[int] = []
    for i, row in enumerate(rows):
        path = f"request_timings[{i}]"
        # a field no row has is named, and the row's values are checked still without it
        unknown = sorted(row.keys() - ROW_FIELDS, key=str) if isinstance(row, dict) else []
        if unknown:
            row = {k: v for k, v in row.items() if k not in unknown}
            found.extend((i, -1, f"{path}.{name}: unknown field") for name in unknown)
        wrong = fieldtypes.problems(row, Row, path)
        late = [name for name in absent if isinstance(row, dict) and name in row]
        for name in late:
            wrong.append(f"{path}.{name}: not in request_timings[0]; fields added after v1's "
                         "first rows are in every row or in none")
        if not wrong:  # a type cannot say it: JSON's float, not an integer (`same`'s rule)
            wrong += [f"{path}.{name}: expected a float (a number with a point), file has "
                      f"{fmt(row[name])}" for name in _FLOATS if type(row.get(name)) is int]
            wrong += [f"{path}.{name}: {fmt(row[name])} is not a finite number (strict JSON "
                      "has no NaN or infinity)" for name in _FLOATS
                      if type(row.get(name)) is float and not math.isfinite(row[name])]
        if isinstance(row, dict):  # an added field: in every row, or in none
            wrong += [f"{path}.{name}: missing" for name in catalog.ROW_FIELDS
                      if name in catalog.ADDED - absent and name not in row]
        found.extend((i, -1, message) for message in wrong)
        if not wrong:
            good.append(row)
            at.append(i)
    typed = RowColumns.from_rows(good)
    assert typed is not None, "rows that pass the type checks make columns"
    return (typed, np.array(at, dtype=np.int64)), len(good) == len(rows)


def _differs(a: Floats, b: Floats) -> Flags:
    """Where float64 columns (NaN for null) are not `same`: null vs value, or other bits."""
    nulls = np.isnan(a)
    bad = nulls != np.isnan(b)
    both = ~nulls & ~bad
    bad[both] = a[both].view(np.int64) != b[both].view(np.int64)
    return bad


def _check_row_values(rows: RowColumns, at: Ints, row_at: _RowAt, found: list[_Found],
                      recompute: bool) -> None:
    """Each well-typed row's derived values, bit for bit, and its invariants, into `found`:
    a message for each row where a check fails, none otherwise."""
    f, c = rows.floats, rows.counts

    def each(check: int, mask: Flags, message: Callable[[int, JsonObject], str]) -> None:
        for i in np.flatnonzero(mask).tolist():
            pos = int(at[i])
            found.append((pos, check, message(pos, row_at(i))))

    derived = derive_columns(rows) if recompute else {}
    for k, field in enumerate(catalog.DERIVED):
        if field.name not in derived:
            continue
        want = derived[field.name]
        inputs = catalog.base_inputs(field)

        def recomputed(pos: int, row: JsonObject, field: catalog.RowField = field,
                       want: Floats = want, inputs: tuple[str, ...] = inputs) -> str:
            i = int(np.searchsorted(at, pos))  # `at` ascends
            value = None if np.isnan(want[i]) else float(want[i])
            given = ", ".join(f"{name}={fmt(row[name])}" for name in inputs)
            return (f"request_timings[{pos}].{field.name}: file has {fmt(row[field.name])}, "
                    f"recomputed {fmt(value)} = {field.formula} from {given}")

        each(k, _differs(f[field.name], want), recomputed)
    n = len(catalog.DERIVED)
    output = c["reasoning_chunks"] + c["content_chunks"]
    each(n, ~rows.usage_source & (c["output_tokens"] != output), lambda pos, r: (
        f"request_timings[{pos}].output_tokens: file has {r['output_tokens']}, recomputed "
        f"{r['reasoning_chunks'] + r['content_chunks']} = reasoning_chunks + content_chunks "
        f"from output_token_source=\"chunks\", reasoning_chunks={r['reasoning_chunks']}, "
        f"content_chunks={r['content_chunks']}"))
    no_ttfo, no_ttft = np.isnan(f["time_to_first_output_ms"]), np.isnan(f["ttft_ms"])
    each(n + 1, ~no_ttft & no_ttfo, lambda pos, r: (
        f"request_timings[{pos}].time_to_first_output_ms: null although "
        f"ttft_ms={fmt(r['ttft_ms'])} (content is output, so first output came no later)"))
    with np.errstate(invalid="ignore"):  # comparisons with NaN (null) are False: skipped
        for k, (a, b) in enumerate((("time_to_first_output_ms", "ttft_ms"),
                                    ("ttft_ms", "e2e_ms"),
                                    ("time_to_first_output_ms", "e2e_ms")), start=n + 2):
            each(k, f[a] > f[b], lambda pos, r, a=a, b=b: (
                f"request_timings[{pos}].{a}: {fmt(r[a])} is after {b}={fmt(r[b])}, "
                "impossible for stamps of one request"))
    each(n + 5, no_ttft != (c["content_chunks"] == 0), lambda pos, r: (
        f"request_timings[{pos}].ttft_ms: {fmt(r['ttft_ms'])} with content_chunks="
        f"{r['content_chunks']} (a first content stamp exists exactly when content chunks "
        "arrived)"))
    each(n + 6, no_ttfo != (output == 0), lambda pos, r: (
        f"request_timings[{pos}].time_to_first_output_ms: {fmt(r['time_to_first_output_ms'])}"
        f" with reasoning_chunks={r['reasoning_chunks']}, content_chunks="
        f"{r['content_chunks']} (a first output stamp exists exactly when output chunks "
        "arrived)"))


def _check_context_distribution(doc: JsonObject, rows: RowColumns, at: Ints,
                                problems: list[str]) -> None:
    """Every row's planned size is a size the plan has, no more often than planned."""
    dist = doc.get("context_distribution")
    if dist is None:
        return
    if not (isinstance(dist, dict) and all(
            k.isdigit() and schema.is_count(v) for k, v in dist.items())):
        problems.append("context_distribution: expected an object of planned size (digits) "
                        f"→ request count, file has {fmt(dist)}")
        return
    planned_col = rows.counts["planned_context_tokens"]
    present_col = rows.present["planned_context_tokens"]
    sizes, used_n = np.unique(planned_col[present_col], return_counts=True)
    if present_col.all() and all(n <= dist.get(str(size), -1) for size, n in
                                 zip(sizes.tolist(), used_n.tolist(), strict=True)):
        return  # the common case, at once: every row has a planned size the plan has room for
    planned, present = planned_col.tolist(), present_col.tolist()
    used: dict[str, int] = {}
    for pos, size, has in zip(at.tolist(), planned, present, strict=True):
        path = f"request_timings[{pos}].planned_context_tokens"
        if not has:
            problems.append(f"{path}: null, but context_distribution plans a size for every "
                            "request")
        elif str(size) not in dist:
            problems.append(f"{path}: {size} is not a planned size in context_distribution "
                            f"{fmt(dist)}")
        else:
            used[str(size)] = used.get(str(size), 0) + 1
    for size, n in sorted(used.items()):
        if n > dist[size]:
            problems.append(f"context_distribution.{size}: plans {dist[size]} requests, but "
                            f"request_timings has {n} rows of that size")


def _check_wall_clock(doc: JsonObject, rows: RowColumns, at: Ints,
                      problems: list[str]) -> float | None:
    """wall_clock_ms is a non-negative float (null only without completed requests) and not
    shorter than any request: max end − min start ≥ end − start of each, and `/ 1e6` is
    monotonic, so this holds exactly for any file anvil builds."""
    if "wall_clock_ms" not in doc:
        return None
    wall = doc["wall_clock_ms"]
    if wall is None:
        if len(rows):
            problems.append("wall_clock_ms: null, but the run has completed requests")
        return None
    if not schema.is_ms(wall):
        problems.append(f"wall_clock_ms: expected a non-negative float or null, "
                        f"file has {fmt(wall)}")
        return None
    e2e = rows.floats["e2e_ms"]
    for i in np.flatnonzero(e2e > wall).tolist():
        problems.append(f"wall_clock_ms: {fmt(wall)} is shorter than "
                        f"request_timings[{int(at[i])}].e2e_ms={fmt(float(e2e[i]))}; "
                        "the run cannot be shorter than one of its requests")
    return wall


# --- the document's other figures ---------------------------------------------------------


def _check_counts(doc: JsonObject, problems: list[str], n_rows: int | None) -> None:
    counts = {}
    for key in ("requests", "completed", "failed"):
        if key in doc and not schema.is_count(doc[key]):
            problems.append(f"{key}: expected a non-negative integer, file has {fmt(doc[key])}")
        elif key in doc:
            counts[key] = doc[key]
    if n_rows is None:
        listed = doc.get("request_timings")
        n_rows = len(listed) if isinstance(listed, list) else 0
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


def _indices_dense(rows: RowColumns, failures: JsonValue) -> bool:
    """The quick answer for plainly typed rows: each list ascending, together 0 … N−1."""
    if not isinstance(failures, list) or not all(
            isinstance(x, dict) and schema.is_count(x.get("request_index")) for x in failures):
        return False
    try:
        fail_index = np.array([x["request_index"] for x in failures], dtype=np.int64)
    except OverflowError:
        return False
    index = rows.counts["request_index"]
    for column in (index, fail_index):
        if len(column) > 1 and (np.diff(column) <= 0).any():
            return False
    both = np.sort(np.concatenate([index, fail_index]))
    return bool(np.array_equal(both, np.arange(len(both))))


def _check_indices(doc: JsonObject, rows: RowColumns | None, problems: list[str]) -> None:
    """request_index: unique, dense from 0 across rows and failures, ascending in each.

    Every entry counts towards the expected 0..N−1, even one malformed elsewhere (its other
    faults are reported by the row and failure checks); a non-integer index is reported
    there too and is simply absent here."""
    if rows is not None and _indices_dense(rows, doc.get("failures")):
        return
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
            if not schema.is_count(idx):
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


def _check_metrics(doc: JsonObject, rows: RowColumns | None, wall: float | None,
                   problems: list[str]) -> None:
    if "metrics" not in doc:
        return
    metrics = doc["metrics"]
    if not isinstance(metrics, dict):
        problems.append(f"metrics: expected an object, file has {fmt(metrics)}")
        return
    for key in sorted(metrics.keys() - catalog.METRIC_KEYS):
        problems.append(f"metrics.{key}: unknown field; verify cannot check it")
    if rows is None:
        problems.append("metrics: not recomputed, because request_timings has malformed rows "
                        "(see above)")
        return
    if not len(rows):  # no row says which added fields the file has: its metrics do
        rows = _without(rows, frozenset(
            f.name for f in catalog.ROW if f.presence == "added" and f.percentiles
            and not set(f.percentile_names()) & metrics.keys()))
    expected = stats.aggregate(rows, wall)
    for key in sorted(expected.keys() | (metrics.keys() & catalog.METRIC_KEYS
                                         - CONDITIONAL_KEYS)):
        path = f"metrics.{key}"
        if key not in expected:
            problems.append(f"{path}: file has {fmt(metrics[key])}, but request_timings "
                            "lacks the fields it is computed from")
        elif key not in metrics:
            if key not in ADDED_KEYS:  # an added key: files from before it lack it
                problems.append(f"{path}: missing (recomputed {fmt(expected[key])})")
        elif not same(metrics[key], expected[key]):
            note = ""
            if key == "throughput_tok_s":
                note = (f" = output_tokens / (wall_clock_ms / 1000) from output_tokens="
                        f"{expected['output_tokens']}, wall_clock_ms={fmt(doc['wall_clock_ms'])}")
            problems.append(
                f"{path}: file has {fmt(metrics[key])}, recomputed {fmt(expected[key])}{note}")


CONDITIONAL_KEYS = frozenset(a.name for a in catalog.AGGREGATES if a.conditional)
ADDED_KEYS = stats.ADDED_KEYS


def _without(rows: RowColumns, absent: frozenset[str]) -> RowColumns:
    return RowColumns(floats=rows.floats, counts=rows.counts, present=rows.present,
                      usage_source=rows.usage_source, absent=absent)


def _check_prompt_calibration(doc: JsonObject, rows: RowColumns,
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
