"""`anvil metrics`: the catalogue, where a user looks a definition up."""

from __future__ import annotations

from pathlib import Path

import orjson
from conftest import anvil

from anvil_metrics import catalog

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "benchmark-v1.000_51f6de0d03ca0563.json"


def test_it_lists_every_field_and_metric_of_the_seed_example_with_unit_and_formula():
    proc = anvil("metrics")
    assert proc.returncode == 0, proc.stderr
    listed = {}
    block = None
    for line in proc.stdout.splitlines():
        if not line.startswith("  "):
            block = line.rstrip(":")
            continue
        name, unit, definition = line.split(maxsplit=2)
        listed[(block, name)] = (unit, definition)
    doc = orjson.loads(EXAMPLE.read_bytes())
    rows = {k for row in doc["request_timings"] for k in row}
    for name in rows | catalog.ADDED | {"reasoning_ms", "reasoning_tok_s", "content_tok_s"}:
        unit, definition = listed[("request_timings[]", name)]
        field = catalog.BY_NAME[name]
        assert unit == (field.unit or "-")
        assert (field.formula or field.source) in definition
    for key in doc["metrics"]:
        unit, definition = listed[("metrics", key)]
        assert unit and definition
    assert ("metrics", "reasoning_p50_ms") in listed
    # a derived field shows its formula as the spec writes it
    assert listed[("request_timings[]", "decode_tok_s")][1].startswith(
        "(output_tokens − 1) / (generation_ms / 1000)")
