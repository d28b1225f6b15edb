"""JSON Schema (draft 2020-12) files for anvil's documents, built from anvil's own field
rules, and the check of a document against them.

Why generated: a schema written by hand would be a second statement of rules the code
already states once — the row fields' types, nullability and added fields (`catalog.ROW`),
the `metrics` keys (`catalog.AGGREGATES`), the run fields, failures and `client` block
(`schema.py`, `records.py`), a summary's shape (`summaryverify.SHAPE_*`, `summary.py`) — and
would drift from them. So `benchmark_schema()` and `summary_schema()` build the schemas from
those rules, the files shipped in `anvil_metrics/schemas/` are their output
(`python -m anvil_metrics.schemas.build` rewrites them), and a test holds the two equal.

What a schema can and cannot say: it checks shape and types, so other tools can read
anvil's files safely; it cannot say a figure is right (that a p50 follows from the rows) —
that is `anvil verify`'s recomputation, with `jsonschema` (a core dependency: the well-kept
validator, and `anvil check json` needs it too).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics import catalog
from anvil_metrics.catalog import KNOWN_GATES
from anvil_metrics.checks.docverify import CASE_REQUIRED, REQUIRED, SUITE_REQUIRED
from anvil_metrics.checks.docverify import SCHEMA as CHECKS_SCHEMA
from anvil_metrics.checks.registry import SUITES
from anvil_metrics.checks.results import ERROR_KINDS, RESULTS
from anvil_metrics.post import schema
from anvil_metrics.records import COUNT_LIMIT, FAILURE_KINDS, PHASES
from anvil_metrics.summary.folder import COMPUTED_KEYS
from anvil_metrics.summary.folder import SCHEMA as SUMMARY_SCHEMA
from anvil_metrics.summary.verify import (
    DECISIONS,
    PROTOCOL_COUNTS,
    ROW_ADDED,
    ROW_DELTAS,
    ROW_FIGURES,
    ROW_LABELS,
    SHAPE_REQUIRED,
    TELEMETRY_RANGES,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"
FILES = {schema.SCHEMA: "benchmark-v1.schema.json",
         SUMMARY_SCHEMA: "public-summary-v1.schema.json",
         CHECKS_SCHEMA: "checks-v1.schema.json"}
GATE_OUTCOMES = ("pass", "fail", "not_significant", "not_evaluated", "not_required")
_MESSAGE_CHARS = 200

# --- building blocks --------------------------------------------------------------------------
_COUNT = {"type": "integer", "minimum": 0}
_NUMBER = {"type": "number"}
_FIGURE = {"type": "number", "minimum": 0}
_STRING = {"type": "string"}


def _or_null(s: dict[str, Any]) -> dict[str, Any]:
    """`s`, or null (as a type list where `s` is one type, else anyOf)."""
    if set(s) <= {"type", "minimum", "exclusiveMaximum", "pattern"} and isinstance(
            s.get("type"), str):
        return {**s, "type": [s["type"], "null"]}
    if "enum" in s:
        return {**s, "enum": [*s["enum"], None]}
    return {"anyOf": [s, {"type": "null"}]}


def _anchored(pattern: str) -> str:
    return f"^(?:{pattern})$"


def _object(props: dict[str, Any], required: Any = (), closed: bool = False,
            **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    out.update(more)
    return out


# --- benchmark/v1 -----------------------------------------------------------------------------
_KIND: dict[str, dict[str, Any]] = {  # a row field's JSON type by its catalogue kind
    "count": {"type": "integer", "minimum": 0, "exclusiveMaximum": COUNT_LIMIT},
    "duration": _FIGURE,
    "float": _NUMBER,
    "source": {"enum": list(catalog.OUTPUT_TOKEN_SOURCES)},
}


def _row() -> dict[str, Any]:
    props = {}
    for f in catalog.ROW:
        s = _KIND[f.kind]
        props[f.name] = {**(_or_null(s) if f.nullable else s),
                         "description": f"{f.unit + ': ' if f.unit else ''}{f.description}"
                         + (" (anvil's added field)" if f.presence == "added" else "")
                         + (" (absent when the server does not report it)"
                            if f.presence == "reported" else "")}
    return _object(props, [f.name for f in catalog.ROW if f.presence == "always"], True)


def _metrics() -> dict[str, Any]:
    props: dict[str, Any] = {}
    for a in catalog.AGGREGATES:
        s: dict[str, Any] = (
            {"type": "object", "additionalProperties": _COUNT} if a.name == "output_token_sources"
            else _or_null(_NUMBER))
        props[a.name] = {**s, "description": f"{a.unit}: {a.formula}"
                         + (" (anvil's added key)" if a.added else "")}
    required = [a.name for a in catalog.AGGREGATES if not a.added and not a.conditional]
    return _object(props, required, True)


def _quantiles(value: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    props = {q: _or_null(value) for q in ("p50", "p99", "max")}
    return _or_null(_object({**props, **extra}, ("p50", "p99", "max"), True))


def _client() -> dict[str, Any]:
    lag_extra = {"samples": _COUNT, "over_5ms": _COUNT, "max_at_s": _or_null(_FIGURE),
                 "stalls": {"type": "array", "items": {"type": "array", "items": _FIGURE,
                                                       "minItems": 2, "maxItems": 2}}}
    props = {"loop_lag_ms": _quantiles(_FIGURE, lag_extra), "cpu_pct": _or_null(_FIGURE),
             "achieved_concurrency": _or_null(_FIGURE),
             "saturated": {"type": ["boolean", "null"]}, "verdict": _or_null(_STRING),
             "start_delay_ms": _quantiles(_NUMBER, {})}
    assert tuple(props) == schema.CLIENT_KEYS, "the client block's keys are schema.py's"
    return _or_null(_object(props, schema.CLIENT_SPEC_KEYS, True,
                            description="the load generator's health (anvil's added block)"))


def _failure() -> dict[str, Any]:
    props = {"request_index": _COUNT, "kind": {"enum": list(FAILURE_KINDS)},
             "http_status": {"type": ["integer", "null"]}, "message": _STRING,
             "phase": {"enum": [*PHASES, None]}, "step": _or_null(_COUNT)}
    return _object(props, schema.FAILURE_FIELDS, True)


def benchmark_schema() -> dict[str, Any]:
    """The JSON Schema of `anvil-serving.benchmark/v1` with anvil's added fields."""
    stamp = _anchored(schema._STAMP.pattern)
    props: dict[str, Any] = {
        "schema": {"const": schema.SCHEMA},
        "run_id": {"type": "string", "pattern": _anchored(schema.RUN_ID.pattern)},
        "started_at": {"type": "string", "pattern": stamp},
        "finished_at": {"type": ["string", "null"], "pattern": stamp,
                        "description": "null only in a partial run"},
        "wall_clock_ms": _or_null(_FIGURE),
        "requests": _COUNT, "completed": _COUNT, "failed": _COUNT,
        "failures": {"type": "array", "items": _failure()},
        **{k: {"type": ["integer", "null"]} for k in
           ("concurrency", "context_tokens", "max_context_tokens", "context_seed",
            "max_tokens")},
        **{k: _or_null(_STRING) for k in schema.TEXT_FIELDS},
        "context_distribution": _or_null({"type": "object", "propertyNames":
                                          {"pattern": "^[0-9]+$"},
                                          "additionalProperties": _COUNT}),
        "serve_flags": {"type": ["object", "null"]},
        "timing_methodology": {"type": "object", "additionalProperties": _STRING},
        "request_timings": {"type": "array", "items": _row()},
        "metrics": _metrics(),
        # anvil's added fields (checked in full by `anvil verify`)
        "partial": {"type": "boolean"},
        "warmup_requests": _COUNT,
        "client": _client(),
        "prompt_calibration": _or_null(_object(
            {"method": {"enum": list(schema.CALIBRATION_METHODS)},
             "planned_vs_counted_error_pct_max": _or_null(_NUMBER)}, ("method",))),
        "shared_prefix": _or_null({"type": "object"}),
        "goodput": {"type": ["object", "null"]},
        "load": {"type": ["object", "null"]},
        "steps": {"type": ["array", "null"]},
        "server": {"type": ["object", "null"]},
    }
    return {"$schema": DRAFT, "$id": f"urn:anvil-metrics:schema:{FILES[schema.SCHEMA]}",
            "title": schema.SCHEMA,
            "description": "Generated by anvil_metrics/schemas/build.py from anvil's field "
                           "rules; shape and types only — `anvil verify` recomputes the "
                           "figures.",
            **_object(props, sorted(schema.REQUIRED_FIELDS))}


# --- public-benchmark-summary/v1 --------------------------------------------------------------
_REASONS = {"type": "object", "additionalProperties": _STRING}
_PAIR = {"type": "array", "items": _NUMBER, "minItems": 2, "maxItems": 2}


def _performance_row() -> dict[str, Any]:
    props: dict[str, Any] = {k: _STRING for k in ROW_LABELS}
    props.update({k: _or_null(_NUMBER) for k in (*ROW_FIGURES, *ROW_DELTAS)})
    for k in ROW_ADDED:
        props[k] = (_COUNT if k == "runs" else _REASONS if k == "null_reasons"
                    else _or_null(_PAIR) if k.endswith("_ci95_percent")
                    else _or_null({"type": "number", "minimum": 0}))
    return _object(props, ROW_LABELS, True)


def summary_schema() -> dict[str, Any]:
    """The JSON Schema of `anvil-serving.public-benchmark-summary/v1` with anvil's added
    blocks; the operator's facts (hardware, runtime, models, …) are free objects."""
    protocol = {k: _or_null(_COUNT) for k in PROTOCOL_COUNTS}
    telemetry = _object({"model": _STRING, "speculation": _STRING,
                         **{k: _or_null(_PAIR) for k in TELEMETRY_RANGES},
                         "runs_sampled": _COUNT, "runs": _COUNT,
                         "unsampled_runs": {"type": "array", "items": _STRING},
                         "null_reasons": _REASONS}, ("model",), True)
    gate = _object({"gate": {"enum": list(KNOWN_GATES)}, "threshold": {},
                    "outcome": {"enum": list(GATE_OUTCOMES)}, "figures": {"type": "object"},
                    "reason": _STRING}, ("gate", "threshold", "outcome", "figures", "reason"),
                   True)
    props: dict[str, Any] = {
        "schema": {"const": SUMMARY_SCHEMA},
        "date": {"type": ["string", "null"], "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "decision": {"enum": list(DECISIONS)},
        "performance_protocol": _object({**protocol, "aggregation": _STRING,
                                         "null_reasons": _REASONS}, PROTOCOL_COUNTS),
        "performance": {"type": "array", "items": _performance_row()},
        "sampled_speculative_telemetry": {"type": "array", "items": telemetry},
        "functional": {"type": "object"},
        "multimodal": {"type": "object"},
        "retained_failures": {"type": "array", "items": _STRING},
        "restoration": {"type": "object"},
        # anvil's added blocks
        "gates": {"type": "array", "items": gate},
        "decision_reasons": {"type": "array", "items": _STRING},
        "statistics": {"type": "object"},
        "not_included": _REASONS,
        "campaign": {"type": "object"},
    }
    assert set(props) == set(COMPUTED_KEYS), "the summary's members are summaryio's"
    return {"$schema": DRAFT, "$id": f"urn:anvil-metrics:schema:{FILES[SUMMARY_SCHEMA]}",
            "title": SUMMARY_SCHEMA,
            "description": "Generated by anvil_metrics/schemas/build.py from anvil's field "
                           "rules; shape and types only — `anvil verify` recomputes the "
                           "figures from the campaign's runs.",
            **_object(props, SHAPE_REQUIRED)}


# --- checks/v1 ----------------------------------------------------------------------------------
def checks_schema() -> dict[str, Any]:
    """anvil-serving.checks/v1 (`anvil check`): the document, each suite and each case, from
    `checks.docverify`'s required fields and `checks.results`' values."""
    retry = _object({"attempt": _COUNT, "status": _or_null(_COUNT), "reason": _STRING,
                     "wait_s": _FIGURE}, ("attempt", "status", "reason", "wait_s"), True)
    case = _object({"id": _STRING, "passed": {"type": "boolean"}, "expected": {},
                    "answer": {}, "error": _or_null(_STRING), "elapsed_s": _FIGURE,
                    "error_kind": {"enum": list(ERROR_KINDS)},
                    "retries": {"type": "array", "items": retry}}, CASE_REQUIRED)
    suite = _object({"result": {"enum": list(RESULTS)}, "passed": _COUNT, "total": _COUNT,
                     "elapsed_s": _FIGURE, "error": _STRING,
                     "cases": {"type": "array", "items": case}}, SUITE_REQUIRED)
    props = {"schema": {"const": CHECKS_SCHEMA}, "model": _or_null(_STRING), "host": _STRING,
             "started_at": _STRING, "finished_at": _STRING, "engine": _or_null(_STRING),
             "engine_version": _or_null(_STRING), "max_model_len": _or_null(_COUNT),
             "options": {"type": "object"},
             "checks": _object({name: suite for name in SUITES}, (), True)}
    return {"$schema": DRAFT, "$id": f"urn:anvil-metrics:schema:{FILES[CHECKS_SCHEMA]}",
            "title": CHECKS_SCHEMA,
            "description": "Generated by anvil_metrics/schemas/build.py; shape and types only "
                           "— `anvil verify` recomputes each suite's result from its cases.",
            **_object(props, REQUIRED)}


GENERATORS = {schema.SCHEMA: benchmark_schema, SUMMARY_SCHEMA: summary_schema,
              CHECKS_SCHEMA: checks_schema}


def text(doc_schema: dict[str, Any]) -> bytes:
    """A schema as its shipped file holds it (2-space indent, the build's key order)."""
    return orjson.dumps(doc_schema, option=orjson.OPT_INDENT_2) + b"\n"


def write_files(folder: Path) -> list[Path]:
    """(Re)write the shipped schema files into `folder` from the generators."""
    out = []
    for which, name in FILES.items():
        path = folder / name
        path.write_bytes(text(GENERATORS[which]()))
        out.append(path)
    return out


def shipped(which: str) -> dict[str, Any]:
    """The shipped schema file for a document's `schema` string (package data)."""
    return orjson.loads(resources.files("anvil_metrics").joinpath(
        "schemas", FILES[which]).read_bytes())


def check(doc: Any, which: str) -> tuple[str, list[str]]:
    """(the line saying what `doc` was checked against, each breach of that schema by
    path)."""
    from jsonschema import Draft202012Validator  # here: ~0.1 s of imports only verify pays

    validator = Draft202012Validator(shipped(which))
    problems = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path))):
        where = e.json_path.removeprefix("$").removeprefix(".") or "document"
        message = e.message if len(e.message) <= _MESSAGE_CHARS else (
            e.message[:_MESSAGE_CHARS - 3] + "...")
        problems.append(f"{where}: {message} (JSON Schema {FILES[which]})")
    return f"schema: checked against {FILES[which]} (JSON Schema draft 2020-12)", problems


if __name__ == "__main__":  # rewrite the shipped files: python -m anvil_metrics.schemas.build
    write_files(Path(__file__).resolve().parent)
