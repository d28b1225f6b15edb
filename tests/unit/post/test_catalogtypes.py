"""catalogtypes: a row's and the metrics block's typed definitions are the catalogue's
entries — every field, its nullability and presence — and accept what anvil writes."""

from __future__ import annotations

import msgspec
import pytest
from rawbuild import completed, rows_of

from anvil_metrics import catalog
from anvil_metrics.fieldtypes import problems
from anvil_metrics.post.catalogtypes import Methodology, Metrics
from anvil_metrics.post.rowmodel import Row
from anvil_metrics.post.stats import aggregate


def test_the_row_is_the_catalogues_fields() -> None:
    fields = {f.name: f for f in msgspec.structs.fields(Row)}
    assert list(fields) == [f.name for f in catalog.ROW]
    for f in catalog.ROW:
        assert fields[f.name].required is (f.presence == "always"), f.name


def test_rows_and_metrics_anvil_writes_are_what_the_definitions_say() -> None:
    rows = rows_of([completed(i) for i in range(3)])
    for i, row in enumerate(rows.row_dicts()):
        assert problems(row, Row, f"request_timings[{i}]") == []
    assert problems(aggregate(rows, 1000.0), Metrics, "metrics") == []
    assert problems(catalog.timing_methodology(), Methodology, "timing_methodology") == []


@pytest.mark.parametrize("field", [f for f in catalog.ROW if f.presence == "always"],
                         ids=lambda f: f.name)
def test_a_null_is_refused_exactly_where_the_catalogue_says(field: catalog.RowField) -> None:
    row = rows_of([completed(0)]).row_dicts()[0]
    found = problems({**row, field.name: None}, Row, "r")
    assert bool(found) is not field.nullable, found
