"""`anvil check`: run suites against one server and write `anvil-serving.checks/v1`.

Why its own module: the suites compute, this module assembles — the server's identity
(`provenance.discover`: which model it serves, its context limit, engine and version), the
suites in `registry.SUITES` order, and the document, written atomically. Only the CLI
prints; `on_suite` lets it show each suite's line as it finishes.

The document::

    {schema: "anvil-serving.checks/v1", model, host (no credentials), started_at,
     finished_at, engine, engine_version, max_model_len, options: {...},
     checks: {suite: {result, passed, total, elapsed_s, ..., cases: [...]}}}
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.checks.client import CheckClient
from anvil_metrics.checks.docverify import SCHEMA
from anvil_metrics.checks.registry import SUITES, suite_function
from anvil_metrics.checks.results import SuiteResult
from anvil_metrics.checks.suite import CheckContext, CheckOptions
from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import atomic_write_bytes, dumps_strict
from anvil_metrics.prep.provenance import Discovery, discover
from anvil_metrics.urls import Endpoint

DISCOVERY_TIMEOUT_S = 10.0


def parse_suites(text: str) -> tuple[str, ...]:
    """`SUITE[,SUITE...]` as suite names in run order; "all" stands for every suite but
    near_limit (so "all,near_limit" is every suite). UsageError names a bad one."""
    from anvil_metrics.checks.registry import DEFAULT_SUITES
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise UsageError(f"check: SUITE {text!r} names no suite; allowed: all, "
                         + ", ".join(SUITES))
    bad = [s for s in names if s not in SUITES and s != "all"]
    if bad:
        raise UsageError(f"check: suite {bad[0]!r} is not known; allowed: all, "
                         + ", ".join(SUITES))
    chosen = set(names) | (set(DEFAULT_SUITES) if "all" in names else set())
    return tuple(s for s in SUITES if s in chosen)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def run_checks(host: str, suites: Sequence[str], *, model: str | None = None,
               api_key: str | None = None, options: CheckOptions | None = None,
               on_suite: Callable[[SuiteResult], None] | None = None,
               ask: Callable[..., Discovery] = discover) -> dict[str, Any]:
    """Run `suites` against `host` and return the checks document (see module docstring).
    `ask` asks the server who it is (`provenance.discover`; a test may answer for it).

    Raises `UsageError` when nothing at `host` answers as an HTTP server (refused, reset, no
    answer within the discovery timeout): one line, not an error per suite."""
    options = options or CheckOptions()
    endpoint = Endpoint.parse(host)
    api_key = api_key or endpoint.userinfo_key
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started = _now()
    found = ask(endpoint.base_url, headers=headers, timeout_s=DISCOVERY_TIMEOUT_S, model=model)
    if found.unreachable is not None:  # one line, as `anvil run` says it, not a suite each
        raise UsageError(f"cannot reach {endpoint.base_url} ({found.unreachable}); is the "
                         "server running? check --host")
    served = model or found.served_model
    client = CheckClient(endpoint, served or "default", api_key=api_key,
                         timeout_s=options.timeout_s, max_tokens=options.max_tokens)
    ctx = CheckContext(client, options, found.max_model_len)
    results: dict[str, Any] = {}
    for name in suites:
        t0 = time.monotonic()
        if served is None:
            result = SuiteResult(name, (), 0.0, error="the server named no model (GET "
                                 "/v1/models failed or listed none) and --model was not given: "
                                 + found.null_reasons.get("served_model", "unknown"))
        else:
            try:
                result = suite_function(name)(ctx)
            except ImportError as e:  # an optional extra not installed
                result = SuiteResult(name, (), time.monotonic() - t0, error=str(e))
        results[name] = result.to_json()
        if on_suite is not None:
            on_suite(result)
    return {
        "schema": SCHEMA,
        "model": served,
        "host": endpoint.base_url,
        "started_at": started,
        "finished_at": _now(),
        "engine": found.engine,
        "engine_version": found.version,
        "max_model_len": found.max_model_len,
        "options": {k: v for k, v in asdict(options).items()},
        "checks": results,
    }


def write_checks(path: str | Path, doc: dict[str, Any]) -> None:
    """Write the document atomically (a reader never sees half of it), in its own order
    (the suites in run order, each suite's verdict before its cases)."""
    atomic_write_bytes(path, (dumps_strict(doc, option=orjson.OPT_INDENT_2) + b"\n",))
