"""End to end: the live progress of `anvil run` piped (plain lines with the run's counts,
never a control code), on a terminal (a pseudo-terminal: rich's table redrawn in place),
with `--quiet` (neither), and of plain `locust --headless` with anvil's plugin (the lines
through the `anvil` logger). Real simulator and Locust processes on 127.0.0.1."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, anvil, load_json, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.simproc import SimProcess, stop_process

pytestmark = pytest.mark.e2e

SIM = ("--prefill-ms", "20", "--reasoning-tokens", "3", "--content-tokens", "5",
       "--interval-ms", "5", "--max-context", "8192")
SCENARIO = """
measurement_protocol = "adhoc"
concurrency = 2
warmup_requests = 1
max_tokens = 64
context_tokens = 8192
max_context_tokens = 8192
[context_distribution]
300 = 1
"""
LINE = re.compile(r"^(warm-up|running|finishing) .* \| in flight .* \| completed (\d+) \| "
                  r"failed (\d+) .*\| cancelled (\d+) \| .* req/s, .* output tok/s .*"
                  r"\| TTFT p50 .* \| ETA .* \| client .*$")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_simulator(list(SIM)) as started:
        yield started


def test_piped_run_prints_plain_lines_with_its_counts(sim: SimProcess, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    proc = anvil("run", str(sc), "--host", sim.url, "--requests", "60",
                 "--progress-every", "1s", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\x1b" not in proc.stderr + proc.stdout and "\r" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if LINE.match(x)]
    # before the load process's first snapshot: what is being done
    assert all(x == "setting up (model, prompt sizing) …" or LINE.match(x)
               for x in proc.stderr.splitlines()), proc.stderr
    assert len(lines) >= 2, proc.stderr  # the first reading and the last at least
    doc = load_json(result_path(proc))
    last = LINE.match(lines[-1])
    assert last is not None and lines[-1].startswith("finishing 60/60 requests")
    assert int(last.group(2)) == doc["completed"] == 60 and int(last.group(3)) == 0
    done = [int(LINE.match(x).group(2)) for x in lines]  # type: ignore[union-attr]
    assert done == sorted(done)  # counts only grow
    assert verify_benchmark(doc) == []
    # the child logged the same lines (its log: Locust's headless table goes there too)
    log = (result_path(proc).parent / "locust.log").read_text()
    assert "anvil: running " in log or "anvil: finishing " in log


def test_quiet_prints_neither(sim: SimProcess, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    proc = anvil("run", str(sc), "--host", sim.url, "--requests", "20", "--quiet",
                 "--progress-every", "1s", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "" and "setting up" not in proc.stdout
    run_dir = result_path(proc).parent
    assert not (run_dir / "progress.json").exists()
    assert " | in flight " not in (run_dir / "locust.log").read_text()


def _on_a_terminal(argv: list[str], timeout_s: float = 90) -> tuple[int, bytes]:
    """Run `argv` with stdout and stderr on a pseudo-terminal; (exit code, what it drew)."""
    leader, follower = os.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                            cwd=REPO, env={**os.environ, "COLUMNS": "120", "LINES": "30"},
                            start_new_session=True)
    os.close(follower)
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the terminal closed: every writer has exited
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        return proc.wait(5), bytes(out)
    finally:
        stop_process(proc)
        os.close(leader)


def test_on_a_terminal_the_table_is_redrawn_in_place(sim: SimProcess, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    code, out = _on_a_terminal([sys.executable, "-m", "anvil_metrics", "run", str(sc),
                                "--host", sim.url, "--duration", "3s",
                                "--results-dir", str(tmp_path)])
    text = out.decode(errors="replace")
    assert code == 0, text
    assert b"\x1b[2K" in out or b"\x1b[1A" in out  # rich moves up and erases to redraw
    for row in ("progress", "in flight", "last ", "TTFT p50", "client", "stuck"):
        assert row in text, row
    assert "0:03/0:03" in text  # the duration's time, all of it by the last frame
    assert "result: " in text  # the summary follows the display


def test_plain_locust_headless_logs_the_lines(sim: SimProcess, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless",
         "-H", sim.url, "-u", "2", "-r", "2", "--requests", "40", "--max-tokens", "64",
         "--progress-every", "1s", "--results-dir", str(tmp_path), "--only-summary"],
        cwd=REPO, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [x.split("anvil: anvil: ", 1)[1] for x in proc.stderr.splitlines()
             if "anvil: anvil: " in x and " | in flight " in x]
    assert lines and all(LINE.match(x) for x in lines), proc.stderr
    assert lines[-1].startswith("finishing 40/40 requests") and "completed 40" in lines[-1]
    assert "\x1b" not in proc.stderr
