"""End to end against known truth: simulator (real process) → `anvil run` (real Locust
process) → requests.jsonl → benchmark.json, every figure checked against the timing the
simulator was told to produce and against the moments it actually wrote each event.

Plan: prefill 150 ms (+ `per_token_ms` × prompt tokens), then 20 reasoning + 50 content
tokens 8 ms apart. So, per request: first output at the prefill's end P, first content at
P + 20·8 ms, end at P + 69·8 ms; generation 552 ms over 69 gaps → 125 tok/s, ITL 8 ms.
(The prefill was 300 ms; every bound here is an absolute error in ms from a planned or sent
moment, which the prefill's length does not change: 150 ms takes each request from 852 to
702 ms.)
"""

from __future__ import annotations

import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario

from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.simproc import pinned_apart

pytestmark = pytest.mark.e2e

PREFILL_MS, N_REASON, N_CONTENT, STEP_MS = 150.0, 20, 50, 8.0
GEN_MS = (N_REASON + N_CONTENT - 1) * STEP_MS
DECODE = (N_REASON + N_CONTENT - 1) / (GEN_MS / 1000)

SCENARIO = """
measurement_protocol = "truth"
concurrency = {users}
requests = {requests}
warmup_requests = {users}
max_tokens = 256
context_tokens = 8192
max_context_tokens = 8192
[context_distribution]
{sizes}
[request]
include_usage = {usage}
"""


def _run(simulator, tmp_path, users: int, requests: int, usage: bool = True,
         reasoning_field: str = "reasoning_content", per_token_ms: float = 0.0,
         sizes: tuple[int, ...] = (1024,)) -> dict:
    sim = simulator("--prefill-ms", str(PREFILL_MS), "--prefill-ms-per-token",
                    str(per_token_ms), "--reasoning-tokens", str(N_REASON),
                    "--content-tokens", str(N_CONTENT), "--interval-ms", str(STEP_MS),
                    "--max-context", "8192", "--stamp-send", "--reasoning-field",
                    reasoning_field)
    sc = write_scenario(tmp_path / "truth.toml", SCENARIO.format(
        users=users, requests=requests, usage=str(usage).lower(),
        sizes="\n".join(f"{n} = 1" for n in sizes)))
    # the simulator on a CPU of its own, as a server on its own machine (see `pinned_apart`)
    with pinned_apart(sim.pid):
        # --no-server-metrics: the simulator renders /metrics on the loop that writes its
        # tokens, so a scrape each second would add its own lateness to the plan errors
        # measured here (a real server renders them apart from its engine)
        proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                     "--no-server-metrics")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return load_json(result_path(proc))


def _raw_requests(doc: dict, tmp_path) -> dict[int, dict]:
    run_dir = tmp_path / "res" / doc["run_id"]
    return {x["request_index"]: x for x in raw_lines(run_dir)
            if x["type"] == "request" and not x["warmup"]}


def _quantile(errs: list[float], q: float) -> float:
    return sorted(errs)[max(0, int(len(errs) * q) - 1)]


# (name, users, requests, per-token prefill, planned sizes, bounds); bounds per truth:
# (quantile q, error allowed at q, error allowed for every request), in ms; for decode
# tok/s and mean ITL the same triple in relative error (the spec's 1 % at p90: a single
# multi-ms stall of this VM at a stream's end moves one request's rate by ~1 %).
#
# Against the send stamps (anvil's own error), a stream alone is exact to ~0.5 ms (the
# bounds leave room for this VM's rare multi-ms stalls, which no client can avoid). The plan
# adds the request's way to the simulator and the simulator's own lateness, each usually
# < 0.5 ms but now and then several ms (a wake-up of its process), so plan bounds cap the
# median and catch gross errors only. The simulator runs on a CPU of its own
# (`pinned_apart`): sharing the client's, spread16's plan error had a median of 0.9-2.1 ms
# over 8 runs on this VM (one above the 2 ms bound), pinned 0.4-1.0 ms.
#
# 16 streams with identical deadlines all end in the same millisecond: each burst of 16
# events is parsed one after another on the one gevent hub (~0.1 ms an event on this VM; a
# bare asyncio client pays ~0.05 ms), so the last of a burst is late by ~2-4 ms, and the
# simulator writes its 64 final events one after another too, so the plan error there is
# mostly the simulator's. That worst case is measured and loosely bounded here (a
# characterisation, printed with -s); the performance issue tightens it.
SPREAD_SIZES = tuple(512 + 96 * i for i in range(16))
CASES = [
    # one stream, 16 requests in a row: once, right after a memory-heavy test, 3 of 8 had
    # first-output lags of 1.3 ms or more (p50 0.2) and moved the q75 past its bound
    ("single", 1, 16, 0.0, (1024,),
     {"send": (0.75, 1.0, 8.0), "plan": (0.5, 2.0, 12.0), "rate": (0.9, 0.01, 0.03)}),
    # 16 streams whose prompts differ, so their prefills (and every deadline) differ by ~1 ms;
    # four rounds, so that one multi-ms stall of this VM (it takes every stream ending in
    # it, ~5 of 16) cannot move a p90: once in CI, 32 requests gave end-send p90 5.7 ms
    # (p50 0.34) and a rate error p90 of 1.6 %
    ("spread16", 16, 64, 0.01, SPREAD_SIZES,
     {"send": (0.75, 3.0, 10.0), "plan": (0.5, 2.0, 15.0), "rate": (0.9, 0.01, 0.03)}),
    ("aligned16", 16, 32, 0.0, (1024,),
     {"send": (0.5, 2.5, 15.0), "plan": (0.5, 6.0, 20.0), "rate": (0.9, 0.02, 0.05)}),
]


@pytest.mark.parametrize("name,users,requests,per_token_ms,sizes,bounds", CASES,
                         ids=[c[0] for c in CASES])
def test_timings_match_truth(simulator, tmp_path, name, users, requests, per_token_ms,
                             sizes, bounds) -> None:
    """Two truths: the plan (what the simulator was told), and the simulator's own send
    stamps (when it wrote each event's bytes; same host, same clock). anvil's stamp minus
    the send stamp is anvil's own error; the plan error adds the request's transit and the
    simulator's own lateness."""
    doc = _run(simulator, tmp_path, users, requests, per_token_ms=per_token_ms, sizes=sizes,
               reasoning_field="reasoning" if users == 1 else "reasoning_content")
    assert doc["requests"] == requests and doc["completed"] == requests
    assert doc["failed"] == 0 and doc["concurrency"] == users
    rows = doc["request_timings"]
    assert len(rows) == requests
    raw = _raw_requests(doc, tmp_path)
    errs: dict[str, list[float]] = {k: [] for k in (
        "ttfo-plan", "ttft-plan", "e2e-plan", "first_output-send", "first_content-send",
        "end-send")}
    rate_errs: list[float] = []
    # how late the simulator itself wrote each planned event (its send stamp against its
    # own arrival stamp t0 plus the plan), which the plan error includes but anvil did not
    # cause: a wake-up of the simulator's process once made one e2e 12.7 ms off its plan
    # while anvil's end stamp was 2.8 ms after the send
    sim_late: dict[str, list[float]] = {k: [] for k in ("ttfo-plan", "ttft-plan", "e2e-plan")}
    net: dict[str, list[float]] = {k: [] for k in sim_late}  # plan error less that lateness
    for r in rows:
        rec = raw[r["request_index"]]
        srv = rec["extra"]["server"]
        for key, stamp, sent in (("first_output-send", "first_output_ns", "first_output_sent_ns"),
                                 ("first_content-send", "first_content_ns",
                                  "first_content_sent_ns"),
                                 ("end-send", "end_ns", "last_sent_ns")):
            lag_ms = (rec[stamp] - srv[sent]) / 1e6
            assert lag_ms >= 0, (stamp, lag_ms, r)  # never before the server sent it
            errs[key].append(lag_ms)
        prefill = PREFILL_MS + per_token_ms * r["prompt_tokens"]
        for key, field, sent, planned in (
                ("ttfo-plan", "time_to_first_output_ms", "first_output_sent_ns", prefill),
                ("ttft-plan", "ttft_ms", "first_content_sent_ns", prefill + N_REASON * STEP_MS),
                ("e2e-plan", "e2e_ms", "last_sent_ns", prefill + GEN_MS)):
            late = (srv[sent] - srv["t0_ns"]) / 1e6 - planned
            errs[key].append(abs(r[field] - planned))
            # signed: a stamp early against the plan while the simulator was late is not
            # excused by that lateness (a start stamped late would look so)
            net[key].append(abs(r[field] - planned - max(0.0, late)))
            sim_late[key].append(late)
        rate_errs.append(abs(r["decode_tok_s"] - DECODE) / DECODE)
        rate_errs.append(abs(r["mean_inter_token_latency_ms"] - STEP_MS) / STEP_MS)
        assert r["output_token_source"] == "usage"
        assert r["output_tokens"] == N_REASON + N_CONTENT
        assert (r["reasoning_chunks"], r["content_chunks"]) == (N_REASON, N_CONTENT)
        assert r["prompt_tokens"] > 0
    for key, e in errs.items():
        print(f"{name}: |{key}| ms p50 {_quantile(e, 0.5):.2f} p90 {_quantile(e, 0.9):.2f} "
              f"max {max(e):.2f}")
    print(f"{name}: decode/ITL relative error max {max(rate_errs):.4f}")
    q, at_q, at_max = bounds["rate"]
    assert _quantile(rate_errs, q) <= at_q and max(rate_errs) <= at_max, sorted(rate_errs)
    for key, e in errs.items():
        q, at_q, at_max = bounds[key.rsplit("-", 1)[1]]
        assert _quantile(e, q) <= at_q, (key, sorted(e))
        # every request: the plan error less the simulator's own recorded lateness
        assert max(net.get(key, e)) <= at_max, (key, sorted(e), sorted(sim_late.get(key, [])))
    assert verify_benchmark(doc) == []


def test_without_usage_counts_chunks(simulator, tmp_path) -> None:
    doc = _run(simulator, tmp_path, 2, 4, usage=False)
    for r in doc["request_timings"]:
        assert r["output_token_source"] == "chunks"
        assert r["output_tokens"] == N_REASON + N_CONTENT
        assert r["prompt_tokens"] is None
        assert abs(r["ttft_ms"] - (PREFILL_MS + N_REASON * STEP_MS)) <= 10.0  # timing: above
    assert doc["metrics"]["output_token_sources"] == {"chunks": 4}
    assert doc["metrics"]["prompt_token_samples"] == 0
    assert verify_benchmark(doc) == []


def test_raw_chunk_arrivals_match_the_plan(simulator, tmp_path) -> None:
    doc = _run(simulator, tmp_path, 1, 2)
    reqs = list(_raw_requests(doc, tmp_path).values())
    assert len(reqs) == 2
    for rec in reqs:
        deltas = rec["chunk_deltas_ns"]
        assert len(deltas) == N_REASON + N_CONTENT
        assert rec["chunk_channels"] == "r" * N_REASON + "c" * N_CONTENT
        gaps_ms = sorted(d / 1e6 for d in deltas[1:])
        assert abs(gaps_ms[len(gaps_ms) // 2] - STEP_MS) <= 0.5  # per-chunk ITL p50

