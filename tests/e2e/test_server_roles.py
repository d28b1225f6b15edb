"""Two simulators as two roles (`--server-metrics-url prefill=URL decode=URL`), started as
the two sides of a P/D pair (`anvil sim --pd-role`): each role's figures, its KV transfers
among them, are that simulator's own, `combined` their sum, and each role's
client-minus-server pairing is its own part (prefill: first token; decode: time per
output token).

The run's load goes to the prefill simulator (its `--host`); the test sends its own K small
requests to the decode simulator once the decode sampler has written its `first` mark, so
the decode server's exact `/sim/stats` (it serves nothing else) is what its role must show,
and the test checks that they finished before the `last` mark (the same clock: both stamp
`time.perf_counter_ns()` on this host).

Each role's steady state is its own: scraped every 20 ms, the prefill server held its two
users' requests running (p50 2 in both halves of the window), the decode server its K
requests near the start and nothing after (p50 0 in both): both steady, each over its own
file's samples, counted here from the file."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, result_path
from simfork import start_simulator

pytestmark = pytest.mark.e2e

K = 5  # the test's own requests to the decode simulator
SCENARIO = """\
measurement_protocol = "smoke"
concurrency = 2
requests = 24
warmup_requests = 0
max_tokens = 16
context_tokens = 256
"""


def _json(url: str, body: dict | None = None) -> dict:
    data = None if body is None else orjson.dumps(body)
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - 127.0.0.1
        return orjson.loads(resp.read())


def _window_samples(path: Path) -> int:
    """Successful scrapes from the `first` mark to the `last`, inclusive."""
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    samples = [x for x in lines if x.get("type") == "sample"]
    lo = next(x["seq"] for x in samples if x.get("mark") == "first")
    hi = next(x["seq"] for x in samples if x.get("mark") == "last")
    return sum(1 for x in samples if x["ok"] and lo <= x["seq"] <= hi)


def _decode_load(sim_url: str, results: Path, done: list[int]) -> None:
    """After the decode file's `first` mark (bounded wait), K requests, then the end stamp."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(b'"mark":"first"' in p.read_bytes()
               for p in results.glob("*/server_metrics.decode.jsonl")):
            break
        time.sleep(0.01)
    else:
        return
    model = _json(f"{sim_url}/v1/models")["data"][0]["id"]
    for i in range(K):  # streamed: the simulator's metrics count streamed chat requests
        body = orjson.dumps({"model": model, "max_tokens": 3, "stream": True,
                             "messages": [{"role": "user", "content": f"decode {i}"}]})
        req = urllib.request.Request(f"{sim_url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - 127.0.0.1
            resp.read()
    done.append(time.perf_counter_ns())


def test_each_role_holds_its_own_simulators_counts(tmp_path: Path) -> None:
    with start_simulator(["--prefill-ms", "20", "--interval-ms", "5", "--pd-role", "prefill",
                          "--kv-bytes-per-token", "4096"]) as pre, \
            start_simulator(["--prefill-ms", "1", "--interval-ms", "1",
                             "--pd-role", "decode"]) as dec:
        results = tmp_path / "results"
        scenario = tmp_path / "s.toml"
        scenario.write_text(SCENARIO)
        done: list[int] = []
        t = threading.Thread(target=_decode_load, daemon=True,
                             args=(dec.url, results, done))
        t.start()
        proc = anvil("run", str(scenario), "--host", pre.url, "--results-dir", str(results),
                     "--server-metrics-url", f"prefill={pre.url}/metrics",
                     "--server-metrics-url", f"decode={dec.url}/metrics",
                     "--server-metrics-interval", "0.02", timeout=120)
        t.join(30)
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc = load_json(result_path(proc))
        truth = _json(f"{dec.url}/sim/stats")["metrics"]
    server = doc["server"]
    assert server["requests"] is None and server["null_reasons"]["metrics"].startswith(
        "scraped per role")
    run_dir = result_path(proc).parent
    last = next(orjson.loads(x) for x in (run_dir / "server_metrics.decode.jsonl")
                .read_bytes().splitlines() if b'"mark":"last"' in x)
    assert done and done[0] < last["t_ns"], "the decode requests ended after the window"
    pre_block, dec_block = server["roles"]["prefill"], server["roles"]["decode"]
    assert truth["requests"] == K
    assert dec_block["requests"] == truth["requests"]
    assert dec_block["prompt_tokens_mean"] == pytest.approx(truth["prompt_tokens"] / K)
    assert dec_block["e2e_ms_mean"] == pytest.approx(truth["e2e_s_sum"] * 1000 / K)
    assert pre_block["requests"] == doc["completed"] == 24
    rows = doc["request_timings"]
    assert server["combined"]["requests"] == 24 + K
    assert server["combined"]["prompt_tokens"] == truth["prompt_tokens"] + sum(
        r["prompt_tokens"] for r in rows)
    assert server["combined"]["generation_tokens"] == truth["generation_tokens"] + sum(
        r["output_tokens"] for r in rows)
    # KV transfers: the decode simulator's exact counts; the prefill one's are its window's
    # 24 requests, of prompt tokens x 4096 bytes each, at 10 GB/s
    dec_kv, pre_kv = dec_block["kv_transfer"], pre_block["kv_transfer"]
    assert (dec_kv["transfers"], dec_kv["bytes"], dec_kv["failed"]) == (
        truth["kv_transfers"], truth["kv_transfer_bytes"], truth["kv_failed_transfers"])
    assert dec_kv["transfer_ms_mean"] == pytest.approx(
        truth["kv_transfer_s_sum"] * 1000 / K, rel=1e-12)
    prompt_bytes = 4096 * sum(r["prompt_tokens"] for r in rows)
    assert (pre_kv["transfers"], pre_kv["bytes"]) == (24, prompt_bytes)
    assert pre_kv["transfer_ms_mean"] == pytest.approx(prompt_bytes / 1e10 * 1000 / 24)
    assert server["combined"]["kv_transfers"] == 24 + K
    assert server["combined"]["kv_transfer_bytes"] == prompt_bytes + truth["kv_transfer_bytes"]
    # the client against the right role: first token against prefill, TPOT against decode
    def mean(key: str) -> float:
        return sum(r[key] for r in rows) / len(rows)

    pre_pair, dec_pair = (b["client_minus_server_ms"] for b in (pre_block, dec_block))
    assert pre_pair["first_chunk_vs_ttft"] == pytest.approx(
        mean("time_to_first_chunk_ms") - pre_block["ttft_ms_mean"], rel=1e-9)
    assert pre_pair["tpot"] is None and dec_pair["first_chunk_vs_ttft"] is None
    assert dec_pair["tpot"] == pytest.approx(
        mean("mean_inter_token_latency_ms") - truth["tpot_s_sum"] * 1000 / truth[
            "tpot_s_count"], rel=1e-9)
    # each role's steady state from its own samples: both held their running gauge
    for role, block, running in (("prefill", pre_block, 2.0), ("decode", dec_block, 0.0)):
        steady = block["steady_state"]
        assert steady["samples"] == _window_samples(run_dir / f"server_metrics.{role}.jsonl")
        assert steady["samples"] >= 14, steady
        assert steady["verdict"] == "steady", (role, steady)
        gauge = steady["gauges"]["requests_running"]
        assert (gauge["first_p50"], gauge["second_p50"]) == (running, running), (role, gauge)
    check = anvil("verify", str(result_path(proc)))
    assert check.returncode == 0, check.stdout + check.stderr
