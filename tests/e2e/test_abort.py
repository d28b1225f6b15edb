"""A dead server ends the run: the simulator is killed mid-run, and `anvil run` (one
process, and a master with 2 workers) and plain `locust --headless` exit 3 with the cause
on one line and a `benchmark.json` that verifies, marked aborted, holding every request.

The bounds are the rule's own (`live/abort.py`, `live/users.py`): the run ends after
`--abort-after-failures` × users unanswered requests in a row — here 5 × 3 = 15 — so at most
that many plus one a user (those in flight when it ended) fail after the kill; and the
closed-loop back-off spaces each user's failures, so some user (15 failures over 3 users:
at least 5 of them) waited backoff(1) + … + backoff(4) = 0.75 s between its first failure
and its fifth: a run that retried in a tight loop would fail all 15 in milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, load_json, raw_lines, write_scenario

from anvil_metrics.live.users import backoff_s
from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e

USERS, AFTER = 3, 5
SCENARIO = """
measurement_protocol = "abort"
concurrency = 3
warmup_requests = 0
max_tokens = 40
context_tokens = 4096
max_context_tokens = 4096
[context_distribution]
512 = 1
"""
UNANSWERED = ("connection", "truncated", "timeout")
RUN_S = 120  # the planned duration: the run must end long before it by itself


def _command(kind: str, sim_url: str, sc: Path, res: Path) -> list[str]:
    common = ["--scenario", str(sc), "--results-dir", str(res), "--duration", f"{RUN_S}s",
              "--abort-after-failures", str(AFTER), "--no-server-metrics"]
    if kind == "locust":
        return [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless",
                "-H", sim_url, "-u", str(USERS), "-r", str(USERS), *common]
    cmd = [sys.executable, "-m", "anvil_metrics", "run", str(sc), "--host", sim_url,
           "--users", str(USERS), *common[2:]]
    return cmd + (["--processes", "2"] if kind == "processes" else [])


def _wait_for_records(res: Path, n: int, proc: subprocess.Popen) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(res.glob("benchmark-*/requests.jsonl"))
        if found and found[0].read_bytes().count(b'"failure":null') >= n:
            return found[0].parent
        time.sleep(0.05)
    raise AssertionError("the run completed no requests")


@pytest.mark.parametrize("kind", ["run", "processes", "locust"])
def test_a_killed_server_ends_the_run_with_its_cause(simulator, tmp_path: Path, kind) -> None:
    sim = simulator("--prefill-ms", "20", "--content-tokens", "40", "--interval-ms", "5",
                    "--max-context", "4096")
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    res = tmp_path / "res"
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(_command(kind, sim.url, sc, res), cwd=REPO, stdout=fo,
                                stderr=fe, stdin=subprocess.DEVNULL)
    try:
        run_dir = _wait_for_records(res, 6, proc)
        os.kill(sim.pid, signal.SIGKILL)
        sim.proc.wait(10)
        killed = time.monotonic()
        code = proc.wait(RUN_S / 2)  # a sanity bound: the run lasts RUN_S unless it aborts
        took_s = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    stdout, stderr = out.read_text(), err.read_text()
    logs = stdout + stderr + "".join(p.read_text() for p in run_dir.glob("*.log"))
    assert code == 3, (code, stdout, stderr)
    assert "Traceback" not in logs, logs
    doc = load_json(run_dir / "benchmark.json")
    assert doc["ended_by"] == "aborted" and doc["partial"] is True
    reason = doc["end_reason"]
    assert reason.startswith(f"the server at {sim.url} stopped answering at "), reason
    assert f"--abort-after-failures {AFTER}" in reason
    if kind != "locust":  # `anvil run` says why, last, on one line
        assert stderr.strip().splitlines()[-1] == f"anvil: run aborted: {reason}", stderr
    assert verify_benchmark(doc) == []
    # every request issued is in the file once: completed or failed
    raw = [r for r in raw_lines(run_dir) if r["type"] == "request" and not r["warmup"]]
    indices = sorted(r["request_index"] for r in raw)
    assert indices == list(range(len(raw)))
    assert doc["requests"] == len(raw) == doc["completed"] + doc["failed"]
    # the bound on attempts: the streak and at most one more a user
    limit = AFTER * USERS
    after_kill = [r for r in raw if r["failure"] is not None]
    unanswered = [r for r in after_kill if r["failure"]["kind"] in UNANSWERED]
    assert limit <= len(unanswered) and len(after_kill) <= limit + USERS, (
        len(unanswered), len(after_kill))
    # the back-off: some user's first AFTER failures span its first AFTER-1 waits
    ends = sorted(r["end_ns"] for r in unanswered)
    least_s = sum(backoff_s(k) for k in range(1, AFTER))
    assert (ends[limit - 1] - ends[0]) / 1e9 >= least_s * 0.99, ((ends[-1] - ends[0]) / 1e9,
                                                                 least_s)
    print(f"{kind}: exit 3 {took_s:.1f} s after the kill; {len(after_kill)} failed attempts "
          f"(rule: {limit} in a row); {reason}")


def test_an_overloaded_server_ends_the_run_when_asked(simulator, tmp_path: Path) -> None:
    """`--stop-overloaded 2s`: 4 slots of ~250 ms streams serve 16 requests a second; 24 a
    second are offered, so the queue grows by 8 a second and every TTFT by ~0.5 s a second.
    The run (60 s asked) ends itself within seconds with exit 3, the reason in its end and
    on stderr, and a benchmark that verifies; the requests in flight then get the stop
    timeout to finish, as after any end (a small overload keeps that queue short). The same
    flag at 8 a second (under capacity) ends nothing."""
    sim = simulator("--prefill-ms", "50", "--interval-ms", "10", "--reasoning-tokens", "0",
                    "--content-tokens", "20", "--max-context", "8192", "--max-running", "4")
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)

    def at(rate: int, users: int, duration: str, name: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "anvil_metrics", "run", str(sc), "-H", sim.url, "--rate",
             str(rate), "--arrival", "constant", "-u", str(users), "--duration", duration,
             "--stop-overloaded", "2s", "--results-dir", str(tmp_path / name)], cwd=REPO,
            capture_output=True, text=True, timeout=120)

    over = at(24, 400, "60s", "over")
    assert over.returncode == 3, over.stdout[-2000:] + over.stderr[-2000:]
    (bench,) = (tmp_path / "over").glob("benchmark-*/benchmark.json")
    doc = load_json(bench)
    assert doc["ended_by"] == "aborted" and "is over capacity at " in doc["end_reason"]
    assert "--stop-overloaded 2s" in doc["end_reason"] and "over capacity" in over.stderr
    assert doc["load"]["window_s"][1] < 40  # seconds after the header: not the 60 asked
    assert verify_benchmark(doc) == []
    under = at(8, 64, "4s", "under")  # a window and more: two checks
    assert under.returncode == 0, under.stdout[-2000:] + under.stderr[-2000:]
