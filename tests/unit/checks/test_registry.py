"""registry: every suite `anvil check` knows resolves to its function, in the run order;
"all" leaves out only the long-context suite and the functional gate only multimodal.

Why: the CLI checks a suite's name against this table before anything is imported; a
name whose module or function moved would fail only when a user asked for that suite.
"""

from __future__ import annotations

import inspect

from anvil_metrics.checks.registry import (
    DEFAULT_SUITES,
    FUNCTIONAL_SUITES,
    SUITES,
    suite_function,
)


def test_every_suite_resolves_to_a_function_called_with_the_context_alone() -> None:
    for name, (module, function) in SUITES.items():
        run = suite_function(name)
        assert run.__name__ == function and run.__module__ == f"anvil_metrics.checks.{module}"
        first, *rest = inspect.signature(run).parameters.values()
        assert first.name == "ctx", name  # the runner passes the context alone
        assert all(p.default is not inspect.Parameter.empty for p in rest), name


def test_the_subsets() -> None:
    assert set(SUITES) - set(DEFAULT_SUITES) == {"near_limit"}
    assert set(SUITES) - set(FUNCTIONAL_SUITES) == {"multimodal"}
    order = list(SUITES)
    assert [order.index(s) for s in DEFAULT_SUITES] == sorted(
        order.index(s) for s in DEFAULT_SUITES)  # the run order kept
    assert order[0] == "coding" and order[-1] == "multimodal"
