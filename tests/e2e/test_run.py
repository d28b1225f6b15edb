"""End to end: request counts, warm-up, plain `locust`, postprocess/verify and
usage errors (the demo: test_install.py) — real simulator and Locust processes on 127.0.0.1.

The tests that use FAST_SIM share one simulator (`sim`, ~0.5 CPU-s and ~0.6 s saved each):
none reads the server's state, only its own run's records and figures."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, anvil, load_json, raw_lines, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

FAST_SIM = ("--prefill-ms", "20", "--reasoning-tokens", "3", "--content-tokens", "5",
            "--interval-ms", "2", "--max-context", "8192")

SCENARIO = """
measurement_protocol = "count"
concurrency = 2
requests = 4
warmup_requests = {warmup}
max_tokens = 64
context_tokens = 8192
max_context_tokens = 8192
[context_distribution]
300 = 1
600 = 1
"""


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_simulator(list(FAST_SIM)) as started:
        yield started


def test_exact_request_count_with_warmup(sim: SimProcess, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO.format(warmup=3))
    proc = anvil("run", str(sc), "--host", sim.url, "--requests", "37", "--users", "5",
                 "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    rows = doc["request_timings"]
    assert len(rows) == 37 and doc["requests"] == 37 and doc["completed"] == 37
    assert sorted(r["request_index"] for r in rows) == list(range(37))
    assert doc["concurrency"] == 5 and doc["warmup_requests"] == 3
    assert doc["context_distribution"] == {"300": 19, "600": 18}
    assert {r["planned_context_tokens"] for r in rows} == {300, 600}
    raw = raw_lines(path.parent)
    assert raw[0]["type"] == "run" and raw[-1]["type"] == "run_end"
    reqs = [x for x in raw if x["type"] == "request"]
    warm = [x for x in reqs if x["warmup"]]
    assert len(warm) == 3 and len(reqs) == 40
    # warm-ups ended before the first measured request started
    assert max(w["end_ns"] for w in warm) <= min(x["start_ns"] for x in reqs if not x["warmup"])
    assert verify_benchmark(doc) == []
    calib = doc["prompt_calibration"]
    assert calib["method"] == "tokenize" and calib["planned_vs_counted_error_pct_max"] is not None
    wrong = calib["planned_vs_counted_error_pct_max"] + 1.0
    tampered = {**doc, "prompt_calibration": {**calib, "planned_vs_counted_error_pct_max": wrong}}
    assert [m.split(":")[0] for m in verify_benchmark(tampered)] == [
        "prompt_calibration.planned_vs_counted_error_pct_max"]
    assert (path.parent / "locust_stats.csv").exists()
    assert "result: " in proc.stdout and "TTFT" in proc.stdout
    # the same rows come back from the raw file alone
    again = anvil("postprocess", str(path.parent))
    assert again.returncode == 0, again.stderr
    assert load_json(path)["request_timings"] == rows


def test_plain_locust_same_options(sim: SimProcess, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO.format(warmup=0))
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless",
         "-H", sim.url, "-u", "3", "-r", "3", "--scenario", str(sc), "--requests", "11",
         "--results-dir", str(tmp_path / "res"), "--run-time", "60s"],
        cwd=REPO, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = list((tmp_path / "res").glob("benchmark-*"))
    assert len(runs) == 1
    doc = load_json(runs[0] / "benchmark.json")
    assert doc["requests"] == 11 and doc["completed"] == 11 and doc["concurrency"] == 3
    assert sorted(r["request_index"] for r in doc["request_timings"]) == list(range(11))
    assert verify_benchmark(doc) == []


def test_verify_cli_names_a_mismatch(tmp_path: Path) -> None:
    example = REPO / "tests/data/benchmark-v1.000_51f6de0d03ca0563.json"
    ok = anvil("verify", str(example))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(example.read_text().replace('"ttft_p50_ms": 4630.146999999852',
                                               '"ttft_p50_ms": 4630.2'))
    res = anvil("verify", str(bad))
    assert res.returncode == 1
    assert "metrics.ttft_p50_ms" in res.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "scenarios/smoke.toml", "--host", "ftp://x"], "--host"),
        (["run", "scenarios/smoke.toml", "--host", "http://127.0.0.1:1", "--users", "0"],
         "--users"),
        (["run", "scenarios/nope.toml", "--host", "http://127.0.0.1:1"], "nope.toml"),
        (["run", "scenarios/smoke.toml", "--host", "http://127.0.0.1:1", "--max-tokens",
          "99999"], "--max-tokens"),
        (["verify", "/nonexistent.json"], "nonexistent"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], needle: str) -> None:
    proc = anvil(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and needle in err


HOOK_LOCUSTFILE = '''
from anvil_metrics.events import anvil_events
from anvil_metrics.runs.locustfile import ChatUser  # noqa: F401

seen = {"first_output": [], "first_content": [], "stream_end": [], "request_record": []}

@anvil_events.first_output.add_listener
def _fo(request_index, t_ns, start_ns, warmup, **kw):
    seen["first_output"].append((request_index, t_ns - start_ns))

@anvil_events.first_content.add_listener
def _fc(request_index, t_ns, start_ns, warmup, **kw):
    seen["first_content"].append((request_index, t_ns - start_ns))

@anvil_events.stream_end.add_listener
def _se(record, **kw):
    seen["stream_end"].append(record.request_index)

@anvil_events.request_record.add_listener
def _rr(record, **kw):
    seen["request_record"].append(record.request_index)

@anvil_events.run_finished.add_listener
def _done(run_dir, benchmark_path, **kw):
    import json
    (run_dir / "hooks.json").write_text(json.dumps(seen))
'''


def test_user_locustfile_can_hook_anvil_events(sim: SimProcess, tmp_path: Path) -> None:
    lf = tmp_path / "mine.py"
    lf.write_text(HOOK_LOCUSTFILE)
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(lf), "--headless", "-H", sim.url,
         "-u", "2", "-r", "2", "--requests", "6", "--results-dir", str(tmp_path / "res"),
         "--run-time", "60s"],
        cwd=REPO, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = list((tmp_path / "res").glob("benchmark-*"))
    seen = load_json(run / "hooks.json")
    doc = load_json(run / "benchmark.json")
    rows = {r["request_index"]: r for r in doc["request_timings"]}
    assert sorted(seen["request_record"]) == sorted(seen["stream_end"]) == list(range(6))
    for idx, dt in seen["first_content"]:
        assert dt / 1e6 == rows[idx]["ttft_ms"]  # the event's stamp is the row's stamp
    assert len(seen["first_output"]) == 6


RACE_LOCUSTFILE = '''
import gevent
from locust import events
from anvil_metrics.live.session import RunSession
from anvil_metrics.runs.locustfile import ChatUser  # noqa: F401

_finish = RunSession.finish

def slow_finish(self, *args, **kwargs):
    gevent.sleep(1.0)  # a busy machine's post-processing
    return _finish(self, *args, **kwargs)

RunSession.finish = slow_finish

@events.test_stopping.add_listener
def second_stopper(environment, **kw):
    # a second greenlet ends the run too, as anvil's duration does beside Locust's -t
    gevent.spawn_later(0.1, environment.runner.quit)
'''


def test_a_second_stop_while_the_run_is_written_waits_for_it(sim: SimProcess,
                                                             tmp_path: Path) -> None:
    """Two greenlets stop the run (Locust's `-t` and anvil's own end of the same duration):
    the second `runner.quit()` finds the runner stopped and ends Locust's main greenlet
    while the first is writing benchmark.json; the process waits for it (it exited 0
    without one, seen once in a suite run on a busy machine)."""
    lf = tmp_path / "race_locustfile.py"
    lf.write_text(RACE_LOCUSTFILE)
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(lf), "--headless", "-H", sim.url,
         "-u", "2", "-r", "2", "--requests", "4", "--results-dir", str(tmp_path / "res")],
        cwd=REPO, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = list((tmp_path / "res").glob("benchmark-*"))
    assert raw_lines(run)[-1]["type"] == "run_end"
    assert len(load_json(run / "benchmark.json")["request_timings"]) == 4
    assert "the run is being written; exiting once it is" in proc.stderr


def test_http_errors_become_typed_failures(simulator, tmp_path: Path) -> None:
    """The scenario claims an 8k context, the server has 200 tokens and no tokenize
    endpoint to say so: every request (and the calibration probes: sizing falls back to an
    estimate) gets the server's OpenAI-style 400, recorded as a typed failure; the run
    still completes, and exits 4. (A server that reports its limit is refused up front: see
    test_e2e_prompt_modes.)"""
    sim = simulator(*FAST_SIM[:-2], "--max-context", "200", "--tokenize-api", "none")
    sc = write_scenario(tmp_path / "s.toml", SCENARIO.format(warmup=0))
    # --no-server-metrics: only the requests' failures are read here, and the sampler is a
    # process of its own beside the run (~0.3 CPU-s)
    proc = anvil("run", str(sc), "--host", sim.url, "--requests", "5", "--users", "2",
                 "--no-server-metrics", "--results-dir", str(tmp_path))
    assert proc.returncode == 4, proc.stdout + proc.stderr  # every measured request failed
    assert proc.stderr.splitlines()[-1].startswith(
        "anvil: every one of the 5 measured requests failed (5 http_error)")
    doc = load_json(result_path(proc))
    assert (doc["requests"], doc["completed"], doc["failed"]) == (5, 0, 5)
    for f in doc["failures"]:
        assert f["kind"] == "http_error" and f["http_status"] == 400
        assert f["phase"] == "headers" and "maximum context length" in f["message"]
    assert sorted(r["request_index"] for r in doc["request_timings"] + doc["failures"]) == \
        list(range(5))
    assert verify_benchmark(doc) == []


def test_stopped_run_keeps_every_issued_request(simulator, tmp_path: Path) -> None:
    """A run ended by --run-time while streams are in flight: benchmark.json is still
    written, every issued request appears exactly once, and none fails but as `cancelled`
    (anvil's stop timeout, 30 s here, lets these streams finish: they are rows; a stream
    cut by a stop is `cancelled`, which test_stop_signals drives).

    Each request lasts ~175 ms (8 tokens 20 ms apart), so the 8 users keep 8 streams in
    flight at the stop while issuing ~45 a second, not ~200 as with 3 ms steps (whose load
    cost ~0.8 CPU-s more)."""
    sim = simulator("--prefill-ms", "10", "--prefill-ms-per-token", "0.01",
                    "--reasoning-tokens", "3", "--content-tokens", "5", "--interval-ms", "20",
                    "--max-context", "8192")
    sc = write_scenario(tmp_path / "s.toml", SCENARIO.format(warmup=0))
    # -t counts from Locust's start, set-up included (model, calibration, the server's
    # identity and the metrics scrape before the first measured request: ~0.1 s here, but
    # 2 s beside the suite and a hog, when -t 2 left no load at all): 4 s leave it seconds
    proc = anvil("run", str(sc), "--host", sim.url, "--requests", "100000", "--users", "8",
                 "--run-time", "4", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load_json(result_path(proc))
    assert doc["requests"] == doc["completed"] + doc["failed"] > 8
    assert {f["kind"] for f in doc["failures"]} <= {"cancelled"}
    indices = sorted(r["request_index"] for r in doc["request_timings"] + doc["failures"])
    assert indices == list(range(doc["requests"]))
    assert verify_benchmark(doc) == []
