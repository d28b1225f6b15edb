"""A benchmark that holds every block anvil writes, built by `anvil postprocess`'s own path
from a raw file: for the tests that hold the JSON Schema and the field tables to what the
writers write.

What it holds: an open-loop (gamma) run with rate steps, a measured window with requests
outside it, goodput criteria, a failure and a cancelled request, a shared prefix, a prompt
calibration, the generator's health in `run_end` and a `server_metrics.jsonl` of vLLM
samples (counters for speculative decoding and the prefix cache) and an `energy.jsonl` of
two GPUs with an idle baseline and a `probe.jsonl` beside it; and its requests are also
three agent jobs' (the `jobs` block) on 8 GPUs, sent round-robin to two replicas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from energybuild import S, series, write_energy
from rawbuild import HEADER, completed, failed

from anvil_metrics.jsonio import dump_line
from anvil_metrics.load.arrivals import ArrivalPlan
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.records import Failure

MS = 1_000_000
ANCHOR = HEADER["perf_anchor_ns"]
GAP = 10 * MS  # one request every 10 ms from the anchor
LAB = '{engine="0",model_name="m"}'


def _series(k: int) -> dict[str, float]:
    """vLLM's series after `k` finished requests (every figure grows with k)."""
    s = {f"vllm:num_requests_running{LAB}": float(k % 3),
         f"vllm:num_requests_waiting{LAB}": 0.0, f"vllm:kv_cache_usage_perc{LAB}": 0.1 * k,
         f"vllm:spec_decode_num_drafts_total{LAB}": 10.0 * k,
         f"vllm:spec_decode_num_draft_tokens_total{LAB}": 30.0 * k,
         f"vllm:spec_decode_num_accepted_tokens_total{LAB}": 20.0 * k,
         f"vllm:prefix_cache_hits_total{LAB}": 5.0 * k,
         f"vllm:prefix_cache_queries_total{LAB}": 50.0 * k}
    for name, per in (("time_to_first_token_seconds", 0.001), ("e2e_request_latency_seconds",
                      0.004), ("request_queue_time_seconds", 0.0001),
                      ("request_prompt_tokens", 130), ("request_generation_tokens", 6)):
        s[f"vllm:{name}_sum{LAB}"] = per * k
        s[f"vllm:{name}_count{LAB}"] = float(k)
    return s


def _samples(path: Path) -> None:
    lines = [{"type": "sample", "seq": i, "t_ns": i, "done_ns": i, "mark": mark, "ok": True,
              "series": _series(k)} for i, (k, mark) in enumerate(
                  ((0, "first"), (4, None), (9, "last")))]
    path.write_bytes(b"".join(dump_line(x) for x in lines))


def _records() -> list[Any]:
    """Request 0 a warm-up; 1 before the window, 10 after it; 6 fails, 8 is cancelled."""
    recs: list[Any] = [completed(0, start_ns=ANCHOR, warmup=True)]
    for i in range(1, 11):
        start = ANCHOR + i * GAP
        extra: dict[str, Any] = {"start_delay_ns": 100_000 * i, "waited_for_user": i == 4}
        # conversations of two turns: requests 1 and 2 are conversation 1, 3 and 4 are 3, …
        extra.update(conversation=i - 1 + i % 2, turn=2 - i % 2, turns=2,
                     history_tokens=None if i % 2 else 130,
                     class_index=i % 2, model_index=i % 3,  # a mix's: 2 classes, 3 models
                     job=i % 3, session=i % 2, parent_session=None if i % 2 == 0 else 0,
                     depth=i % 2, tool_wait_ns=MS * (i % 2), join_wait_ns=0,  # 3 agent jobs
                     replica=i % 2)  # two replicas, round-robin
        if i == 6:
            recs.append(failed(i, start_ns=start, extra=extra))
        elif i == 9:  # closed on purpose at its first output (--cancel-after decode)
            recs.append(failed(i, start_ns=start, end_ns=start + 2 * MS, extra=extra,
                               http_status=200, failure=Failure(
                                   kind="aborted", message="cancelled on purpose",
                                   phase="decode")))
        elif i == 8:
            recs.append(failed(i, start_ns=start, end_ns=start + 3 * MS, extra=extra,
                               http_status=200, failure=Failure(
                                   kind="cancelled", message="the run stopped",
                                   phase="decode")))
        else:
            recs.append(completed(i, start_ns=start,
                                  extra={**extra, "first_chunk_ns": start + 500_000}))
    return recs


def full_benchmark(folder: Path) -> dict[str, Any]:
    """The document `anvil postprocess` builds from the raw run written into `folder`."""
    plan = ArrivalPlan(100.0, "gamma", burstiness=2.0)
    params = {
        "concurrency": 2, "context_tokens": 4096, "max_context_tokens": 4096,
        "context_distribution": {"128": 11}, "context_seed": 0, "max_tokens": 8,
        "model": "m", "engine": "vllm", "base_url": "http://127.0.0.1:1/v1",
        "measurement_protocol": "full", "run_nonce": "n0",
        "serve_flags": {"no_thinking": False, "reasoning_effort": None,
                        "shared_prefix_burst": True, "thinking_mode": "default"},
        "shared_prefix": {"prefix_tokens": 64, "group_size": 2},
        "prompt_calibration": {"method": "tokenize"},
        "goodput": ["ttft_ms<=3", "e2e_ms<=10"],
        "load": {"mode": "duration", "arrivals": plan.to_dict(), "duration_s": 0.2},
        "dataset": {"file": "d.jsonl", "format": None, "entries": 3},
        "request_headers": {"X-Tenant": "a", "X-Api-Key": "[redacted]"},
        "trace": {"file": "t.jsonl", "format": "mooncake", "speed": 2.0, "limit": None,
                  "block_tokens": 512, "model": None, "requests": 10, "expected_reuse": 0.5},
        "cancel": {"rate": 0.1, "after": "decode", "seed": 0},
        "gpus": 8,
        "agent": {"file": "a.jsonl", "format": "agent-jsonl", "job_ids": ["a"], "jobs": 3,
                  "job_requests": [3], "job_tokens": [[384, 128]], "start_at": "first",
                  "start_seed": 0},
        "endpoint": "chat",
        "replicas": ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"],
        "prompt_ids": True,
        "mix": {"request_class": [{"name": "a", "weight": 1.0},
                                  {"name": "b", "weight": 3.0, "model": "c"}],
                "models": {"names": ["m", "lora"], "assignment": "round-robin"}, "seed": 0},
        "conversation": {"turns": 2, "turn_tokens": 64, "system_prompt_tokens": 0,
                         "prefix_tokens": 0, "think_time": 0, "history": "server",
                         "session_header": "X-Session-ID", "seed": 0},
        "server": {"metrics_url": "http://127.0.0.1:1/metrics", "version": "0.11.0",
                   "max_model_len": 4096}}
    lines: list[dict[str, Any]] = [{**HEADER, "params": params, "type": "run"},
                                   {"type": "window", "from_ns": ANCHOR + 2 * GAP,
                                    "to_ns": ANCHOR + 10 * GAP},
                                   {"type": "hook", "name": "reset_prefix_cache",
                                    "target": "http://127.0.0.1:1/reset_prefix_cache",
                                    "status": 200, "answer": "", "t_ns": ANCHOR - GAP,
                                    "ok": True, "optional": False, "step": None},
                                   {"type": "step", "step": 0, "t_ns": ANCHOR, "users": None,
                                    "rate": 50.0}]
    for rec in _records():
        if rec.request_index == 5 and not rec.warmup:
            lines.append({"type": "step", "step": 1, "t_ns": ANCHOR + 5 * GAP,
                          "users": None, "rate": 100.0})
        lines.append(rec.to_json_dict())
    lag = {"p50": 0.1, "p99": 0.4, "max": 6.0, "samples": 500, "over_5ms": 1,
           "max_at_s": 0.05, "stalls": [[0.05, 6.0]]}
    lines += [{"type": "step_end", "t_ns": ANCHOR + 11 * GAP},
              {"type": "run_end", "finished_at": "2026-08-01T16:00:45Z",
               "client": {"loop_lag_ms": lag, "cpu_pct": 20.0, "achieved_concurrency": None,
                          "saturated": False, "verdict": "ok", "load_s": 0.2,
                          "cpu_s": 0.04}}]
    raw = folder / "requests.jsonl"
    raw.write_bytes(b"".join(dump_line(x) for x in lines))
    _samples(folder / "server_metrics.jsonl")
    write_energy(folder, series(2, range(0, 3 * S + 1, S // 2), {
        0: "idle_start", S // 2: "idle_end", S: "first", 3 * S: "last"},
        lambda t: 100.0 + t, lambda t: 100.0 * t + t * t / 2))
    (folder / "probe.jsonl").write_bytes(b"".join(dump_line(x) for x in (  # live/probe.py
        {"type": "plan", "rate_rps": 1.0, "idle": 1, "seed": 0},
        *({"type": "probe", "probe": k, "phase": phase, "step": step, "due_ns": ANCHOR,
           "start_ns": ANCHOR, "first_output_ns": ANCHOR + (k + 2) * MS,
           "end_ns": ANCHOR + 9 * MS, "failure": None}
          for k, (phase, step) in enumerate((("idle", None), ("load", 0), ("load", 1)))))))
    run = read_raw(raw)
    return build_benchmark(run, (run.run_end or {}).get("client"))
