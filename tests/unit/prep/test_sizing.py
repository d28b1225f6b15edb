"""sizing: `anvil prompts`' report against the simulator on 127.0.0.1 — each planned size
built and counted by the server, within a small error — and the error's sign and size
worked out by hand.

Why: this is the check behind every prefill figure; an error with the wrong sign would
tell a user their prompts are short when they are long.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.prep.sizing import SizeResult, measure_sizes
from anvil_metrics.runs.simproc import SimProcess


def test_error_pct_by_hand() -> None:
    assert SizeResult(200, 206, 0.1).error_pct == 3.0
    assert SizeResult(200, 190, 0.1).error_pct == -5.0
    assert SizeResult(200, None, 0.1).error_pct is None


def test_each_size_is_counted_by_the_server(simulator: Callable[..., SimProcess]) -> None:
    sim = simulator("--max-context", "4096")
    report = measure_sizes(sim.url, [512, 128, 512])
    assert (report.model, report.base_url) == ("sim-model", sim.url + "/v1")
    assert [r.planned_tokens for r in report.results] == [512, 128, 512]
    for r in report.results:
        assert r.counted_tokens is not None and abs(r.error_pct) < 2, r
        assert r.build_ms >= 0
    assert report.tokens_per_word > 0 and report.method != "none"


def test_a_server_that_is_not_there_is_named() -> None:
    with socket.socket() as s:  # a port on 127.0.0.1 that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UsageError, match=f"cannot reach http://127.0.0.1:{port}/v1/models"):
        measure_sizes(f"http://127.0.0.1:{port}", [128], timeout_s=2)
