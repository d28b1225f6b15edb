"""The catalogue's `metrics` block and `timing_methodology` as typed definitions (a row's
is `rowmodel.Row`).

Why generated: every aggregate is one entry of the catalogue (`catalog.AGGREGATES`) with
its unit and formula, and each timing definition one sentence of a row field's; a Struct
written here by hand would state them twice. So `Metrics` is made from the entries
(msgspec's `defstruct`), and the JSON Schema, `docs/fields.md` and the type checks of
`steps[].metrics` take it from here like any other block's definition. What a type cannot
say stays where it is: the figures are recomputed from the rows (`verify.py`,
`stats.aggregate`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from anvil_metrics import catalog
from anvil_metrics.fieldtypes import Count, described


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
