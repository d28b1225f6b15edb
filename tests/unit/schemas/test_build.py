"""The shipped JSON Schemas: generated from anvil's own field rules, never edited apart.

Why these tests: the files in `anvil_metrics/schemas/` are what other tools validate anvil's
documents with, so they must (1) be exactly what `build.py` builds from the code's rules
today (no drift), (2) be valid draft 2020-12 schemas, (3) accept the spec's two seed
examples, anvil's own summaries and a benchmark holding every block anvil writes, and (4)
refuse what anvil's own rules refuse — for every row field, a null exactly when the
catalogue says the field is not nullable; in the added blocks, a value of the wrong type.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from fullbench import full_benchmark
from jsonschema import Draft202012Validator
from summarybuild import (
    DATA,
    SUMMARY_NAME,
    accept_all,
    all_entries,
    example_docs,
    write_folder,
)

from anvil_metrics import catalog
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import SCHEMA as BENCHMARK
from anvil_metrics.schemas import build as jsonschemas
from anvil_metrics.schemas.build import FILES, GENERATORS, check, shipped, text
from anvil_metrics.summary.folder import SCHEMA as SUMMARY
from anvil_metrics.summary.folder import read_campaign_folder, summary_document
from anvil_metrics.telemetry.servermetrics import client_figures, server_block

SCHEMAS = Path(jsonschemas.__file__).resolve().parent
SEED = DATA / "benchmark-v1.000_51f6de0d03ca0563.json"
REPO = Path(__file__).resolve().parents[3]


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


@pytest.mark.parametrize("which", list(FILES))
def test_shipped_files_are_the_generated_ones(which: str) -> None:
    shipped_text = (SCHEMAS / FILES[which]).read_bytes()
    assert shipped_text == text(GENERATORS[which]()), (
        f"{FILES[which]} differs from what the code's rules give: run "
        "`python -m anvil_metrics.schemas.build` and commit the files")
    Draft202012Validator.check_schema(shipped(which))
    assert shipped(which)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_the_seed_examples_validate() -> None:
    assert check(load(SEED), BENCHMARK)[1] == []
    said, problems = check(load(DATA / SUMMARY_NAME), SUMMARY)
    assert problems == []
    assert said == ("schema: checked against public-summary-v1.schema.json (JSON Schema "
                    "draft 2020-12)")


def test_anvil_summaries_validate(tmp_path: Path) -> None:
    example = load(DATA / SUMMARY_NAME)
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    doc = orjson.loads(orjson.dumps(summary_document(read_campaign_folder(
        folder, verify=accept_all))))
    assert check(doc, SUMMARY)[1] == []
    # one run per variant: no intervals (nulls with reasons), still the schema's shape
    few = write_folder(tmp_path / "d", example_docs(example), all_entries(runs=1))
    doc = orjson.loads(orjson.dumps(summary_document(read_campaign_folder(
        few, verify=accept_all))))
    assert doc["performance"][1]["decode_delta_ci95_percent"] is None
    assert check(doc, SUMMARY)[1] == []


@pytest.mark.parametrize("field", [f.name for f in catalog.ROW])
def test_a_null_row_field_is_refused_exactly_when_not_nullable(field: str) -> None:
    doc = load(SEED)
    doc["request_timings"][0][field] = None
    problems = [p for p in check(doc, BENCHMARK)[1]
                if p.startswith(f"request_timings[0].{field}:")]
    assert bool(problems) is not catalog.BY_NAME[field].nullable, problems


def test_breaches_are_named_by_path() -> None:
    doc = load(SEED)
    doc["request_timings"][1]["surprise"] = 1
    doc["metrics"]["e2e_p50_ms"] = "fast"
    del doc["run_id"]
    problems = check(doc, BENCHMARK)[1]
    assert [p.split(":")[0] for p in problems] == ["document", "metrics.e2e_p50_ms",
                                                   "request_timings[1]"]
    assert "'run_id' is a required property" in problems[0]
    assert all(p.endswith("(JSON Schema benchmark-v1.schema.json)") for p in problems)
    summary = copy.deepcopy(load(DATA / SUMMARY_NAME))
    summary["decision"] = "maybe"
    summary["performance"][0]["runs"] = -1
    assert [p.split(":")[0] for p in check(summary, SUMMARY)[1]] == [
        "decision", "performance[0].runs"]




def test_a_benchmark_with_every_block_validates(tmp_path: Path) -> None:
    doc = full_benchmark(tmp_path)
    blocks = ("client", "load", "steps", "goodput", "server", "shared_prefix",
              "prompt_calibration")
    assert all(isinstance(doc[k], dict | list) for k in blocks)
    assert doc["load"]["outside_window"] is not None and "step" in doc["failures"][0]
    assert check(doc, BENCHMARK)[1] == []
    # speculative decoding from SGLang's gauges: the ranges, no counts
    gauges = {'sglang:spec_accept_rate{tp="0"}': 0.7, 'sglang:spec_accept_length{tp="0"}': 3.1}
    samples = [{"type": "sample", "seq": i, "t_ns": i, "done_ns": i, "ok": True,
                "mark": mark, "series": gauges} for i, mark in enumerate(("first", "last"))]
    doc["server"] = server_block({"engine": "sglang"}, samples, client_figures(
        RowColumns.from_rows(doc["request_timings"])))
    assert doc["server"]["spec_decode"]["acceptance_rate_range"] == [0.7, 0.7]
    assert check(doc, BENCHMARK)[1] == []


@pytest.mark.parametrize(("path", "value", "where"), [
    (("load", "mode"), "sometimes", "load.mode"),
    (("steps", 0, "metrics", "e2e_p50_ms"), "fast", "steps[0].metrics.e2e_p50_ms"),
    (("server", "spec_decode", "source"), "guess", "server.spec_decode.source"),
    (("goodput", "met"), -1, "goodput.met"),
    (("serve_flags", "shared_prefix_burst"), "yes", "serve_flags.shared_prefix_burst"),
])
def test_the_added_blocks_fields_are_typed(tmp_path: Path, path: tuple[Any, ...], value: Any,
                                           where: str) -> None:
    doc = full_benchmark(tmp_path)
    inner = doc
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    assert [p.split(":")[0] for p in check(doc, BENCHMARK)[1]] == [where]


def test_every_request_line_anvil_wrote_validates_against_the_raw_schema() -> None:
    """The raw record's shipped schema (one "request" line of requests.jsonl) accepts the
    request lines of real runs (tests/fixtures/postprocess: each run anvil wrote), and
    refuses one with a stamp of the wrong type."""
    from anvil_metrics.records import RAW_SCHEMA

    validator = Draft202012Validator(shipped(RAW_SCHEMA))
    seen = 0
    for path in sorted((REPO / "tests" / "fixtures" / "postprocess").glob("*/requests.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:  # the partial run's torn last line
                continue
            if record.get("type") == "request":
                assert list(validator.iter_errors(record)) == [], (path, record)
                seen += 1
                bad = {**record, "start_ns": 1.5}
    assert seen > 100
    assert [e.json_path for e in validator.iter_errors(bad)] == ["$.start_ns"]
