"""The run fields of an `anvil-serving.benchmark/v1` document: their typed definition
(`RunFields`, a failure's `Failure`) and the rules a type cannot say.

Why its own module: the same definition judges a document `anvil verify` reads, the one
anvil builds, and — before any document exists — the raw file's `"run"` header and
`run_end` line that will become its run fields (`rawread.py` names a damaged one with its
line); the JSON Schema and `docs/fields.md` take the fields' types, units and words from
it (`schemas/build.py`). The blocks beside the run fields are defined in their own modules
and listed in `blocks.BLOCKS`; a row and `metrics` are the catalogue's (`catalogtypes.py`)
and are recomputed by `verify.py`. Here too: the helpers every message uses (`same`, exact
equality as verify means it, `fmt`, a value as the file shows it, `differing`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from anvil_metrics import fieldtypes
from anvil_metrics.fieldtypes import FMT_MAX as FMT_MAX
from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.fieldtypes import fmt as fmt
from anvil_metrics.headers import REDACTED, is_credential
from anvil_metrics.jsonio import JsonValue
from anvil_metrics.post.catalogtypes import Methodology, Metrics
from anvil_metrics.post.rowmodel import Row
from anvil_metrics.records import ENDED_BY, FAILURE_KINDS, PARTIAL_ENDS, PHASES
from anvil_metrics.urls import strip_credentials

SCHEMA = "anvil-serving.benchmark/v1"

# Run parameters copied from the raw header's `params` (missing → null).
PARAM_KEYS = (
    "measurement_protocol",
    "concurrency",
    "context_tokens",
    "max_context_tokens",
    "context_distribution",
    "context_seed",
    "max_tokens",
    "model",
    "engine",
    "gpu",
    "gpus",
    "tier",
    "manifest",
    "source_recipe",
    "base_url",
    "serve_flags",
    "run_nonce",
    "prompt_calibration",
    "shared_prefix",
)
CALIBRATION_METHODS = ("tokenize", "probe", "local_tokenizer", "none")

# The spec's `benchmark-YYYYMMDDTHHMMSSZ`; the recorder appends `-2`, `-3`, … when two runs
# start in the same second, to keep run ids unique as the spec also requires.
RUN_ID = re.compile(r"benchmark-\d{8}T\d{6}Z(-[1-9]\d*)?")
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
_UTC = "a UTC ISO-8601 …Z stamp"


def _anchored(pattern: re.Pattern[str]) -> str:
    return f"^(?:{pattern.pattern})$"


UtcStamp = Annotated[str, Meta(pattern=_anchored(_STAMP),
                               extra_json_schema={fieldtypes.SHAPE: _UTC})]
RunId = Annotated[str, Meta(pattern=_anchored(RUN_ID), extra_json_schema={
    fieldtypes.SHAPE: "like benchmark-YYYYMMDDTHHMMSSZ[-N]"})]


def _given(what: str) -> Any:
    return Annotated[str | None, described("", f"{what}, as given; null when unknown")]


class ServeFlags(Struct, kw_only=True):
    """The request-side switches the scenario set, reported as given."""

    no_thinking: Annotated[bool | UnsetType, described(
        "", 'true when thinking_mode is "off" (the older spelling)')] = UNSET
    reasoning_effort: Annotated[str | None | UnsetType, described(
        "", 'the reasoning_effort sent with each request ("low", "medium", "high"); null '
            "for none")] = UNSET
    shared_prefix_burst: Annotated[bool | UnsetType, described(
        "", "true when requests come in groups that share a prefix (shared_prefix says its "
            "size)")] = UNSET
    thinking_mode: Annotated[str | None | UnsetType, described(
        "", 'whether the request asks the model to think: "default" (not said), "on" or '
            '"off"')] = UNSET


class Calibration(Struct, forbid_unknown_fields=True, kw_only=True):
    """How planned prompt sizes were matched to the server's token count, and the worst
    miss."""

    method: Annotated[Literal[CALIBRATION_METHODS], described(  # type: ignore[valid-type]
        "", "how prompts were sized: the server's /tokenize, probe requests, a local "
            "tokenizer, or none")]
    planned_vs_counted_error_pct_max: Annotated[float | None | UnsetType, described(
        "%", "max over rows with both of |prompt_tokens − planned_context_tokens| / planned "
             "× 100, rows with images or audio left out (their media are in prompt_tokens); "
             "null when no row has both")] = UNSET


class SharedPrefix(Struct, forbid_unknown_fields=True):
    """The shared prefix of a run whose requests come in groups."""

    prefix_tokens: Annotated[Count, described("tok", "the shared text's size as a lone chat "
                                                     "prompt")]
    group_size: Annotated[Count, described("", "requests per group sharing one prefix")]


class Failure(Struct, forbid_unknown_fields=True, kw_only=True):
    """One failed measured request."""

    request_index: Annotated[Count, described(
        "", "the failed request's place in the measured order, numbered densely with the "
            "rows'")]
    kind: Annotated[Literal[FAILURE_KINDS], described(  # type: ignore[valid-type]
        "", "why it failed, one of the failure kinds")]
    http_status: Annotated[int | None, described(
        "", "the response's HTTP status when one was received, else null")]
    message: Annotated[str, described(
        "", "what went wrong in words (the server's own message where it sent one)")]
    phase: Annotated[Literal[PHASES] | None, described(  # type: ignore[valid-type]
        "", "where the request was when it failed (connect, headers, prefill, decode); null "
            "when unknown")]
    step: Annotated[Count | None | UnsetType, described(
        "", "the step in force when the request started (stepped runs only)")] = UNSET
    job_id: Annotated[Count | UnsetType, described(
        "", "the run's job number of the failed request (agent jobs only; the rows' "
            "job_id): a job with a failed request was cut")] = UNSET
    replica: Annotated[Count | UnsetType, described(
        "", "the replica the failed request was sent to (--host URL,URL only; the rows' "
            "replica)")] = UNSET


class RunFields(Struct, kw_only=True):
    """An `anvil-serving.benchmark/v1` document: the spec's run fields, the row list and
    the metrics block, and anvil's added run fields (optional in a file, always written);
    the blocks of `blocks.BLOCKS` beside them."""

    schema: Annotated[Literal[SCHEMA], described(  # type: ignore[valid-type]
        "", 'the document\'s kind and version, "anvil-serving.benchmark/v1"')]
    run_id: Annotated[RunId, described(
        "", "benchmark-YYYYMMDDTHHMMSSZ of the run's start (UTC), with -2, -3 … when two "
            "runs start in the same second: unique per run")]
    started_at: Annotated[UtcStamp, described(
        "", "UTC ISO-8601 …Z wall-clock stamp of the run's start")]
    finished_at: Annotated[UtcStamp | None, described(
        "", "UTC ISO-8601 …Z wall-clock stamp of the run's end (the run_end line's, else the "
            "last record's stamp); null only in a partial run")]
    wall_clock_ms: Annotated[Figure | None, described(
        "ms", "monotonic duration of the measured run: from the first measured request's "
              "start to the last one's end (or failure), gaps included, warm-ups not; null "
              "without measured requests")]
    requests: Annotated[Count, described(
        "", "measured requests issued (completed + failed; warm-ups and requests outside the "
            "measured window are not counted)")]
    completed: Annotated[Count, described(
        "", "measured requests that completed: the rows of request_timings")]
    failed: Annotated[Count, described(
        "", "measured requests that failed: the entries of failures")]
    failures: Annotated[list[Failure], described(
        "", "one entry per failed measured request, in request_index order")]
    concurrency: Annotated[int | None, described(
        "", "simultaneous streams (users) the load held; in a stepped run the most any step "
            "held")]
    context_tokens: Annotated[int | None, described("tok", "the context window under test")]
    max_context_tokens: Annotated[int | None, described(
        "tok", "the context limit: a planned prompt plus max_tokens must fit in it")]
    context_distribution: Annotated[
        dict[Annotated[str, Meta(pattern="^[0-9]+$")], Count] | None, described(
            "", "planned prompt size in tokens (a decimal string) → requests at that size, "
                "as the scenario planned them; for a run without a request budget whose "
                "scenario gave none, the measured requests issued at each size")]
    context_seed: Annotated[int | None, described(
        "", "the seed that makes the run's prompts reproducible")]
    max_tokens: Annotated[int | None, described("tok", "the completion cap sent with each "
                                                       "request")]
    model: Annotated[str | None, described(
        "", "the model measured, as given by the user or discovered from the server; null "
            "when unknown")]
    engine: Annotated[str | None, described(
        "", "the serving engine, as given or discovered; null when unknown")]
    gpu: _given("the accelerator the server ran on")
    tier: _given("the serving tier")
    manifest: _given("the deployment manifest")
    source_recipe: _given("the recipe the server was built from")
    base_url: Annotated[str | None, described(
        "", "the endpoint the run measured, with any user:password@ removed")]
    measurement_protocol: Annotated[str | None, described(
        "", "the name of the scenario (protocol) that produced the run")]
    serve_flags: Annotated[ServeFlags | None, described(
        "", "the request-side switches the scenario set, reported as given")]
    timing_methodology: Annotated[Methodology, described(
        "", "the definitions of the clock and of each timing metric in words: key → "
            "sentence")]
    request_timings: Annotated[list[Row], described(
        "", "one row per completed measured request, in request_index order")]
    metrics: Annotated[Metrics, described(
        "", "the aggregates over request_timings (nearest-rank percentiles, sums, counts "
            "and rates)")]
    # anvil's added run fields
    run_nonce: Annotated[str | None | UnsetType, described(
        "", "the random value that makes this run's prompts unique, so a rerun with the same "
            "seed does not hit a server's prefix cache")] = UNSET
    partial: Annotated[bool | UnsetType, described(
        "", "true when the run did not do what it planned: it was ended by a signal or "
            "aborted (ended_by), or the file was rebuilt from the raw records of a run that "
            "did not finish")] = UNSET
    ended_by: Annotated[Literal[ENDED_BY] | None | UnsetType, described(  # type: ignore
        "", "why the run ended: requests (its measured requests were all done), duration "
            "(its duration was over), stopped (Locust stopped it: the web UI's stop, its -t, "
            "a shape's end), signal (SIGINT or SIGTERM), aborted (anvil ended it: the server "
            "stopped answering); null when the run did not finish (no run_end line) or the "
            "file predates the field")] = UNSET
    end_reason: Annotated[str | None | UnsetType, described(
        "", "for a run ended by a signal or aborted, one line saying what happened (which "
            "signal; which server stopped answering, when and how); else null")] = UNSET
    prompt_calibration: Annotated[Calibration | None | UnsetType, described(
        "", "how planned prompt sizes were matched to the server's token count, and the "
            "worst miss")] = UNSET
    shared_prefix: Annotated[SharedPrefix | None | UnsetType, described(
        "", "{prefix_tokens, group_size} when serve_flags.shared_prefix_burst is true, else "
            "null")] = UNSET
    warmup_requests: Annotated[Count | UnsetType, described(
        "", "the raw file's requests left out of the measurement: the warm-up requests run "
            "before measuring and, with --warmup/--cooldown, those started outside the "
            "window (load.outside_window); they are in requests.jsonl, not in "
            "request_timings, failures or the counts")] = UNSET
    gpus: Annotated[Count | None | UnsetType, described(
        "", "how many GPUs served the run (--gpus, the scenario's meta.gpus), as given: "
            "per-GPU figures divide by it (the jobs block's jobs_per_hour_per_gpu); null: "
            "not given")] = UNSET


FIELDS = msgspec.structs.fields(RunFields)
# checked whole by recomputation from the catalogue (`verify.py`), not field by field
RECOMPUTED = ("request_timings", "metrics")


def header_problems(headers: Mapping[str, str]) -> list[str]:
    """Every credential's value in `request_headers` redacted (the value itself is never
    shown: it may be the secret)."""
    return [f"request_headers.{k}: a credential's value is stored, which a benchmark never "
            f"does (it must be {REDACTED!r})" for k, v in headers.items()
            if is_credential(k) and v != REDACTED]


def redact_url(url: Any) -> Any:
    """`url` without `user:password@` (the spec: "with any credentials removed")."""
    return strip_credentials(url) if isinstance(url, str) else url



def same(a: Any, b: Any) -> bool:
    """Exact equality as verify means it: same JSON type (int ≠ float, null ≠ anything
    else), floats equal bit for bit (0.0 ≠ -0.0, NaN ≠ NaN), containers element-wise."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def set_without_block(rows: Any, columns: Iterable[str], block: str) -> list[str]:
    """verify's line for each of the row `columns` some row sets in a file without the
    `block` that gives them meaning (`rows`: the file's `RowColumns`, None when malformed)."""
    if rows is None:
        return []
    return [f"request_timings[].{c}: set, but the file has no {block} block" for c in columns
            if c not in rows.absent and rows.present[c].any()]


def differing(path: str, got: Mapping[str, JsonValue], want: Mapping[str, JsonValue],
              keys: Iterable[str], source: str = "the rows") -> list[str]:
    """verify's line for each of `keys` whose value in `got` (a block of the file) is not
    `same` as in `want` (the block recomputed from `source`): `{path}.{key}: file has …,
    recomputed … from {source}`."""
    return [f"{path}.{key}: file has {fmt(got[key])}, recomputed {fmt(want[key])} from "
            f"{source}" for key in keys if not same(got[key], want[key])]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_count(v: Any) -> bool:
    return is_int(v) and v >= 0


def is_ms(v: Any) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v >= 0


def check_run_fields(doc: Mapping[str, JsonValue], problems: list[str], *,
                     whole: bool = True) -> None:
    """The run fields' problems: each field against its definition (`RunFields`), then the
    rules a type cannot say; `whole=False` for part of a document (a raw header's fields),
    where the fields it does not hold are not missing."""
    for f in FIELDS:
        if f.name not in doc:
            if whole and f.required:
                problems.append(f"{f.name}: missing")
        elif f.name not in RECOMPUTED:
            problems += fieldtypes.problems(doc[f.name], f.type, f.name)
    fin = doc.get("finished_at")
    if "finished_at" in doc and fin is None and doc.get("partial") is not True:
        problems.append("finished_at: null is allowed only in a partial run")
    url = doc.get("base_url")
    if isinstance(url, str) and strip_credentials(url) != url.strip():
        # the value itself is not shown: it is the secret
        problems.append("base_url: holds credentials (a user:password@ part), which a "
                        "benchmark never stores; `anvil postprocess` removes them")
    if doc.get("ended_by") in PARTIAL_ENDS and doc.get("partial") is not True:
        problems.append(f"partial: a run ended by {fmt(doc['ended_by'])} is partial (true), "
                        f"file has {fmt(doc.get('partial'))}")
    flags = doc.get("serve_flags")
    if isinstance(flags, dict) and flags.get("shared_prefix_burst") is True and (
            "shared_prefix" in doc and doc["shared_prefix"] is None):
        problems.append("shared_prefix: serve_flags.shared_prefix_burst is true, so it must be "
                        "{prefix_tokens, group_size} integers; file has null")


def raw_header_problems(header: Mapping[str, JsonValue]) -> list[str]:
    """`check_run_fields`'s problems with the fields a raw `"run"` header (its `run_id`,
    `started_at` and `params`) becomes in a benchmark, or []: the raw reader asks, so that
    a damaged header is named with its line rather than when the benchmark built from it
    fails verification."""
    params = header.get("params") or {}
    doc = {"schema": SCHEMA, **{key: params.get(key) for key in PARAM_KEYS},
           "run_id": header.get("run_id"), "started_at": header.get("started_at")}
    doc["base_url"] = redact_url(doc["base_url"])  # as the build does
    problems: list[str] = []
    check_run_fields(doc, problems, whole=False)
    return problems


def end_problems(obj: Mapping[str, JsonValue]) -> list[str]:
    """Problems with why a run ended, in a raw `run_end` line or a benchmark: `ended_by`
    and `end_reason` against their definitions (`RunFields`)."""
    types = {f.name: f.type for f in FIELDS}
    return [p for key in ("ended_by", "end_reason") if key in obj
            for p in fieldtypes.problems(obj[key], types[key], key)]
