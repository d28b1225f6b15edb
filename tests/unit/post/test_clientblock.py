"""clientblock: the generator's own figures become the block, the verdict is filled in
from them, and its rules (ordered quantiles, `saturated` from its own figures) hold the
raw `run_end` line and the document alike."""

from __future__ import annotations

from anvil_metrics.post.clientblock import client_block, raw_client_problems, rule_problems


def test_client_block_fills_in_the_verdict_from_the_figures() -> None:
    block = client_block({"loop_lag_ms": {"p99": 12.0}, "cpu_pct": 50.0}, lambda: (1.5, None))
    assert block["loop_lag_ms"] == {"p50": None, "p99": 12.0, "max": None}
    assert block["saturated"] is True
    assert block["verdict"] == "saturated: event-loop lag p99 12.0 ms > 10 ms"
    assert (block["achieved_concurrency"], block["start_delay_ms"]) == (1.5, None)
    calm = client_block({"saturated": False}, lambda: (None, None))
    assert calm["verdict"] == "ok"
    assert client_block(None, lambda: (None, None)) is None


def test_raw_client_problems() -> None:
    good = {"loop_lag_ms": {"p50": 1.0, "p99": 2.0, "max": 3.0, "samples": 10},
            "cpu_pct": 20.0}
    assert raw_client_problems(good) == []
    assert raw_client_problems(None) == []
    assert raw_client_problems(3) == ["client: expected an object or null, file has 3"]
    upside_down = {**good, "loop_lag_ms": {"p50": 3.0, "p99": 2.0, "max": 1.0}}
    assert raw_client_problems(upside_down) == [
        "client.loop_lag_ms: p50 3.0 <= p99 2.0 <= max 1.0 does not hold"]
    assert raw_client_problems({**good, "cpu_pct": "x"}) == [
        'client.cpu_pct: expected a non-negative number or null, file has "x"']


def test_saturated_is_held_to_its_own_figures() -> None:
    client = {"loop_lag_ms": {"p50": 1.0, "p99": 2.0, "max": 3.0}, "cpu_pct": 95.0,
              "achieved_concurrency": 1.0, "saturated": False, "verdict": "ok",
              "start_delay_ms": None}
    problems = rule_problems(client)
    assert len(problems) == 1
    assert problems[0].startswith("client.saturated: file has false, its own figures")
    assert rule_problems({**client, "saturated": True, "verdict": "fine"}) == [
        'client.verdict: "fine" does not say what saturated true says ("saturated: <why>")']


def test_the_summary_says_an_agent_replays_concurrency_counts_jobs() -> None:
    from anvil_metrics.post.clientblock import summary_lines

    client = {"loop_lag_ms": {"p50": 0.1, "p99": 1.0, "max": 3.6}, "cpu_pct": 44.8,
              "achieved_concurrency": 25.0, "verdict": "ok"}
    plain = summary_lines({"client": client, "concurrency": 16})[0]
    assert "achieved concurrency 25.0 of 16; verdict ok" in plain
    agents = summary_lines({"client": client, "concurrency": 16, "jobs": {}})[0]
    assert "25.0 of 16 jobs (their sub-agents' requests beside them); verdict ok" in agents
