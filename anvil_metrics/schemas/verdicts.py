"""The JSON Schemas of the two documents that judge a server rather than measure one run: a
campaign's `anvil-serving.public-benchmark-summary/v1` and `anvil check`'s
`anvil-serving.checks/v1`.

Why apart from `build.py`: the benchmark's schema is built from the post-processor's and the
catalogue's rules; these two from the summary's (`summary/verify.py`'s shape tables,
`summary/fields.py`'s words, `summary/functional.py`'s blocks) and the checks' (`docverify.py`,
`results.py`). Shape and types only: `anvil verify` recomputes the figures of both.
"""

from __future__ import annotations

from typing import Any

from anvil_metrics.checks import docverify
from anvil_metrics.checks.docverify import CASE_REQUIRED, REQUIRED, SUITE_REQUIRED
from anvil_metrics.checks.docverify import SCHEMA as CHECKS_SCHEMA
from anvil_metrics.checks.registry import SUITES
from anvil_metrics.checks.results import ERROR_KINDS, RESULTS
from anvil_metrics.checks.suite import CheckOptions
from anvil_metrics.post.significance import VERDICTS
from anvil_metrics.schemas.parts import (
    BOOLEAN,
    COUNT,
    FIGURE,
    NUMBER,
    PAIR,
    REASONS,
    STRING,
    STRINGS,
    described,
    document,
    keyed,
    nullable,
    obj,
    or_null,
)
from anvil_metrics.summary import fields
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
from anvil_metrics.summaryfigures import KNOWN_GATES

GATE_OUTCOMES = ("pass", "fail", "not_significant", "not_evaluated", "not_required")
CHECK_RESULTS = {"enum": list(RESULTS)}  # a suite's result, and a model's in the summary


# --- public-benchmark-summary/v1 --------------------------------------------------------------
def _performance_row() -> dict[str, Any]:
    props: dict[str, Any] = {k: STRING for k in ROW_LABELS}
    props.update({k: or_null(NUMBER) for k in (*ROW_FIGURES, *ROW_DELTAS)})
    for k in ROW_ADDED:
        props[k] = (COUNT if k == "runs" else REASONS if k == "null_reasons"
                    else or_null(PAIR) if k.endswith("_ci95_percent")
                    else {"enum": [*VERDICTS, None]} if k.endswith("_verdict")
                    else or_null({"type": "number", "minimum": 0}))
    return obj(props, ROW_LABELS, True, fields.ROW)


def _check_class() -> dict[str, Any]:
    """One check class pooled over a variant's runs (`summary/gates.py`)."""
    rate = nullable(FIGURE)
    return obj({"name": STRING, "check": STRING, "runs": COUNT, "judged": COUNT,
                "passed": COUNT, "pass_rate": rate, "pass_rate_ci95_low": rate,
                "pass_rate_ci95_high": rate}, tuple(fields.CHECK_CLASS), True, fields.CHECK_CLASS)


def _gate() -> dict[str, Any]:
    number, names = nullable(NUMBER), STRINGS
    figures = {"candidate": STRING, "incumbent": STRING, "field": STRING,
               "candidate_mean": number, "incumbent_mean": number,
               "improvement_percent": number, "improvement_ci95_percent": nullable(PAIR),
               "mann_whitney_p": number, "candidate_runs": COUNT, "incumbent_runs": COUNT,
               "runs": COUNT, "saturated_runs": names, "runs_without_verdict": names,
               "checks": COUNT, "failed": names,
               "check_classes": {"type": "array", "items": _check_class()}}
    return obj({"gate": {"enum": list(KNOWN_GATES)}, "threshold": {},
                "outcome": {"enum": list(GATE_OUTCOMES)},
                "figures": obj(figures, text=fields.GATE_FIGURES), "reason": STRING},
               ("gate", "threshold", "outcome", "figures", "reason"), True, fields.GATE)


def _functional() -> dict[str, Any]:
    """`functional` (`summary/functional.py`): one block per model (or `both_models` /
    `all_models`), the quality parts and the near-limit retrieval per model."""
    per_model = obj({k: STRING if k == "tools" else nullable(BOOLEAN)
                     if k == "thinking_disabled_reasoning_leakage" else CHECK_RESULTS
                     for k in fields.MODEL_FUNCTIONAL}, text=fields.MODEL_FUNCTIONAL,
                    patternProperties={"^retrieval(_[0-9]+k)?$": keyed(
                        "retrieval_<N>k", CHECK_RESULTS, *fields.RETRIEVAL_FIELD)})
    quality = {"type": "object", "additionalProperties": keyed(
        "<model>", {"type": "object", "additionalProperties": keyed(
            "<part>", STRING, "", "passed/total of the part (the worst variant's)")},
        "", "one model's quality parts")}
    near = obj({"requested_context_tokens": nullable(COUNT)}, text=fields.NEAR_LIMIT,
               patternProperties={"_elapsed_seconds$": keyed(
                   "<model>_elapsed_seconds", nullable(FIGURE), *fields.NEAR_LIMIT_SECONDS)},
               additionalProperties=keyed("<model>", CHECK_RESULTS, *fields.NEAR_LIMIT_MODEL))
    return obj({"quality": quality, "near_limit_retrieval": near}, text=fields.FUNCTIONAL,
               additionalProperties=keyed("<model>", per_model, "", "one model's functional "
                                          "results, keyed as the model's label with - and . "
                                          "as _; both_models (two models) or all_models "
                                          "(more) when every model's are the same"))


def _multimodal() -> dict[str, Any]:
    model = obj({"general_image_seconds": nullable(FIGURE), "ocr_seconds": nullable(FIGURE),
                 "result": CHECK_RESULTS}, text=fields.MULTIMODAL_MODEL)
    return obj({"transport": nullable(STRING), "mtp_enabled": BOOLEAN,
                "not_tested": STRINGS}, text=fields.MULTIMODAL,
               additionalProperties=keyed("<model>", model, "", "one model's image checks"))


def _restoration() -> dict[str, Any]:
    alias = obj({"alias": STRING, "result": {"enum": ["pass", "fail"]}, "listed": BOOLEAN,
                 "answered": BOOLEAN, "attempts": COUNT,
                 "retried_after": {"type": ["integer", "string", "null"]},
                 "retried_request": nullable(STRING), "reason": nullable(STRING)},
                text=fields.ALIAS)
    return obj({"result": {"enum": ["pass", "fail"]}, "router_aliases": STRINGS,
                "all_tiers_admitting": BOOLEAN, "checked_at": nullable(STRING),
                "aliases": {"type": "array", "items": alias}}, text=fields.RESTORATION)


def _campaign() -> dict[str, Any]:
    return obj({"name": STRING, "campaign_file": STRING, "scenario_file": STRING,
                "candidate": STRING, "incumbent": nullable(STRING),
                "baseline": nullable(STRING), "planned_runs": COUNT,
                "summarized_runs": COUNT, "folder": STRING}, text=fields.CAMPAIGN)


def _statistics() -> dict[str, Any]:
    boot = obj({"resamples": COUNT, "seed": COUNT, "confidence": FIGURE, "method": STRING},
               text=fields.BOOTSTRAP)
    return obj({"delta": STRING, "bootstrap": boot, "mann_whitney": STRING},
               text=fields.STATISTICS)


def summary_schema() -> dict[str, Any]:
    """The JSON Schema of `anvil-serving.public-benchmark-summary/v1` with anvil's added
    blocks; the operator's facts (hardware, runtime, models, …) are free objects."""
    protocol = {k: or_null(COUNT) for k in PROTOCOL_COUNTS}
    telemetry = obj({"model": STRING, "speculation": STRING,
                     **{k: or_null(PAIR) for k in TELEMETRY_RANGES},
                     "runs_sampled": COUNT, "runs": COUNT, "unsampled_runs": STRINGS,
                     "null_reasons": REASONS}, ("model",), True, fields.TELEMETRY)
    props: dict[str, Any] = {
        "schema": {"const": SUMMARY_SCHEMA},
        "date": {"type": ["string", "null"], "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "decision": {"enum": list(DECISIONS)},
        "performance_protocol": obj({**protocol, "aggregation": STRING,
                                     "null_reasons": REASONS}, PROTOCOL_COUNTS,
                                    text=fields.PROTOCOL),
        "performance": {"type": "array", "items": _performance_row()},
        "sampled_speculative_telemetry": {"type": "array", "items": telemetry},
        "checks_under_load": {"type": "array", "items": obj(
            {"model": STRING, "speculation": STRING, "runs": COUNT,
             "classes": {"type": "array", "items": _check_class()}},
            tuple(fields.CHECKS_UNDER_LOAD), True, fields.CHECKS_UNDER_LOAD)},
        "functional": _functional(),
        "multimodal": _multimodal(),
        "retained_failures": STRINGS,
        "restoration": _restoration(),
        # anvil's added blocks
        "gates": {"type": "array", "items": _gate()},
        "decision_reasons": STRINGS,
        "statistics": _statistics(),
        "not_included": obj({k: STRING for k in fields.NOT_INCLUDED}, text=fields.NOT_INCLUDED,
                            additionalProperties=STRING),
        "campaign": _campaign(),
    }
    assert set(props) == set(COMPUTED_KEYS), "the summary's members are summary.folder's"
    return document(SUMMARY_SCHEMA, "Generated by anvil_metrics/schemas/build.py from "
                    "anvil's field rules; shape and types only — `anvil verify` recomputes "
                    "the figures from the campaign's runs.",
                    obj(props, SHAPE_REQUIRED, text=fields.TOP))


# --- checks/v1 ----------------------------------------------------------------------------------
def checks_schema() -> dict[str, Any]:
    """anvil-serving.checks/v1 (`anvil check`): the document, each suite (one definition,
    `$defs/suite`, that every suite's property refers to) and each case, from
    `checks.docverify`'s required fields and words and `checks.results`' values."""
    retry = obj({"attempt": COUNT, "status": or_null(COUNT), "reason": STRING,
                 "wait_s": FIGURE}, ("attempt", "status", "reason", "wait_s"), True,
                docverify.RETRY)
    case = obj({"id": STRING, "passed": BOOLEAN, "expected": {}, "answer": {},
                "error": or_null(STRING), "elapsed_s": FIGURE,
                "error_kind": {"enum": list(ERROR_KINDS)},
                "retries": {"type": "array", "items": retry}}, CASE_REQUIRED,
               text=docverify.CASE)
    suite = obj({"result": {"enum": list(RESULTS)}, "passed": COUNT, "total": COUNT,
                 "elapsed_s": FIGURE, "error": STRING,
                 "cases": {"type": "array", "items": case}}, SUITE_REQUIRED,
                text=docverify.SUITE)
    options = {"context_tokens": COUNT, "near_limit_tokens": nullable(COUNT),
               "timeout_s": FIGURE, "long_timeout_s": FIGURE, "seed": {"type": "integer"},
               "max_tokens": nullable(COUNT), "transport": nullable(STRING),
               "speculation": nullable(STRING)}
    assert tuple(options) == tuple(CheckOptions.__dataclass_fields__)
    assert set(docverify.SUITE_TEXT) == set(SUITES)
    checks = {name: described({"$ref": "#/$defs/suite"}, "", f"the {name} suite: "
                              f"{docverify.SUITE_TEXT[name]}") for name in SUITES}
    props = {"schema": {"const": CHECKS_SCHEMA}, "model": or_null(STRING), "host": STRING,
             "started_at": STRING, "finished_at": STRING, "engine": or_null(STRING),
             "engine_version": or_null(STRING), "max_model_len": or_null(COUNT),
             "options": obj(options, text=docverify.OPTIONS),
             "checks": obj(checks, (), True)}
    return document(CHECKS_SCHEMA, "Generated by anvil_metrics/schemas/build.py; shape and "
                    "types only — `anvil verify` recomputes each suite's result from its "
                    "cases.", {**obj(props, REQUIRED, text=docverify.FIELDS),
                               "$defs": {"suite": suite}})
