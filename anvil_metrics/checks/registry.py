"""Every suite `anvil check` knows, in the order they run, and where each one lives.

Why a table of names rather than imports: a suite pulls in what it needs (Pillow for
multimodal, a sandbox for coding) only when it is asked for, and the CLI can check a
`SUITE` argument against this list before anything is imported or asked.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from anvil_metrics.checks.results import SuiteResult

# suite -> (module below anvil_metrics.checks, function); the order is the run order
SUITES: dict[str, tuple[str, str]] = {
    "coding": ("coding", "run_coding"),
    "json": ("jsonmode", "run_json"),
    "tools": ("tools", "run_tools"),
    "streaming_tools": ("tools", "run_streaming_tools"),
    "tool_result_recovery": ("tools", "run_tool_result_recovery"),
    "responses_subset": ("responses", "run_responses_subset"),
    "reasoning_leakage": ("reasoning", "run_reasoning_leakage"),
    "retrieval": ("retrieval", "run_retrieval"),
    "near_limit": ("retrieval", "run_near_limit"),
    "quality": ("quality", "run_quality"),
    "multimodal": ("multimodal", "run_multimodal"),
}
# "all" in `anvil check`: every suite but the long-context ones, which take minutes
DEFAULT_SUITES = tuple(s for s in SUITES if s not in ("near_limit",))
FUNCTIONAL_SUITES = tuple(s for s in SUITES if s not in ("multimodal",))


def suite_function(name: str) -> Callable[..., SuiteResult]:
    """The function that runs suite `name` (a key of `SUITES`)."""
    module, function = SUITES[name]
    return getattr(importlib.import_module(f"anvil_metrics.checks.{module}"), function)
