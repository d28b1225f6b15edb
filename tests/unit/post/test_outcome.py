"""outcome: the one verdict on a run's failed requests that `anvil run`, the plugin, the
demo, a campaign and a capacity search read (exit code 4, and `error_rate`).

Why: a script branches on the exit code; the rule must count the server's failures only
(never the run's own `cancelled` or the `aborted` closed on purpose), and say none for a run
that measured nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from anvil_metrics.post.outcome import error_rate, failure_verdict, server_failures


def doc(requests: int, *kinds: str) -> dict[str, Any]:
    return {"requests": requests,
            "failures": [{"request_index": i, "kind": k} for i, k in enumerate(kinds)]}


def test_every_measured_request_failed_is_said_with_its_kinds() -> None:
    d = doc(3, "timeout", "http_error", "timeout")
    assert server_failures(d) == {"timeout": 2, "http_error": 1}
    assert error_rate(d) == 1.0
    assert failure_verdict(d) == ("anvil: every one of the 3 measured requests failed "
                                  "(1 http_error, 2 timeout); see benchmark.json's failures")
    assert failure_verdict(d, 0.5) == failure_verdict(d)  # all failed: said the same way


@pytest.mark.parametrize("d", [doc(4, "cancelled", "aborted", "cancelled", "aborted"),
                               doc(2, "http_error"), doc(0), {}])
def test_some_failed_none_measured_or_only_the_clients_own_is_no_verdict(d: dict) -> None:
    assert failure_verdict(d) is None


def test_the_rate_counts_the_servers_failures_over_every_measured_request() -> None:
    d = doc(10, "http_error", "cancelled", "aborted", "rate_limited")
    assert error_rate(d) == 0.2 and error_rate(doc(0)) is None
    assert failure_verdict(d, 0.2) is None  # at the rate: not above it
    assert failure_verdict(d, 0.19) == (
        "anvil: 2 of the 10 measured requests failed (1 http_error, 1 rate_limited): 20.0 %, "
        "above --fail-on-error-rate 0.19; see benchmark.json's failures")
    assert failure_verdict(doc(10, "timeout"), 0).startswith("anvil: 1 of the 10")  # 0: any
