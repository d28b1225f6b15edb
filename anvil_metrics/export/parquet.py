"""`anvil export --parquet FILE`: a run's per-request rows as one Parquet table.

Why: a notebook, DuckDB, Spark or a BI tool reads a million rows of Parquet in a fraction of
the time (and memory) JSON costs it, with each column's type known. The table is the
document's `request_timings`, column for column in the row's order, each field typed as the
catalogue types it: counts int64, durations and rates float64, `output_token_source` a
string; null stays null (never 0, never NaN), and `cached_tokens` is null where the row has
no such key. The rest of the document (run fields, metrics, failures, blocks) rides in the
file's metadata under `anvil.benchmark` as JSON, so the file says what it is a run of.
`read_rows` turns a file back into the rows, exactly: the export's round trip is tested row
for row.

pyarrow is imported here only (the `[parquet]` extra); without it the command says what to
install, in one line.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics import catalog
from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import atomic_write_bytes
from anvil_metrics.post.derive import RowColumns

METADATA_KEY = b"anvil.benchmark"


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("export: --parquet needs pyarrow: pip install "
                         "'anvil-metrics[parquet]'") from None
    return pa, pq


def table_of(doc: dict[str, Any], rows: RowColumns) -> Any:
    """The Arrow table of `rows` (the document's request_timings as columns), `doc`'s other
    fields in its metadata."""
    pa, _ = _pyarrow()
    arrays, fields = [], []
    for name in rows.fields():
        kind = catalog.BY_NAME[name].kind
        if name == "output_token_source":
            values = ["usage" if u else "chunks" for u in rows.usage_source.tolist()]
            arrays.append(pa.array(values, type=pa.string()))
        elif kind == "count":
            present = rows.present.get(name)
            mask = None if present is None else ~present
            arrays.append(pa.array(rows.counts[name], type=pa.int64(), mask=mask))
        else:
            col = rows.floats[name]
            arrays.append(pa.array(col, type=pa.float64(), from_pandas=True))  # NaN: null
        fields.append(pa.field(name, arrays[-1].type))
    meta = {k: v for k, v in doc.items() if k != "request_timings"}
    schema = pa.schema(fields, metadata={METADATA_KEY: orjson.dumps(meta)})
    return pa.Table.from_arrays(arrays, schema=schema)


def write_parquet(doc: dict[str, Any], rows: RowColumns, path: str | Path) -> None:
    """The table (`table_of`) as a Parquet file at `path`, written atomically."""
    _, pq = _pyarrow()
    buf = io.BytesIO()
    pq.write_table(table_of(doc, rows), buf, compression="zstd")
    atomic_write_bytes(path, [buf.getvalue()])


def read_rows(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the document without its rows, the rows as request_timings holds them) of a file
    `write_parquet` wrote."""
    _, pq = _pyarrow()
    table = pq.read_table(path)
    meta = orjson.loads(table.schema.metadata[METADATA_KEY])
    rows = table.to_pylist()
    for row in rows:
        if row.get("cached_tokens", 0) is None:
            del row["cached_tokens"]  # the document leaves the key out, never null
    return meta, rows
