"""Stuck requests are said, end to end: `anvil run --stuck-after 1s` against the simulator
with requests that stall, read back from the run's log (`locust.log`).

Two requests run at once against a simulator whose prefill takes 3 s (headers and a
role-only chunk at once, then nothing: a request waiting for its first byte with its
headers received); the first chat request it serves also stalls 3 s before any byte
(`stall_first_byte`: no headers either), the second 3 s after its first token
(`stall_mid_stream`: idle mid-stream). Each phase lasts 2 s past the threshold, so the
watch's scans (once a second) see each at least once on a slow machine too. Which of the
two requests meets which fault is the order they reach the server in, so each line is
judged by what both phases allow, not by request index. The log must name the count and
the phase, say it again after a further threshold, and say when every request in flight
is stuck; the run ends by itself (the stalls are shorter than its timeouts) and verifies.

A second run does the same with `--processes 2` (a master and two workers, one request
each): the master's lines are its workers' reports merged.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import anvil, load_json, measured, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.post.benchmark import verify_benchmark

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "stuck"
concurrency = 2
requests = 2
max_tokens = 4
context_tokens = 512
max_context_tokens = 2048
[context_distribution]
512 = 2
[timeouts]
first_byte_s = 30
idle_s = 30
"""

STALL_S = 3.0
SIM = ("--prefill-ms", str(int(STALL_S * 1000)), "--reasoning-tokens", "0",
       "--content-tokens", "4", "--interval-ms", "2", "--max-context", "2048",
       "--fault", f"stall_first_byte={STALL_S}@0", "--fault", f"stall_mid_stream={STALL_S}@1")

LINE = re.compile(r"/anvil: anvil: (.*)$")  # Locust's "[time] host/LEVEL/logger: message"


def stuck_lines(run_dir: Path) -> list[str]:
    """The log's lines of the stuck-request watch, in order (each after `anvil: `)."""
    out = []
    for line in (run_dir / "locust.log").read_text(errors="replace").splitlines():
        m = LINE.search(line)
        # the watch's own lines, not the progress lines that quote its words (" | ")
        if m and "stuck" in m.group(1) and " | " not in m.group(1):
            out.append(m.group(1))
    return out


def run_stalled(tmp_path: Path, *extra: str) -> tuple[list[str], Path]:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    with start_simulator(list(SIM)) as sim:
        proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                     "--stuck-after", "1s", "--no-server-metrics", "--run-time", "60", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    assert verify_benchmark(doc) == []
    assert (doc["requests"], doc["completed"], doc["failed"]) == (2, 2, 0)  # ended by itself
    return stuck_lines(path.parent), path.parent


def check_lines(lines: list[str]) -> None:
    """What the watch said of the two stalled requests (module docstring): while both wait
    for their first output (1 to 3 s into them) every request in flight is stuck, two
    waiting, the one that had its headers named (both, once the stalled one's headers came
    while the other still waits); then (4 to 6 s) the one that began
    streaming is idle mid-stream beside the one still waiting."""
    stuck = [x for x in lines if "any more" not in x]
    assert len(stuck) >= 2, lines  # said, then again after a further threshold
    both_waiting = [x for x in stuck if x.startswith(
        "every request in flight is stuck (2): 2 waiting for their first byte (the longest ")]
    # one had its headers (in prefill), the other none (its first byte stalled); once that
    # stall is over both have headers, which a scan can see while the other still waits
    # when the two started apart (two workers on a busy machine: one ~1 s after the other)
    assert any(x.endswith(" s, headers received for 1)") for x in both_waiting), lines
    assert all(re.search(r" s, headers received for [12]\)$", x) for x in both_waiting), lines
    assert any(re.fullmatch(r"every request in flight is stuck \(2\): 1 waiting for its first "
                            r"byte for \d s \(headers received\), 1 idle mid-stream for \d s", x)
               for x in stuck), lines
    # every line names the count in flight and a phase: 2, or 1 once the other request has
    # ended (two workers on a busy machine start their requests up to ~1 s apart)
    for x in stuck:
        assert re.match(r"(every request in flight is stuck \([12]\)|1 of 2 requests in "
                        r"flight is stuck): \d (waiting for|idle mid-stream)", x), x
    seconds = [int(s) for x in stuck
               for s in re.findall(r"first byte (?:for|\(the longest) (\d+) s", x)]
    assert seconds == sorted(seconds) and seconds[-1] > seconds[0], lines  # waits that grow


def test_stalled_requests_are_said_with_their_count_and_phase(tmp_path: Path) -> None:
    lines, _ = run_stalled(tmp_path)
    check_lines(lines)


def test_a_distributed_runs_master_says_its_workers_stuck_requests(tmp_path: Path) -> None:
    lines, run_dir = run_stalled(tmp_path, "--processes", "2")
    check_lines(lines)
    assert len({r["worker"] for r in measured(run_dir)}) == 2  # a request on each worker
