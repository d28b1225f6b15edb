"""The catalogue's two blocks as typed definitions: a row of `request_timings`, and `metrics`.

Why generated: every per-request field and every aggregate is one entry of the catalogue
(`catalog.ROW`, `catalog.AGGREGATES`) with its JSON kind, nullability, unit and words; a
Struct written here by hand would state them twice. So `Row` and `Metrics` are made from
the entries (msgspec's `defstruct`), and the JSON Schema, `docs/fields.md` and the type
checks of `steps[].metrics` take them from here like any other block's definition.

What a type cannot say stays where it is: a row's derived values and a metrics block's
figures are recomputed from the rows (`verify.py`, `stats.aggregate`), and a row field
added after v1's first rows is in every row or in none (`catalog.absent_given`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from anvil_metrics import catalog
from anvil_metrics.fieldtypes import Count, Figure, described

# a row field's JSON type by its catalogue kind
_KIND: dict[str, Any] = {
    "count": Count,
    "duration": Figure,
    "float": float,
    "source": Literal[catalog.OUTPUT_TOKEN_SOURCES],  # type: ignore[valid-type]
}


def _row_text(f: catalog.RowField) -> str:
    how = f"derived: {f.formula}" if f.derived else f"measured: {f.source}"
    return (f"{f.description}; {how}"
            + (" (anvil's added field)" if f.presence == "added" else "")
            + (" (absent when the server does not report it)"
               if f.presence == "reported" and "absent" not in how else ""))


def _row_field(f: catalog.RowField) -> tuple[Any, ...]:
    kind = _KIND[f.kind]
    typ: Any = Annotated[kind | None if f.nullable else kind, described(f.unit, _row_text(f))]
    if f.presence == "always":
        return (f.name, typ)
    return (f.name, typ | UnsetType, UNSET)  # absent: not reported, or an older file


Row: Any = msgspec.defstruct(
    "Row", [_row_field(f) for f in catalog.ROW], forbid_unknown_fields=True, kw_only=True,
    module=__name__)
Row.__doc__ = ("One completed measured request: its stamps' differences, counts and the "
               "figures derived from them.")


def _metric(a: catalog.Aggregate) -> tuple[Any, ...]:
    text = a.formula + (" (anvil's added key)" if a.added else "")
    if a.name == "output_token_sources":
        typ: Any = Annotated[dict[str, Count], described(a.unit, text)]
    else:
        typ = Annotated[float | None, described(a.unit, text)]
    if a.added or a.conditional:  # older files lack it; only some runs have it
        return (a.name, typ | UnsetType, UNSET)
    return (a.name, typ)


def _methodology() -> dict[str, Any]:
    """Each key of `timing_methodology` (the clock's, and each defining row field's) as a
    described string property."""
    words = {"clock": "the clock every duration is read from"}
    words.update({f.methodology[0]: f"the definition of {f.name}, in words"
                  for f in catalog.ROW if f.methodology is not None})
    assert set(words) == set(catalog.timing_methodology())
    return {key: {"type": "string", "description": text} for key, text in sorted(words.items())}


# key → sentence (any key a string: a file may hold a definition anvil no longer writes)
Methodology: Any = Annotated[dict[str, str], Meta(extra_json_schema={
    "properties": _methodology()})]


Metrics: Any = msgspec.defstruct(
    "Metrics", [_metric(a) for a in catalog.AGGREGATES], forbid_unknown_fields=True,
    kw_only=True, module=__name__)
Metrics.__doc__ = ("The aggregates over request_timings (nearest-rank percentiles, sums, "
                   "counts and rates).")
