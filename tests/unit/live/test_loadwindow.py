"""loadwindow: one load process's figures over its load window — the `client` block's keys
plus `load_s`/`cpu_s` — frozen at the first `end()`, with a verdict that follows from
its own figures.

Why: the `client` block says whether the generator set the numbers; a verdict that did
not follow from the lag and CPU it sits beside would fail `verify`.
"""

from __future__ import annotations

from anvil_metrics.live.loadwindow import LoadWindow
from anvil_metrics.post.saturation import verdict, verdict_text


def test_the_figures_are_the_client_blocks_keys_and_follow_the_verdict_rule() -> None:
    window = LoadWindow()
    window.begin()
    assert window.started
    sum(range(10_000))  # some CPU in the window
    health = window.end()
    assert set(health) == {"loop_lag_ms", "cpu_pct", "achieved_concurrency", "saturated",
                           "verdict", "load_s", "cpu_s"}
    assert health["load_s"] > 0 and health["cpu_s"] >= 0
    assert health["cpu_pct"] == health["cpu_s"] / health["load_s"] * 100
    assert health["achieved_concurrency"] is None  # the records' figure, not this one's
    lag = health["loop_lag_ms"]
    assert {"p50", "p99", "max", "samples", "over_5ms", "stalls"} <= lag.keys()
    sat, reasons = verdict(lag["p99"], health["cpu_pct"])
    assert (health["saturated"], health["verdict"]) == (sat, verdict_text(sat, reasons))


def test_end_is_idempotent() -> None:
    window = LoadWindow()
    window.begin()
    first = window.end()
    assert window.end() is first
    assert window.trimmer._greenlet is None and window.lag._greenlet is None
