"""A Mooncake trace replayed end to end: `anvil run --trace` against the simulator with its
prefix cache on, 1,000 requests whose `hash_ids` share prefixes (`tracebuild.py`), by one
Locust process and by a master with two workers.

The truth each figure is held to: the trace file itself. Each request fell due at its
timestamp ÷ `--trace-speed` after the first (from the raw stamps: start − start delay, to
the nanosecond of the millisecond stamps); the server counted each prompt at the trace's
`input_length` (within 0.5 %; by construction exactly); the simulator's prefix cache served
the share of input tokens the trace's own sharing allows, within 2 points; the `load` block
reports the schedule's lag and the rate offered; `anvil verify` recomputes the document.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from conftest import anvil
from simfork import start_simulator
from tracebuild import mooncake_trace

from anvil_metrics.load.trace import read_trace, trace_stats
from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e

N, SPEED, USERS = 1000, 2.0, 32  # 50 requests/s in the trace: 100/s replayed, ~10 s
BLOCK = 128  # tokens per hash id (Mooncake's are 512; --trace-block sets it): smaller prompts


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "processes-2"])
def replay(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The replay by one Locust process, and by a master with two workers (the master owns
    the schedule; each worker reads the same trace file)."""
    tmp = tmp_path_factory.mktemp("trace")
    trace = tmp / "mooncake.jsonl"
    cached, total = mooncake_trace(trace, N, groups=20, rate_rps=50.0, max_output=4,
                                   block=BLOCK)
    with start_simulator(["--prefill-ms", "1", "--prefill-ms-per-token", "0.001",
                          "--interval-ms", "1", "--reasoning-tokens", "0",
                          "--max-context", "16384", "--prefix-cache",
                          "--prefix-cache-block", str(BLOCK)]) as sim:
        proc = anvil("run", "scenarios/smoke.toml", "--trace", str(trace), "--trace-speed",
                     str(SPEED), "--trace-block", str(BLOCK), "-H", sim.url, "-u", str(USERS),
                     "--processes", str(request.param), "--no-server-metrics",
                     "--results-dir", str(tmp / "res"))
    ok(proc)
    (bench,) = (tmp / "res").glob("benchmark-*/benchmark.json")
    lines = [orjson.loads(x) for x in trace.read_bytes().splitlines()]
    return {"doc": orjson.loads(bench.read_bytes()), "path": bench, "stdout": proc.stdout,
            "trace": lines, "file": trace, "expected": cached / total,
            "processes": request.param}


def test_due_times_are_the_timestamps_over_the_speed(replay: dict) -> None:
    raw = replay["path"].with_name("requests.jsonl")
    recs = sorted((x for x in map(orjson.loads, raw.read_bytes().splitlines())
                   if x.get("type") == "request"), key=lambda x: x["request_index"])
    assert [x["request_index"] for x in recs] == list(range(N))
    due = [x["start_ns"] - x["extra"]["start_delay_ns"] for x in recs]
    ts = [x["timestamp"] for x in replay["trace"]]
    want = [round((t - ts[0]) * 1e6 / SPEED) for t in ts]
    if replay["processes"] == 1:
        assert [d - due[0] for d in due] == want  # to the ns, so to the millisecond
    else:  # the master's due times on each worker's clock: to the millisecond
        assert max(abs(d - due[0] - w) for d, w in zip(due, want, strict=True)) < 1_000_000
        assert len({x["worker"] for x in recs}) == 2
    load = replay["doc"]["load"]
    assert load["arrival"] == "trace" and load["waited_for_user"] is not None
    assert load["offered_rate_rps"] == pytest.approx((N - 1) / ((ts[-1] - ts[0]) / 1000 / SPEED))
    lag = load["schedule_lag_ms"]
    assert lag["p99"] is not None and 0 <= lag["p50"] <= lag["p99"] <= lag["max"]
    assert f"schedule lag p50 {lag['p50']:.2f}" in replay["stdout"] or "lag" in replay["stdout"]


def test_each_prompt_is_the_traces_size(replay: dict) -> None:
    rows = replay["doc"]["request_timings"]
    assert len(rows) == N and replay["doc"]["failed"] == 0
    sizes = [x["input_length"] for x in replay["trace"]]
    errors = [abs(r["prompt_tokens"] - sizes[r["request_index"]]) / sizes[r["request_index"]]
              for r in rows]
    assert max(errors) <= 0.005, max(errors)
    assert replay["doc"]["prompt_calibration"]["planned_vs_counted_error_pct_max"] <= 0.5
    outs = [x["output_length"] for x in replay["trace"]]
    assert all(r["output_tokens"] == outs[r["request_index"]] for r in rows)


def test_the_servers_cache_serves_what_the_trace_shares(replay: dict) -> None:
    block = replay["doc"]["trace"]
    assert block["requests"] == N and block["speed"] == SPEED and block["block_tokens"] == BLOCK
    assert block["expected_reuse"] == pytest.approx(replay["expected"])
    assert abs(block["reported_reuse"] - block["expected_reuse"]) <= 0.02, block
    assert (f"prefix reuse the trace allows {block['expected_reuse']:.3f}, reported by the "
            f"server {block['reported_reuse']:.3f}") in replay["stdout"]
    # what `anvil trace stats` says before the replay (its CLI: tests/unit/cli/test_trace.py)
    stats = trace_stats(read_trace(replay["file"], block_tokens=BLOCK), BLOCK)
    assert stats.expected_hit_ratio == block["expected_reuse"]


def test_verify_recomputes_the_replay(replay: dict) -> None:
    if replay["processes"] == 1:  # the command once; the same check in this process after
        ok(anvil("verify", str(replay["path"])))
    assert verify_benchmark(replay["doc"]) == []
    doc = dict(replay["doc"])
    doc["trace"] = {**doc["trace"], "reported_reuse": doc["trace"]["reported_reuse"] + 0.01}
    assert any(p.startswith("trace.reported_reuse") for p in verify_benchmark(doc))


@pytest.mark.parametrize("line,flags,named", [
    (b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
     b'{"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n',
     [], ":2: timestamp"),
    (b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n',
     ["--rate", "2"], "--rate '2': rate = 2.0 is not allowed; use none with a trace"),
    (b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n',
     ["--trace-window", "5:"], "holds no request to replay in --trace-window 5"),
])  # fmt: skip
def test_a_bad_trace_or_flag_is_one_line_and_exit_2(tmp_path: Path, line: bytes,
                                                     flags: list[str], named: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(line)
    proc = anvil("run", "scenarios/smoke.toml", "--trace", str(trace), *flags, "-H",
                 "http://127.0.0.1:9",
                 "--results-dir", str(tmp_path / "res"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert named in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_a_plain_traces_sessions_replay_as_conversations(tmp_path: Path) -> None:
    """A plain JSONL trace of 10 sessions of 3 requests (1,000, 2,000 and 3,000 tokens, the
    sessions interleaved): one session header per session (the simulator logs each), each
    turn longer, and the simulator's prefix cache serves what each session's request shares
    with the one before it (its whole message: `prep/traceprompts.py`, tested to the word
    in tests/unit/load/test_body.py) as the trace's expected reuse says, within 2 points."""
    trace, log = tmp_path / "sessions.jsonl", tmp_path / "received.jsonl"
    lines = [{"timestamp": (turn * 10 + s) * 40, "input_tokens": 1000 * (turn + 1) + 7 * s,
              "output_tokens": 2, "session_id": f"s{s}"}
             for turn in range(3) for s in range(10)]
    trace.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    with start_simulator(["--prefill-ms", "1", "--prefill-ms-per-token", "0.001",
                          "--interval-ms", "1", "--reasoning-tokens", "0",
                          "--max-context", "16384", "--prefix-cache", "--prefix-cache-block",
                          "16", "--log-requests", str(log)]) as sim:
        proc = anvil("run", "scenarios/smoke.toml", "--trace", str(trace), "-H", sim.url,
                     "-u", "8", "--no-server-metrics", "--results-dir", str(tmp_path / "res"))
    ok(proc)
    (bench,) = (tmp_path / "res").glob("benchmark-*/benchmark.json")
    doc = orjson.loads(bench.read_bytes())
    assert verify_benchmark(doc) == [] and doc["completed"] == 30
    received = [x for x in map(orjson.loads, log.read_bytes().splitlines())
                if x["session"] is not None]
    by_session: dict[str, list[str]] = {}
    for x in sorted(received, key=lambda x: x["t_ns"]):
        (message,) = [m for m in x["messages"] if m[0] == "user"]
        by_session.setdefault(x["session"], []).append(message)
    assert len(by_session) == 10 and {len(v) for v in by_session.values()} == {3}
    assert {s.rsplit("-", 1)[1] for s in by_session} == {f"s{k}" for k in range(10)}
    for turns in by_session.values():  # (role, characters, crc32): each turn longer
        assert turns[0][1] < turns[1][1] < turns[2][1]
    block = doc["trace"]
    assert block["expected_reuse"] == pytest.approx(
        sum(min(a["input_tokens"], b["input_tokens"] - 1) for a, b in zip(
            lines[:20], lines[10:], strict=True)) / sum(x["input_tokens"] for x in lines))
    assert abs(block["reported_reuse"] - block["expected_reuse"]) <= 0.02, block
