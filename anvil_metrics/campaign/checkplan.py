"""A campaign's `[checks]`: which `anvil check` suites run once per variant, and with what.

Why its own module: a campaign file is checked whole before its first run (`spec.py`),
so the table is validated here with the same problem lines; and the step that runs the
checks after the campaign's last run lives here too, so `runner.py` keeps its one job
(the runs and their state).

    [checks]
    suites = ["coding", "json", "tools", "retrieval", "multimodal"]   # or ["all"]
    context_tokens = 131072        # optional: retrieval's prompt size (default 131072)
    near_limit_tokens = 389000     # optional: near_limit's (default: max_model_len - 4096)
    timeout_s = 120                # optional: one ordinary request
    long_timeout_s = 1800          # optional: one long-context request
    seed = 0                       # optional
    max_tokens = 512               # optional: caps every answer (default: each suite's own)
    transport = "cpu"              # optional: how images reach the model, recorded as given

When: after the last run of the plan, once per variant, outside any load. A variant's
`before_run` runs first (with ANVIL_CHECKS=1), so its server is in that variant's state.
Where: `<campaign>/checks/<model>+<speculation>.json` (`+` is not a label character, so
the name is unambiguous). A file that is there and reads as `anvil-serving.checks/v1` is
not redone: a resumed campaign asks only what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anvil_metrics.checks.docverify import SCHEMA
from anvil_metrics.checks.registry import DEFAULT_SUITES, SUITES
from anvil_metrics.checks.suite import CheckOptions
from anvil_metrics.jsonio import JsonFileError, read_json

CHECKS_DIR = "checks"
_KEYS = ("suites", "context_tokens", "near_limit_tokens", "timeout_s", "long_timeout_s",
         "seed", "transport", "max_tokens")


@dataclass(frozen=True, slots=True)
class CheckPlan:
    """The validated [checks] table."""

    suites: tuple[str, ...]
    options: CheckOptions


def parse_checks(raw: Any) -> tuple[CheckPlan | None, list[str]]:
    """[checks] as a `CheckPlan` (None when the table is absent or bad) and its problem
    lines, each naming the field, the bad value and what is allowed."""
    if raw is None:
        return None, []
    if not isinstance(raw, dict):
        return None, [f"checks: {raw!r} is not allowed; expected a table with suites = [...]"]
    problems = [f'checks: unknown key "{k}"; allowed: {", ".join(_KEYS)}'
                for k in raw if k not in _KEYS]
    suites = raw.get("suites")
    allowed = "a non-empty list of suite names: all, " + ", ".join(SUITES)
    names: tuple[str, ...] = ()
    if suites is None:
        problems.append(f"checks.suites: missing; expected {allowed}")
    elif (not isinstance(suites, list) or not suites
          or not all(isinstance(s, str) and (s in SUITES or s == "all") for s in suites)):
        problems.append(f"checks.suites: {suites!r} is not allowed; expected {allowed}")
    else:
        names = DEFAULT_SUITES if "all" in suites else tuple(s for s in SUITES if s in suites)

    def whole(key: str, low: int) -> int | None:
        v = raw.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            problems.append(f"checks.{key}: {v!r} is not allowed; expected a whole number "
                            f">= {low}")
            return None
        return v

    def seconds(key: str) -> float | None:
        v = raw.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not (
                math.isfinite(v) and v > 0):
            problems.append(f"checks.{key}: {v!r} is not allowed; expected seconds > 0")
            return None
        return float(v)

    context, near, seed = whole("context_tokens", 1024), whole("near_limit_tokens", 1024), \
        whole("seed", 0)
    max_tokens = whole("max_tokens", 1)
    timeout, long_timeout = seconds("timeout_s"), seconds("long_timeout_s")
    transport = raw.get("transport")
    if transport is not None and not (isinstance(transport, str) and transport.strip()):
        problems.append(f"checks.transport: {transport!r} is not allowed; expected a "
                        "non-empty string (e.g. \"cpu\")")
        transport = None
    if problems:
        return None, problems
    defaults = CheckOptions()
    options = CheckOptions(
        context_tokens=context or defaults.context_tokens, near_limit_tokens=near,
        timeout_s=timeout or defaults.timeout_s,
        long_timeout_s=long_timeout or defaults.long_timeout_s,
        seed=seed if seed is not None else defaults.seed, transport=transport,
        max_tokens=max_tokens)
    return CheckPlan(names, options), []


def checks_file(folder: Path, model: str, speculation: str) -> Path:
    """Where a variant's checks document lives in the campaign folder."""
    return folder / CHECKS_DIR / f"{model}+{speculation}.json"


def read_checks(path: Path) -> dict[str, Any] | None:
    """The checks document at `path`, None when it is missing or not one (a half-written
    file cannot exist: it is written atomically)."""
    try:
        doc = read_json(path, f"an {SCHEMA} document")
    except JsonFileError:
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(
            doc.get("checks"), dict):
        return None
    return doc


# (host URL, served model, API key, suites, options) -> the checks document
Checker = Callable[[str, str, str | None, tuple[str, ...], CheckOptions], dict[str, Any]]


def real_checker(host: str, model: str, api_key: str | None, suites: tuple[str, ...],
                 options: CheckOptions) -> dict[str, Any]:
    """`anvil check` itself (`checks.runner.run_checks`)."""
    from anvil_metrics.checks.runner import run_checks
    return run_checks(host, suites, model=model, api_key=api_key, options=options)


def summary_line(doc: Mapping[str, Any]) -> str:
    """"coding pass, tools fail (18/20), ..." for progress lines."""
    parts = []
    for suite, r in doc.get("checks", {}).items():
        counts = f" ({r.get('passed')}/{r.get('total')})" if r.get("result") != "pass" else ""
        parts.append(f"{suite} {r.get('result')}{counts}")
    return ", ".join(parts)
