"""The field rules of an `anvil-serving.benchmark/v1` document, apart from its numbers.

Why its own module: the same rules judge a document `anvil verify` reads, the one anvil
builds, and — before any document exists — the raw file's `"run"` header and `run_end`
line that will become its run fields and `client` block (`rawread.py` names a damaged one
with its line). Row and aggregate figures are the catalogue's (`catalog.py`) and are
checked by `verify.py`; here: the run fields, the failures and the `client` block, and the
two helpers every message uses (`same`, exact equality as verify means it, and `fmt`, a
value as the file shows it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from anvil_metrics import catalog
from anvil_metrics.fieldtypes import FMT_MAX as FMT_MAX
from anvil_metrics.fieldtypes import fmt as fmt
from anvil_metrics.headers import REDACTED, is_credential
from anvil_metrics.post import saturation
from anvil_metrics.records import COUNT_LIMIT, ENDED_BY, PARTIAL_ENDS, failure_field_problems
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
    "tier",
    "manifest",
    "source_recipe",
    "base_url",
    "serve_flags",
    "run_nonce",
    "prompt_calibration",
    "shared_prefix",
)

# Top-level fields every benchmark/v1 file has (the spec's "Run fields" plus the row list
# and the metrics block). The fields anvil adds are optional in a file but always written.
REQUIRED_FIELDS = frozenset(
    {
        "schema", "run_id", "started_at", "finished_at", "wall_clock_ms", "requests",
        "completed", "failed", "failures", "concurrency", "context_tokens",
        "max_context_tokens", "context_distribution", "context_seed", "max_tokens", "model",
        "engine", "gpu", "tier", "manifest", "source_recipe", "base_url",
        "measurement_protocol", "serve_flags", "timing_methodology", "request_timings",
        "metrics",
    }
)
# Run fields that are names or texts: a string, or null when unknown (as in the example).
TEXT_FIELDS = ("model", "engine", "gpu", "tier", "manifest", "source_recipe", "base_url",
               "measurement_protocol", "run_nonce")
FAILURE_FIELDS = ("request_index", "kind", "http_status", "message", "phase")
CALIBRATION_METHODS = ("tokenize", "probe", "local_tokenizer", "none")
CLIENT_KEYS = ("loop_lag_ms", "cpu_pct", "achieved_concurrency", "saturated", "verdict",
               "start_delay_ms")
CLIENT_SPEC_KEYS = CLIENT_KEYS[:4]  # the spec's `client` fields; the other two are anvil's

# The spec's `benchmark-YYYYMMDDTHHMMSSZ`; the recorder appends `-2`, `-3`, … when two runs
# start in the same second, to keep run ids unique as the spec also requires.
RUN_ID = re.compile(r"benchmark-\d{8}T\d{6}Z(-[1-9]\d*)?")
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def header_problems(headers: Any) -> list[str]:
    """`request_headers` (absent: fine): name → text, and every credential's value redacted
    (the value itself is never shown: it may be the secret)."""
    if headers is None:
        return []
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return ["request_headers: expected an object of header names and text values"]
    return [f"request_headers.{k}: a credential's value is stored, which a benchmark never "
            f"does (it must be {REDACTED!r})" for k, v in headers.items()
            if is_credential(k) and v != REDACTED]


def redact_url(url: Any) -> Any:
    """`url` without `user:password@` (the spec: "with any credentials removed")."""
    return strip_credentials(url) if isinstance(url, str) else url



def client_block(client: Mapping[str, Any] | None,
                  figures: Callable[[], tuple[float | None, dict[str, Any] | None]]
                  ) -> dict[str, Any] | None:
    """The `client` health block: the load generator's own figures from the raw `run_end`
    (loop lag, CPU, the saturation verdict; missing keys → null) and, from the records,
    `achieved_concurrency` and `start_delay_ms` (`figures()`; see `saturation.py`)."""
    if client is None:
        return None
    block = {key: client.get(key) for key in CLIENT_KEYS}
    lag = block["loop_lag_ms"]
    if isinstance(lag, dict):  # the spec's {p50, p99, max}, a missing one null
        block["loop_lag_ms"] = {"p50": None, "p99": None, "max": None, **lag}
    if block["saturated"] is None:  # figures from before the verdict existed
        sat, reasons = saturation.health_verdict(client)
        block["saturated"], block["verdict"] = sat, saturation.verdict_text(sat, reasons)
    elif block["verdict"] is None:
        block["verdict"] = saturation.verdict_text(block["saturated"], [])
    block["achieved_concurrency"], block["start_delay_ms"] = figures()
    return block



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


def keys_problem(name: str, block: Any, keys: Sequence[str]) -> str | None:
    """verify's line for a block that is not an object with exactly `keys`, else None."""
    if isinstance(block, dict) and set(block) == set(keys):
        return None
    return (f"{name}: expected an object with keys {list(keys)}, file has "
            f"{fmt(block if not isinstance(block, dict) else sorted(block))}")


def set_without_block(rows: Any, columns: Iterable[str], block: str) -> list[str]:
    """verify's line for each of the row `columns` some row sets in a file without the
    `block` that gives them meaning (`rows`: the file's `RowColumns`, None when malformed)."""
    if rows is None:
        return []
    return [f"request_timings[].{c}: set, but the file has no {block} block" for c in columns
            if c not in rows.absent and rows.present[c].any()]


def differing(path: str, got: Mapping[str, Any], want: Mapping[str, Any],
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


def is_float(v: Any) -> bool:
    return isinstance(v, float) and math.isfinite(v)


# row field -> (check, description, nullable)

def _is_row_count(v: Any) -> bool:
    return is_int(v) and 0 <= v < COUNT_LIMIT


# a row field's JSON type by its catalogue kind: (check, what it must be)
_KIND_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "count": (_is_row_count, "a non-negative integer below 2**53"),
    "duration": (is_ms, "a non-negative float"),
    "float": (is_float, "a float"),
    "source": (lambda v: v in catalog.OUTPUT_TOKEN_SOURCES, '"usage" or "chunks"'),
}


def _row_type(f: catalog.RowField) -> tuple[Callable[[Any], bool], str, bool]:
    check, what = _KIND_TYPES[f.kind]
    if f.presence == "reported":
        what += " (omit the field when not reported)"
    return check, what, f.nullable


# row field -> (check, what it must be, nullable)
ROW_TYPES: dict[str, tuple[Callable[[Any], bool], str, bool]] = {
    f.name: _row_type(f) for f in catalog.ROW}


def check_run_fields(doc: dict[str, Any], problems: list[str], *, whole: bool = True) -> None:
    """The run fields' problems; `whole=False` for part of a document (a raw header's
    fields), where the fields it does not hold are not missing."""
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema: file has {fmt(doc.get('schema'))}, expected {fmt(SCHEMA)}")
    for key in sorted(REQUIRED_FIELDS - doc.keys()) if whole else ():
        problems.append(f"{key}: missing")
    run_id = doc.get("run_id")
    if "run_id" in doc and not (isinstance(run_id, str) and RUN_ID.fullmatch(run_id)):
        problems.append(f"run_id: {fmt(run_id)} is not benchmark-YYYYMMDDTHHMMSSZ[-N]")
    if "started_at" in doc and not (
        isinstance(doc["started_at"], str) and _STAMP.fullmatch(doc["started_at"])
    ):
        problems.append(f"started_at: {fmt(doc['started_at'])} is not a UTC ISO-8601 …Z stamp")
    fin = doc.get("finished_at")
    if "finished_at" in doc and not (
        (isinstance(fin, str) and _STAMP.fullmatch(fin))
        or (fin is None and doc.get("partial") is True)
    ):
        problems.append(
            f"finished_at: {fmt(fin)} is not a UTC ISO-8601 …Z stamp "
            "(null is allowed only in a partial run)"
        )
    for key in ("concurrency", "context_tokens", "max_context_tokens", "context_seed",
                "max_tokens"):
        if doc.get(key) is not None and not is_int(doc[key]):
            problems.append(f"{key}: expected an integer or null, file has {fmt(doc[key])}")
    for key in TEXT_FIELDS:
        if doc.get(key) is not None and not isinstance(doc[key], str):
            problems.append(f"{key}: expected a string or null, file has {fmt(doc[key])}")
    url = doc.get("base_url")
    if isinstance(url, str) and strip_credentials(url) != url.strip():
        # the value itself is not shown: it is the secret
        problems.append("base_url: holds credentials (a user:password@ part), which a "
                        "benchmark never stores; `anvil postprocess` removes them")
    problems += header_problems(doc.get("request_headers"))
    if "partial" in doc and not isinstance(doc["partial"], bool):
        problems.append(f"partial: expected true or false, file has {fmt(doc['partial'])}")
    problems += end_problems(doc)
    if doc.get("ended_by") in PARTIAL_ENDS and doc.get("partial") is not True:
        problems.append(f"partial: a run ended by {fmt(doc['ended_by'])} is partial (true), "
                        f"file has {fmt(doc.get('partial'))}")
    if "warmup_requests" in doc and not is_count(doc["warmup_requests"]):
        problems.append(
            f"warmup_requests: expected a non-negative integer, file has "
            f"{fmt(doc['warmup_requests'])}"
        )
    if "timing_methodology" in doc and not (
        isinstance(doc["timing_methodology"], dict)
        and all(isinstance(v, str) for v in doc["timing_methodology"].values())
    ):
        problems.append("timing_methodology: expected an object of strings")
    cal = doc.get("prompt_calibration")
    if cal is not None and not (
        isinstance(cal, dict) and cal.get("method") in CALIBRATION_METHODS
    ):
        problems.append(
            f"prompt_calibration: expected {{method: one of {list(CALIBRATION_METHODS)}, "
            f"planned_vs_counted_error_pct_max}}, file has {fmt(cal)}"
        )
    flags = doc.get("serve_flags")
    if flags is not None and not isinstance(flags, dict):
        problems.append(f"serve_flags: expected an object or null, file has {fmt(flags)}")
    elif (
        isinstance(flags, dict)
        and flags.get("shared_prefix_burst") is True
        and "shared_prefix" in doc
    ):
        sp = doc["shared_prefix"]
        if not (isinstance(sp, dict) and is_count(sp.get("prefix_tokens"))
                and is_count(sp.get("group_size"))):
            problems.append(
                "shared_prefix: serve_flags.shared_prefix_burst is true, so it must be "
                f"{{prefix_tokens, group_size}} integers; file has {fmt(sp)}"
            )





def _is_number(v: Any) -> bool:
    """A finite JSON number, integer or not (JSON may write a whole figure as 0)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_figure(v: Any) -> bool:
    return _is_number(v) and v >= 0


def check_client(doc: dict[str, Any], problems: list[str]) -> None:
    """The `client` block, where there is one: an object with the spec's keys (null where
    not measured) and anvil's two, nothing else; figures that are non-negative numbers,
    p50 <= p99 <= max; `saturated` exactly when the block's own loop lag p99 and CPU cross
    `saturation`'s limits (in a distributed run they are the worst worker's, whose verdict
    decides), and a `verdict` that says the same."""
    client = doc.get("client")
    if client is None:
        return
    if not isinstance(client, dict):
        problems.append(f"client: expected an object or null, file has {fmt(client)}")
        return
    check_keys("client", client, CLIENT_SPEC_KEYS, CLIENT_KEYS, problems,
                missing="missing (null when it was not measured)")
    p99 = _check_quantiles(client, "loop_lag_ms", _LAG_EXTRA, _is_figure,
                           "a non-negative number", problems)
    _check_quantiles(client, "start_delay_ms", {}, _is_number, "a number", problems)
    for key in ("cpu_pct", "achieved_concurrency"):
        v = client.get(key)
        if v is not None and not _is_figure(v):
            problems.append(f"client.{key}: expected a non-negative number or null, "
                            f"file has {fmt(v)}")
    saturated = client.get("saturated")
    if saturated is not None and not isinstance(saturated, bool):
        problems.append(f"client.saturated: expected true, false or null, "
                        f"file has {fmt(saturated)}")
        return
    cpu = client.get("cpu_pct")
    want, _ = saturation.verdict(p99, cpu if _is_figure(cpu) else None)
    if saturated is not want:
        problems.append(
            f"client.saturated: file has {fmt(saturated)}, its own figures (loop lag p99 "
            f"{fmt(p99)} ms, CPU {fmt(cpu)} %) give {fmt(want)} (saturated when p99 > "
            f"{saturation.LAG_P99_LIMIT_MS:g} ms or CPU > {saturation.CPU_LIMIT_PCT:g} %)")
    verdict = client.get("verdict")
    if verdict is None:
        return
    if not isinstance(verdict, str):
        problems.append(f"client.verdict: expected a string or null, file has {fmt(verdict)}")
    elif not (verdict.startswith("saturated: ") if saturated
              else verdict == saturation.verdict_text(saturated, [])):
        problems.append(f"client.verdict: {fmt(verdict)} does not say what saturated "
                        f"{fmt(saturated)} says ("
                        + ('"saturated: <why>"' if saturated
                           else fmt(saturation.verdict_text(saturated, []))) + ")")


def check_keys(path: str, obj: dict[str, Any], required: Sequence[str], known: Sequence[str],
                problems: list[str], missing: str = "missing") -> None:
    """Each `required` key absent from `obj` (in that order), then each key not `known`
    (sorted), named under `path`."""
    for key in required:
        if key not in obj:
            problems.append(f"{path}.{key}: {missing}")
    for key in sorted(obj.keys() - set(known), key=str):
        problems.append(f"{path}.{key}: unknown field")


def _is_stall(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_is_figure(x) for x in v)


# `loop_lag_ms`'s keys beside p50/p99/max (lagmon.py, saturation.py): check, description
_LAG_EXTRA: dict[str, tuple[Any, str]] = {
    "samples": (is_count, "a non-negative integer"),
    "over_5ms": (is_count, "a non-negative integer"),
    "max_at_s": (lambda v: v is None or _is_figure(v), "a non-negative number or null"),
    "stalls": (lambda v: isinstance(v, list) and all(_is_stall(x) for x in v),
               "a list of [seconds into the load, ms late] pairs"),
}


def _check_quantiles(client: dict[str, Any], key: str, extra: dict[str, tuple[Any, str]],
                     check: Callable[[Any], bool], what: str, problems: list[str]
                     ) -> float | None:
    """`client[key]`: null, or {p50, p99, max} (each `check`ed, or null) with p50 <= p99 <=
    max, plus only the `extra` keys; returns its p99 where it is a valid number."""
    block = client.get(key)
    if block is None:
        return None
    if not isinstance(block, dict):
        problems.append(f"client.{key}: expected an object or null, file has {fmt(block)}")
        return None
    values = []
    for q in ("p50", "p99", "max"):
        if q not in block:
            problems.append(f"client.{key}.{q}: missing (null when there was no sample)")
        v = block.get(q)
        if v is not None and not check(v):
            problems.append(f"client.{key}.{q}: expected {what} or null, file has {fmt(v)}")
        values.append(v if v is not None and check(v) else None)
    if None not in values and not values[0] <= values[1] <= values[2]:
        problems.append(f"client.{key}: p50 {fmt(values[0])} <= p99 {fmt(values[1])} <= "
                        f"max {fmt(values[2])} does not hold")
    for name in sorted(block.keys() - {"p50", "p99", "max"}, key=str):
        if name not in extra:
            problems.append(f"client.{key}.{name}: unknown field")
        elif not extra[name][0](block[name]):
            problems.append(f"client.{key}.{name}: expected {extra[name][1]}, "
                            f"file has {fmt(block[name])}")
    return values[1]


def raw_header_problems(header: Mapping[str, Any]) -> list[str]:
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


def end_problems(obj: Mapping[str, Any]) -> list[str]:
    """Problems with why a run ended, in a raw `run_end` line or a benchmark: `ended_by`
    one of `records.ENDED_BY` (or null: the run did not finish, or an older file), and
    `end_reason` a string or null."""
    problems = []
    ended = obj.get("ended_by")
    if ended is not None and ended not in ENDED_BY:
        problems.append(f"ended_by: {fmt(ended)} is not one of {list(ENDED_BY)} or null")
    reason = obj.get("end_reason")
    if reason is not None and not isinstance(reason, str):
        problems.append(f"end_reason: expected a string or null, file has {fmt(reason)}")
    return problems


def raw_client_problems(client: Any) -> list[str]:
    """`_check_client`'s problems with the `client` block a raw `run_end` line's `client`
    (generator figures; `load_s`/`cpu_s` are not copied) becomes in a benchmark, or [].
    The raw reader asks, so that a damaged one is named with its line rather than found
    when the benchmark built from it fails verification."""
    if client is None:
        return []
    if not isinstance(client, dict):
        return [f"client: expected an object or null, file has {fmt(client)}"]
    problems: list[str] = []
    check_client({"client": client_block(client, lambda: (None, None))}, problems)
    return problems


def check_failures(doc: dict[str, Any], problems: list[str]) -> None:
    """Each failure entry is {request_index, kind, http_status, message, phase}, typed
    (plus `step`, in a stepped run: checked with the steps, `steps.py`)."""
    failures = doc.get("failures")
    if not isinstance(failures, list):
        if "failures" in doc:
            problems.append(f"failures: expected a list, file has {fmt(failures)}")
        return
    for i, f in enumerate(failures):
        path = f"failures[{i}]"
        if not isinstance(f, dict):
            problems.append(f"{path}: expected an object, file has {fmt(f)}")
            continue
        check_keys(path, f, FAILURE_FIELDS, (*FAILURE_FIELDS, "step"), problems)
        if "request_index" in f and not is_count(f["request_index"]):
            problems.append(f"{path}.request_index: expected a non-negative integer, "
                            f"file has {fmt(f['request_index'])}")
        for key, expected in failure_field_problems(f):
            problems.append(f"{path}.{key}: expected {expected}, file has {fmt(f[key])}")


