"""JSON Schema (draft 2020-12) files for anvil's documents, built from anvil's own field
rules, and the check of a document against them.

Why generated: a schema written by hand would be a second statement of rules the code
already states once — the row fields' types, nullability, units and definitions
(`catalog.ROW`), the `metrics` keys (`catalog.AGGREGATES`), the run fields, failures and
`client` block (`schema.py`, `records.py`), the `load`, `steps`, `goodput` and `server`
blocks (`loadblock.py`, `steps.py`, `goodput.py`, `servermetrics.py`), what each of those
fields means (`post/fields.py`), a summary's shape and words (`summary/verify.py`,
`summary/fields.py`; `verdicts.py` builds it) — and would drift from them. So
`benchmark_schema()` and `verdicts.py` build the schemas from those rules, the files
shipped in `anvil_metrics/schemas/` are their output (`python -m
anvil_metrics.schemas.build` rewrites them, and `docs/fields.md` from them), and a test
holds the two equal.

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
from anvil_metrics.load.scenariofields import ENDPOINTS
from anvil_metrics.post import (
    cancelblock,
    conversations,
    fields,
    loadblock,
    mixblock,
    schema,
    steady,
    steps,
)
from anvil_metrics.records import COUNT_LIMIT, ENDED_BY, FAILURE_KINDS, PHASES
from anvil_metrics.schemas import fieldsdoc, verdicts
from anvil_metrics.schemas.parts import (
    BOOLEAN,
    CHECKS_SCHEMA,
    COUNT,
    FIGURE,
    KEY,
    NUMBER,
    PAIR,
    REASONS,
    STRING,
    STRINGS,
    SUMMARY_SCHEMA,
    anchored,
    described,
    document,
    nullable,
    obj,
    or_null,
)
from anvil_metrics.schemas.parts import FILES as FILES
from anvil_metrics.telemetry import servermetrics

_MESSAGE_CHARS = 200

# --- benchmark/v1 -----------------------------------------------------------------------------
_KIND: dict[str, dict[str, Any]] = {  # a row field's JSON type by its catalogue kind
    "count": {"type": "integer", "minimum": 0, "exclusiveMaximum": COUNT_LIMIT},
    "duration": FIGURE,
    "float": NUMBER,
    "source": {"enum": list(catalog.OUTPUT_TOKEN_SOURCES)},
}


def _row() -> dict[str, Any]:
    props = {}
    for f in catalog.ROW:
        s = _KIND[f.kind]
        how = f"derived: {f.formula}" if f.derived else f"measured: {f.source}"
        props[f.name] = described(
            or_null(s) if f.nullable else s, f.unit, f"{f.description}; {how}"
            + (" (anvil's added field)" if f.presence == "added" else "")
            + (" (absent when the server does not report it)"
               if f.presence == "reported" and "absent" not in how else ""))
    return obj(props, [f.name for f in catalog.ROW if f.presence == "always"], True)


def _metrics() -> dict[str, Any]:
    props: dict[str, Any] = {}
    for a in catalog.AGGREGATES:
        s: dict[str, Any] = (
            {"type": "object", "additionalProperties": COUNT} if a.name == "output_token_sources"
            else or_null(NUMBER))
        props[a.name] = described(s, a.unit, a.formula
                                  + (" (anvil's added key)" if a.added else ""))
    required = [a.name for a in catalog.AGGREGATES if not a.added and not a.conditional]
    return obj(props, required, True)


def _methodology() -> dict[str, Any]:
    """`timing_methodology`: the clock's sentence and each defining row field's."""
    words = {"clock": ("", "the clock every duration is read from")}
    words.update({f.methodology[0]: ("", f"the definition of {f.name}, in words")
                  for f in catalog.ROW if f.methodology is not None})
    assert set(words) == set(catalog.timing_methodology())
    return obj({k: STRING for k in sorted(words)}, text=words, additionalProperties=STRING)


def _quantiles(value: dict[str, Any], extra: dict[str, Any], text: fields.Text
               ) -> dict[str, Any]:
    props = {q: or_null(value) for q in ("p50", "p99", "max")}
    return or_null(obj({**props, **extra}, ("p50", "p99", "max"), True, text))


def _client() -> dict[str, Any]:
    lag_extra = {"samples": COUNT, "over_5ms": COUNT, "max_at_s": or_null(FIGURE),
                 "stalls": {"type": "array", "items": {"type": "array", "items": FIGURE,
                                                       "minItems": 2, "maxItems": 2}}}
    props = {"loop_lag_ms": _quantiles(FIGURE, lag_extra, fields.LOOP_LAG),
             "cpu_pct": or_null(FIGURE), "achieved_concurrency": or_null(FIGURE),
             "saturated": {"type": ["boolean", "null"]}, "verdict": or_null(STRING),
             "start_delay_ms": _quantiles(NUMBER, {}, fields.START_DELAY)}
    assert tuple(props) == schema.CLIENT_KEYS, "the client block's keys are schema.py's"
    return or_null(obj(props, schema.CLIENT_SPEC_KEYS, True, fields.CLIENT))


def _failure() -> dict[str, Any]:
    props = {"request_index": COUNT, "kind": {"enum": list(FAILURE_KINDS)},
             "http_status": {"type": ["integer", "null"]}, "message": STRING,
             "phase": {"enum": [*PHASES, None]}, "step": or_null(COUNT)}
    return obj(props, schema.FAILURE_FIELDS, True, fields.FAILURE)


def _load() -> dict[str, Any]:
    """The `load` block (`loadblock.py`): types only, `anvil verify` checks the rest."""
    rate = nullable(FIGURE)
    props = {"mode": {"enum": list(loadblock.MODES)},
             "arrival": {"enum": list(loadblock.ARRIVAL_KINDS)},
             "offered_rate_rps": rate, "achieved_rate_rps": rate, "burstiness": rate,
             "duration_s": rate, "window_s": nullable(PAIR),
             "schedule_lag_ms": nullable(obj({q: nullable(NUMBER) for q in ("p50", "p99", "max")},
                                             text=fields.SCHEDULE_LAG)),
             "waited_for_user": nullable(COUNT), "cancelled": COUNT,
             "outside_window": nullable(obj({"warmup": COUNT, "cooldown": COUNT},
                                            text=fields.OUTSIDE_WINDOW))}
    assert tuple(props) == (*loadblock.KEYS, *loadblock.OPTIONAL_KEYS)
    return nullable(obj(props, text=fields.LOAD))


def _step() -> dict[str, Any]:
    """One block of `steps[]` (`steps.py`); its `metrics` is the document's `metrics`."""
    props = {"step": COUNT, "users": nullable(COUNT), "rate": FIGURE, "started_s": NUMBER,
             "ended_s": NUMBER, "requests": COUNT, "completed": COUNT, "failed": COUNT,
             "metrics": {"$ref": "#/properties/metrics"}, "goodput_rps": nullable(FIGURE)}
    assert set(props) == {*steps.STEP_KEYS, "users", "rate"}
    return obj(props, text=fields.STEP)


def _conversation() -> dict[str, Any]:
    """The `conversation` block (`post/conversations.py`)."""
    mean = nullable(NUMBER)
    turn = {"turn": COUNT, "requests": COUNT, **{k: mean for k in conversations.TURN_KEYS[2:]}}
    props = {"plan": {"type": "object"}, "conversations": COUNT, "completed": COUNT,
             "cut": COUNT, "expected_reuse": mean, "reported_reuse": mean,
             "turns": {"type": "array", "items": obj(turn, text=fields.CONVERSATION_TURN)}}
    assert tuple(props) == conversations.BLOCK_KEYS
    assert tuple(turn) == conversations.TURN_KEYS
    return nullable(obj(props, text=fields.CONVERSATION))


def _mix() -> dict[str, Any]:
    """The `mix` block (`post/mixblock.py`)."""
    mean = nullable(NUMBER)
    group = {"name": STRING, "expected_share": NUMBER, "requests": COUNT, "share": mean,
             **{k: mean for k in mixblock.GROUP_KEYS[4:]}}
    groups = {"type": "array", "items": obj(group, text=fields.MIX_GROUP)}
    props = {"plan": {"type": "object"}, "classes": groups, "models": groups}
    assert tuple(props) == mixblock.BLOCK_KEYS
    assert tuple(group) == mixblock.GROUP_KEYS
    return nullable(obj(props, text=fields.MIX))


def _steady() -> dict[str, Any]:
    """The `steady_state` block (`post/steady.py`)."""
    metric = {"p50": NUMBER, "p95": NUMBER, "p99": NUMBER,
              "quarters_p50": {"type": "array", "items": NUMBER, "minItems": steady.QUARTERS,
                               "maxItems": steady.QUARTERS},
              "shift_pct": NUMBER, "p_value": FIGURE, "moved": BOOLEAN}
    props = {"verdict": {"enum": list(steady.VERDICTS)}, "reason": STRING,
             "level_kind": {"enum": list(steady.LEVEL_KINDS)}, "level": nullable(NUMBER),
             "window_s": nullable(PAIR), "share": nullable(FIGURE), "requests": COUNT,
             "metrics": {"type": "object", "propertyNames": {"enum": list(steady.METRICS)},
                         "additionalProperties": nullable(obj(metric,
                                                              text=fields.STEADY_METRIC))}}
    assert tuple(props) == steady.BLOCK_KEYS
    assert tuple(metric) == steady.METRIC_KEYS
    return nullable(obj(props, text=fields.STEADY_STATE))


def _server() -> dict[str, Any]:
    """The `server` block (`servermetrics.py`)."""
    gauge = nullable(obj({"p50": NUMBER, "max": NUMBER}, text=fields.GAUGE))
    mean = nullable(NUMBER)
    spec = {"acceptance_rate": mean, "accepted_length": mean,
            "acceptance_rate_range": nullable(PAIR), "accepted_length_range": nullable(PAIR),
            "drafts": nullable(COUNT), "draft_tokens": nullable(COUNT),
            "accepted_tokens": nullable(COUNT), "source": {"enum": ["counters", "gauges"]}}
    diff = {"first_chunk_vs_ttft": mean, "e2e": mean}
    props = {"engine": nullable(STRING), "version": nullable(STRING),
             "max_model_len": nullable(COUNT), "metrics_url": nullable(STRING),
             "samples": COUNT, "requests": nullable(COUNT),
             "spec_decode": nullable(obj(spec, text=fields.SPEC_DECODE)),
             "requests_running": gauge, "requests_waiting": gauge, "kv_cache_usage": gauge,
             "prefix_cache_hit_rate": mean, "ttft_ms_mean": mean, "e2e_ms_mean": mean,
             "queue_time_ms_mean": mean, "prompt_tokens_mean": mean,
             "generation_tokens_mean": mean,
             "client_minus_server_ms": nullable(obj(diff, text=fields.CLIENT_MINUS_SERVER)),
             "effective_prefill_excl_queue_tok_s": mean, "null_reasons": REASONS}
    assert tuple(props) == servermetrics.SERVER_KEYS
    return nullable(obj(props, text=fields.SERVER))


def benchmark_schema() -> dict[str, Any]:
    """The JSON Schema of `anvil-serving.benchmark/v1` with anvil's added fields."""
    stamp = anchored(schema._STAMP.pattern)
    flags = {"no_thinking": BOOLEAN, "reasoning_effort": nullable(STRING),
             "shared_prefix_burst": BOOLEAN, "thinking_mode": nullable(STRING)}
    props: dict[str, Any] = {
        "schema": {"const": schema.SCHEMA},
        "run_id": {"type": "string",
                   "pattern": anchored(schema.RUN_ID.pattern)},
        "started_at": {"type": "string", "pattern": stamp},
        "finished_at": {"type": ["string", "null"], "pattern": stamp},
        "wall_clock_ms": or_null(FIGURE),
        "requests": COUNT, "completed": COUNT, "failed": COUNT,
        "failures": {"type": "array", "items": _failure()},
        **{k: {"type": ["integer", "null"]} for k in
           ("concurrency", "context_tokens", "max_context_tokens", "context_seed",
            "max_tokens")},
        **{k: or_null(STRING) for k in schema.TEXT_FIELDS},
        "context_distribution": or_null({"type": "object", "propertyNames":
                                         {"pattern": "^[0-9]+$"},
                                         "additionalProperties": COUNT}),
        "serve_flags": nullable(obj(flags, text=fields.SERVE_FLAGS)),
        "timing_methodology": _methodology(),
        "request_timings": {"type": "array", "items": _row()},
        "metrics": _metrics(),
        # anvil's added fields (checked in full by `anvil verify`)
        "partial": BOOLEAN,
        "ended_by": or_null({"enum": list(ENDED_BY)}),
        "end_reason": or_null(STRING),
        "warmup_requests": COUNT,
        "client": _client(),
        "prompt_calibration": or_null(obj(
            {"method": {"enum": list(schema.CALIBRATION_METHODS)},
             "planned_vs_counted_error_pct_max": or_null(NUMBER)}, ("method",),
            text=fields.CALIBRATION)),
        "shared_prefix": nullable(obj({"prefix_tokens": COUNT, "group_size": COUNT},
                                      text=fields.SHARED_PREFIX)),
        "goodput": nullable(obj({"criteria": STRINGS, "met": COUNT,
                                 "fraction": nullable(FIGURE)}, text=fields.GOODPUT)),
        "load": _load(),
        "steps": nullable({"type": "array", "items": _step()}),
        "server": _server(),
        "conversation": _conversation(),
        "endpoint": {"enum": list(ENDPOINTS)},
        "prompt_ids": {"const": True},
        "mix": _mix(),
        "cancel": nullable(obj({"plan": {"type": "object"}, "aborted": COUNT,
                                "share": nullable(FIGURE),
                                "phases": obj({p: COUNT for p in cancelblock.PHASE_KEYS},
                                              text=fields.CANCEL_PHASES)},
                               text=fields.CANCEL)),
        "dataset": nullable(obj({"file": STRING, "format": nullable(STRING),
                                 "entries": COUNT}, text=fields.DATASET)),
        "trace": nullable(obj({"file": STRING, "format": nullable(STRING),
                               "speed": FIGURE, "limit": nullable(COUNT),
                               "block_tokens": COUNT, "model": nullable(STRING),
                               "window_s": nullable({"type": "array", "items": nullable(
                                   NUMBER), "minItems": 2, "maxItems": 2}),
                               "requests": COUNT, "expected_reuse": NUMBER,
                               "reported_reuse": nullable(NUMBER)}, text=fields.TRACE)),
        "steady_state": _steady(),
        "request_headers": {"type": "object", "additionalProperties": STRING,
                            KEY: "a header's name"},
    }
    return document(schema.SCHEMA, "Generated by anvil_metrics/schemas/build.py from anvil's "
                    "field rules; shape and types only — `anvil verify` recomputes the "
                    "figures.", obj(props, sorted(schema.REQUIRED_FIELDS), text=fields.RUN))


GENERATORS = {schema.SCHEMA: benchmark_schema, SUMMARY_SCHEMA: verdicts.summary_schema,
              CHECKS_SCHEMA: verdicts.checks_schema}


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


FIELDS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "fields.md"  # in a checkout


def fields_page() -> str:
    """`docs/fields.md` as the generators give it (`fieldsdoc.py`)."""
    return fieldsdoc.markdown({which: GENERATORS[which]() for which in FILES})


if __name__ == "__main__":  # python -m anvil_metrics.schemas.build: the files, then the page
    write_files(Path(__file__).resolve().parent)
    if FIELDS_PAGE.parent.is_dir():  # a checkout of the repository, not an installed package
        FIELDS_PAGE.write_text(fields_page(), encoding="utf-8")
