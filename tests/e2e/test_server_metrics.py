"""The server's own metrics beside a run: scraped by a child process, never in the way.

Real processes throughout: the simulator, `anvil run` (Locust), the sampler child, and for the
broken-endpoint cases a stub metrics server in a process of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, result_path
from sendstamps import lag_bounds_ms
from simfork import start_simulator

from anvil_metrics.live.session import SCRAPE_TIMEOUT_S
from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
LAGMON_INTERVAL_MS = 1.0  # how often the run's loop-lag monitor wakes (`live/lagmon.py`)

# /metrics that answers after `delay` seconds with `body` (a process of its own, so a hang
# costs the test process nothing); prints its port
STUB = textwrap.dedent("""
    import sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    delay, body = float(sys.argv[1]), sys.argv[2].encode()
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(delay)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the scraper gave up waiting: expected here
                pass
        def log_message(self, *a):
            pass
    s = ThreadingHTTPServer(("127.0.0.1", 0), H)
    s.daemon_threads = True
    print(s.server_address[1], flush=True)
    deadline = time.monotonic() + 300
    s.timeout = 1
    while time.monotonic() < deadline:
        s.handle_request()
""")


@pytest.fixture
def stub_metrics() -> Iterator:
    procs: list[subprocess.Popen] = []

    def start(delay_s: float, body: str) -> str:
        p = subprocess.Popen([sys.executable, "-c", STUB, str(delay_s), body],
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        port = p.stdout.readline().strip()
        return f"http://127.0.0.1:{port}/metrics"

    yield start
    for p in procs:
        p.kill()
        p.wait(10)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """The simulator of the broken-endpoint tests: they scrape a stub, never it, and it keeps
    no state a later run could see (no prefix cache), so one serves both."""
    with start_simulator(["--prefill-ms", "20", "--interval-ms", "5",
                          "--content-tokens", "30"]) as s:
        yield s


def _run(sim_url: str, out: Path, *extra: str, requests: int = 48) -> dict:
    proc = anvil("run", "scenarios/smoke.toml", "--host", sim_url, "--requests", str(requests),
                 "--users", "4", "--results-dir", str(out), *extra, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_json(result_path(proc))


def test_a_hanging_metrics_endpoint_never_touches_the_measurement(
        sim: SimProcess, stub_metrics, tmp_path: Path) -> None:
    """Each scrape hangs 5 s (beyond the 2 s timeout): the run's requests and loop lag are
    those of a run without scraping, and `server` says why it has no figures.

    The loop lag is judged against the run without scraping, just before on the same
    machine: the hung run's p99 wake-up is no later than the reference's worst one (plus
    one wake-up interval of the monitor); and a scrape waited for on the event loop would
    hold it for the scrape timeout, which no wake-up comes near."""
    hang = stub_metrics(5.0, "vllm:num_requests_running 1\n")
    pairs = []

    def close(off: dict, hung: dict) -> bool:
        return hung["p99"] <= off["max"] + LAGMON_INTERVAL_MS

    for attempt in range(2):  # a second pair before calling it a failure
        t0 = time.monotonic()
        off = _run(sim.url, tmp_path / f"off{attempt}", "--no-server-metrics")
        hung = _run(sim.url, tmp_path / f"hung{attempt}", "--server-metrics-url", hang)
        pairs.append((off["client"]["loop_lag_ms"], hung["client"]["loop_lag_ms"],
                      time.monotonic() - t0))
        assert hung["completed"] == off["completed"] == 48
        assert off["server"]["null_reasons"] == {"metrics": "not scraped: --no-server-metrics"}
        reasons = hung["server"]["null_reasons"]
        assert "no answer within 2 s" in reasons["scrapes"], reasons
        assert hung["server"]["samples"] == 0 and hung["server"]["spec_decode"] is None
        assert hung["client"]["loop_lag_ms"]["max"] < SCRAPE_TIMEOUT_S * 1000, pairs[-1]
        if close(*pairs[-1][:2]):
            break
    print(f"loop lag without scraping vs with a hanging endpoint (ms, ms, s): {pairs}")
    assert close(*pairs[-1][:2]), pairs


def test_garbage_metrics_are_recorded_as_such(sim: SimProcess, stub_metrics,
                                              tmp_path: Path) -> None:
    """Every scrape answers at once with garbage: the run says so, and the samples file
    still holds the scrape's header and exactly one `first` and one `last` scrape (two
    rounds of the four users are enough: the marks are the run's edges, whatever its
    length)."""
    junk = stub_metrics(0.0, "<html>this is { not metrics</html>")
    doc = _run(sim.url, tmp_path, "--server-metrics-url", junk, requests=8)
    reasons = doc["server"]["null_reasons"]
    assert "not Prometheus text" in reasons["scrapes"], reasons
    run_dir = result_path_dir(doc, tmp_path)
    lines = [orjson.loads(x) for x in (run_dir / "server_metrics.jsonl").read_bytes().splitlines()]
    assert lines[0]["type"] == "scrape" and lines[0]["url"] == junk
    marks = [x["mark"] for x in lines[1:] if x["mark"]]
    assert marks == ["first", "last"]


def result_path_dir(doc: dict, root: Path) -> Path:
    return next(root.glob(f"{doc['run_id']}"))


def _scrape(url: str) -> dict[str, float]:
    """name -> value summed over label sets, read by the test itself."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def _sim_truth(url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(url + "/sim/stats", timeout=10) as r:
        return orjson.loads(r.read())["metrics"]


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_server_block_against_the_simulators_own_counters(simulator, tmp_path: Path,
                                                          fmt: str) -> None:
    """`--spec-k 3 --spec-accept 0.7`, two streams at a time of six: the block's speculative
    figures equal the counters' (or gauges') own values, read by the test before and after
    the run, to 4 decimals; the queue's max and mean are the simulator's truth (the mean
    to rounding); its identity is discovered; the client's first chunk and end to end sit a
    little above the server's means (the role chunk rides with the first token, as vLLM's
    does)."""
    sim = simulator("--metrics-format", fmt, "--spec-k", "3", "--spec-accept", "0.7",
                    "--max-running", "2", "--prefill-ms", "30", "--interval-ms", "3",
                    "--reasoning-tokens", "10", "--content-tokens", "30",
                    "--role-chunk", "with-first-token")
    before, truth0 = _scrape(sim.url), _sim_truth(sim.url)
    proc = anvil("run", "scenarios/smoke.toml", "--host", sim.url, "--requests", "30",
                 "--users", "6", "--warmup-requests", "0", "--server-metrics-interval", "0.2",
                 "--results-dir", str(tmp_path), timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after, truth1 = _scrape(sim.url), _sim_truth(sim.url)
    doc = load_json(result_path(proc))
    s = doc["server"]
    print(f"\n[{fmt}] server block: {orjson.dumps(s).decode()}")
    assert (s["engine"], s["version"], s["max_model_len"]) == (fmt, "0.1.0+anvil.sim", 32768)
    assert s["requests"] == doc["completed"] == 30
    spec = s["spec_decode"]
    if fmt == "vllm":
        d = {k: after[f"vllm:spec_decode_num_{k}_total"] - before[f"vllm:spec_decode_num_{k}_total"]
             for k in ("drafts", "draft_tokens", "accepted_tokens")}
        assert spec["source"] == "counters"
        rate = d["accepted_tokens"] / d["draft_tokens"]
        length = 1 + d["accepted_tokens"] / d["drafts"]
        assert round(spec["acceptance_rate"], 4) == round(rate, 4)
        assert round(spec["accepted_length"], 4) == round(length, 4)
        assert (spec["drafts"], spec["accepted_tokens"]) == (d["drafts"], d["accepted_tokens"])
    else:  # gauges over recent requests: every request here drafts alike, so they hold still
        assert spec["source"] == "gauges"
        assert round(spec["acceptance_rate"], 4) == round(after["sglang:spec_accept_rate"], 4)
        assert round(spec["accepted_length"], 4) == round(after["sglang:spec_accept_length"], 4)
    assert s["requests_waiting"]["max"] == truth1["waiting_max"] == 4
    queue_ms = ((truth1["queue_time_s_sum"] - truth0["queue_time_s_sum"])
                / (truth1["queue_time_s_count"] - truth0["queue_time_s_count"]) * 1000)
    # the same requests' queue times, from the same histogram (the simulator writes floats
    # that round-trip): equal but for the order of the float operations
    assert s["queue_time_ms_mean"] == pytest.approx(queue_ms, rel=1e-9), (
        s["queue_time_ms_mean"], queue_ms)
    assert queue_ms > 100  # four of six wait a whole stream or two: the test has teeth
    diff = s["client_minus_server_ms"]
    # a little above the server's (25 ms on a quiet machine), or no more than the run's own
    # worst loop stall allows a client to be late (seen in CI: 43 and 51 ms beside a busy
    # suite): judged against what the run recorded, not a fixed time
    bound = max(25.0, lag_bounds_ms(doc)[1])
    assert 0 <= diff["e2e"] <= bound, (diff, bound)
    if fmt == "vllm":
        assert 0 <= diff["first_chunk_vs_ttft"] <= bound, (diff, bound)
    lines = proc.stdout
    assert "client first chunk minus server TTFT" in lines or fmt == "sglang", lines
    # verify recomputes the block from server_metrics.jsonl; a changed figure is caught
    path = result_path(proc)
    assert anvil("verify", str(path)).returncode == 0
    doc["server"]["queue_time_ms_mean"] += 1.0
    path.write_bytes(orjson.dumps(doc))
    bad = anvil("verify", str(path))
    assert bad.returncode == 1 and "server.queue_time_ms_mean" in bad.stdout + bad.stderr
