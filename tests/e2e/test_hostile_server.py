"""A hostile server (the simulator's hostile `--fault`s) against a real `anvil run`: each
behaviour ends its own request with one clear failure kind and message (or, for a flood of
comments, an answer), no traceback, the run ends by itself and its benchmark verifies.

One simulator and one run at concurrency 1 carry every case, as `test_faults.py` does: case
k hits request 2k + 1 and every even request is a good one (so no user backs off for long
and the run never aborts), under short timeouts (a first byte within 1 s). Each case keeps
its own test, which reads its own request out of the shared run.

The load process's memory is measured beside the run (its VmHWM from /proc, polled): the
peak after the 200 MB line's request ended against the peak when the request before it
ended, its own baseline; no time is judged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, load_json, raw_lines, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.post.benchmark import verify_benchmark
from anvil_metrics.sim.faultchat import HTML_PAGE
from anvil_metrics.wire.client import SHOWN_BYTES

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "hostile"
concurrency = 1
requests = {requests}
max_tokens = 16
context_tokens = 1024
max_context_tokens = 2048
[context_distribution]
256 = {requests}
[timeouts]
first_byte_s = 1
idle_s = 2
total_s = 60
"""
SIM = ("--prefill-ms", "5", "--reasoning-tokens", "2", "--content-tokens", "8",
       "--interval-ms", "2", "--max-context", "2048")
LINE_BYTES = 200_000_000
# in the order they are issued; case k hits request 2k + 1
CASES = ("headers_then_silence", f"huge_line={LINE_BYTES}", "endless_stream", "html_200",
         "huge_header=8000000", "invalid_utf8=2", "nan_usage", "negative_usage",
         "comment_flood=2000000")
MIB = 1024 * 1024


def _locust_pid(parent: int) -> int | None:
    """The Locust process `anvil run` started (its child running locust), or None yet."""
    for task in os.listdir(f"/proc/{parent}/task"):
        try:
            kids = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            try:
                if b"locust" in Path(f"/proc/{kid}/cmdline").read_bytes():
                    return int(kid)
            except OSError:
                continue
    return None


def _hwm_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class PeakWatch:
    """Polls the load process's VmHWM and the records written so far: `at[n]` is the peak
    (KiB) when `requests.jsonl` first held n request lines."""

    def __init__(self, proc: subprocess.Popen, results: Path) -> None:
        self.at: dict[int, int] = {}
        self._proc, self._results = proc, results
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        pid = None
        deadline = time.monotonic() + 120  # bounded, as the run is
        while self._proc.poll() is None and time.monotonic() < deadline:
            pid = pid or _locust_pid(self._proc.pid)
            files = list(self._results.glob("*/requests.jsonl"))
            if pid is not None and files:
                hwm = _hwm_kib(pid)
                n = files[0].read_bytes().count(b'"type":"request"')
                if hwm is not None:
                    self.at.setdefault(n, hwm)
            time.sleep(0.002)

    def join(self) -> None:
        self._thread.join(10)


@dataclass(frozen=True)
class HostileRun:
    doc: dict
    raw: dict[int, dict]
    output: str
    peaks: dict[int, int]

    @staticmethod
    def index(case: str) -> int:
        return 2 * CASES.index(case) + 1

    def failure(self, case: str) -> dict:
        """The failure of `case`'s request; the good requests either side were answered."""
        i = self.index(case)
        failures = {f["request_index"]: f for f in self.doc["failures"]}
        for j in (i - 1, i + 1):
            assert j not in failures, (case, j, failures.get(j))
        assert i in failures, (case, self.raw.get(i))
        return failures[i]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> HostileRun:
    tmp = tmp_path_factory.mktemp("hostile")
    n = 2 * len(CASES) + 1
    specs = [a for k, case in enumerate(CASES) for a in ("--fault", f"{case}@{2 * k + 1}")]
    sc = write_scenario(tmp / "s.toml", SCENARIO.format(requests=n))
    results = tmp / "res"
    with start_simulator([*SIM, *specs]) as sim:
        proc = subprocess.Popen(
            [sys.executable, "-m", "anvil_metrics", "run", str(sc), "--host", sim.url,
             "--results-dir", str(results), "--no-server-metrics"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
            stdin=subprocess.DEVNULL, start_new_session=True)
        watch = PeakWatch(proc, results)
        try:
            out, _ = proc.communicate(timeout=120)  # it ends by itself, well before
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
        watch.join()
    assert proc.returncode == 0, out
    path = result_path(subprocess.CompletedProcess([], 0, out, ""))
    log = (path.parent / "locust.log").read_text(errors="replace")
    for text in (out, log):
        assert "Traceback" not in text, text[-3000:]
    doc = load_json(path)
    assert verify_benchmark(doc) == []
    verified = subprocess.run([sys.executable, "-m", "anvil_metrics", "verify", str(path)],
                              capture_output=True, text=True, cwd=REPO, timeout=60)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert doc["requests"] == n == doc["completed"] + doc["failed"]
    raw = {x["request_index"]: x for x in raw_lines(path.parent) if x["type"] == "request"}
    assert sorted(raw) == list(range(n))  # every issued request once: the run ended itself
    return HostileRun(doc, raw, out, watch.at)


def test_headers_then_silence_times_out_at_the_first_byte(hostile: HostileRun) -> None:
    f = hostile.failure("headers_then_silence")
    assert (f["kind"], f["phase"], f["http_status"]) == ("timeout", "prefill", 200)
    assert f["message"] == "no data within the first-byte timeout (1 s)"


def test_an_endless_stream_is_an_overrun_and_its_connection_closed(hostile: HostileRun
                                                                   ) -> None:
    f = hostile.failure("endless_stream")
    assert (f["kind"], f["phase"]) == ("overrun", "decode")
    assert "more than 96 output chunks (2 x max_tokens 16 + 64)" in f["message"]
    raw = hostile.raw[hostile.index("endless_stream")]
    assert raw["reasoning_chunks"] + raw["content_chunks"] == 96  # the 97th ended it


def test_html_with_200_is_a_bad_response_naming_type_and_bytes(hostile: HostileRun) -> None:
    f = hostile.failure("html_200")
    assert (f["kind"], f["phase"], f["http_status"]) == ("bad_response", "prefill", 200)
    assert f["message"] == ("a 200 answer that is not an event stream: content-type "
                            "'text/html; charset=utf-8', its body begins "
                            + repr(HTML_PAGE[:SHOWN_BYTES]))


def test_a_huge_header_is_refused_with_the_limit(hostile: HostileRun) -> None:
    f = hostile.failure("huge_header=8000000")
    assert (f["kind"], f["phase"]) == ("bad_response", "headers")
    assert f["message"] == ("the response head is longer than 1048576 bytes, the client's "
                            "limit")


def test_a_huge_line_is_cut_at_the_cap_and_memory_stays_bounded(hostile: HostileRun
                                                                 ) -> None:
    f = hostile.failure(f"huge_line={LINE_BYTES}")
    assert (f["kind"], f["phase"]) == ("malformed_chunk", "prefill")
    assert f["message"] == ("an SSE line or event longer than 16777216 bytes without its "
                            "end")
    i = hostile.index(f"huge_line={LINE_BYTES}")
    # the peak once request i - 1 was recorded (before the line), and once request i was
    peaks = hostile.peaks
    before = next(peaks[k] for k in sorted(peaks) if k >= i)
    after = next(peaks[k] for k in sorted(peaks) if k >= i + 1)
    assert after - before < 64 * MIB // 1024, (before, after)


def test_invalid_utf8_is_a_malformed_chunk(hostile: HostileRun) -> None:
    f = hostile.failure("invalid_utf8=2")
    assert (f["kind"], f["phase"]) == ("malformed_chunk", "decode")
    assert "not valid UTF-8" in f["message"] and "\\xff\\xfe" in f["message"]


@pytest.mark.parametrize(("case", "says"), [
    ("nan_usage", "chunk is not valid JSON"),
    ("negative_usage", "usage.completion_tokens is -5, not a count of tokens"),
])
def test_nan_and_negative_usage_are_malformed(hostile: HostileRun, case: str,
                                              says: str) -> None:
    f = hostile.failure(case)
    assert (f["kind"], f["phase"]) == ("malformed_chunk", "decode")
    assert says in f["message"]


def test_two_million_comment_lines_then_an_answer_is_answered(hostile: HostileRun) -> None:
    i = hostile.index("comment_flood=2000000")
    rows = {r["request_index"]: r for r in hostile.doc["request_timings"]}
    assert i in rows and hostile.raw[i]["failure"] is None
    assert hostile.raw[i]["reasoning_chunks"] + hostile.raw[i]["content_chunks"] == 10
