"""`anvil trace stats FILE`: what a recorded trace will ask of a server, before a replay.

Why a command of its own: a Mooncake or BurstGPT trace can hold hours of traffic; its
request count, span, rates, size percentiles and the prefix reuse its `hash_ids` promise
(`load.trace`) decide whether it is worth GPU time and at which `--trace-speed`. Computing
is `load.trace`'s; this only reads the flags and prints (or writes `--json`).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

import orjson

from anvil_metrics.cli.parsing import Commands, argtype
from anvil_metrics.errors import UsageError
from anvil_metrics.load.agentread import is_agent_trace, read_jobs
from anvil_metrics.load.agentstats import AgentTraceStats, agent_stats
from anvil_metrics.load.optionvalues import whole, window
from anvil_metrics.load.trace import ALL_FORMATS, MOONCAKE_BLOCK_TOKENS, read_trace, trace_stats


def add_trace(sub: Commands) -> None:
    """`anvil trace stats FILE [--trace-format F] [--trace-block N] [--trace-model M]
    [--trace-window START:END] [--trace-limit N] [--json]`."""
    t = sub.add_parser("trace", help="a recorded trace: 'anvil trace stats FILE'")
    verbs = t.add_subparsers(dest="trace_command", required=True, parser_class=type(t))
    s = verbs.add_parser("stats", help="requests, span, rates, sizes and expected prefix "
                         "reuse of a trace file")
    s.add_argument("file", help="a Mooncake JSONL, BurstGPT CSV or anvil JSONL trace; or agent "
                   "jobs: AIPerf's Weka traces (JSONL, a .json file or a folder of them), "
                   "OTel span graphs, anvil's agent JSONL")
    s.add_argument("--trace-format", choices=ALL_FORMATS, default=None,
                   help="the file's format (default: told from its first line)")
    s.add_argument("--trace-block", type=argtype(whole(1), "--trace-block"),
                   default=MOONCAKE_BLOCK_TOKENS,
                   help=f"tokens per hash_ids block (default {MOONCAKE_BLOCK_TOKENS}, "
                        "Mooncake's)")
    s.add_argument("--trace-model", default=None, help="BurstGPT: only this model's rows")
    s.add_argument("--trace-window", type=argtype(window, "--trace-window"), default=None,
                   metavar="START:END", help="only the requests in this time window, seconds "
                   "after the trace's first request (END may be left out), as a replay's")
    s.add_argument("--trace-limit", type=argtype(whole(1), "--trace-limit"), default=None,
                   help="only the first N requests (of the window, if one is given); of "
                   "agent jobs, the first N jobs")
    s.add_argument("--json", action="store_true", help="print the figures as JSON")


def cmd_trace(a: argparse.Namespace) -> int:
    if is_agent_trace(a.file, a.trace_format):
        return _agent_jobs(a)
    reqs = read_trace(a.file, a.trace_format, block_tokens=a.trace_block,
                      model=a.trace_model, limit=a.trace_limit, window_s=a.trace_window)
    st = trace_stats(reqs, a.trace_block)
    if a.json:
        print(orjson.dumps({**asdict(st), "expected_hit_ratio": st.expected_hit_ratio},
                           option=orjson.OPT_INDENT_2).decode())
        return 0
    rate = "null" if st.mean_rate_rps is None else f"{st.mean_rate_rps:.2f}"
    print(f"trace {a.file}: {st.requests} requests over {st.duration_s:.1f} s; "
          f"mean {rate} req/s, peak {st.peak_rate_rps:g} in one second")
    for name, p in (("input tokens", st.input_tokens), ("output tokens", st.output_tokens)):
        print(f"{name:<14}" + "  ".join(f"{k} {v}" for k, v in p.items()))
    print(f"expected prefix reuse: {st.cached_tokens} of {st.total_input_tokens} input "
          f"tokens ({100 * st.expected_hit_ratio:.1f} %), replayed in order with a cache "
          "that keeps every block")
    if st.sessions is not None:
        print(f"sessions: {st.sessions}")
    return 0


def _agent_jobs(a: argparse.Namespace) -> int:
    """`anvil trace stats` of a file of agent jobs (`load.agentstats`)."""
    for flag, v in (("--trace-window", a.trace_window), ("--trace-model", a.trace_model)):
        if v is not None:
            raise UsageError(f"{flag}: not for a trace of agent jobs (a job is replayed "
                             "whole); use --trace-limit N for its first N jobs")
    jobs = read_jobs(a.file, a.trace_format)[:a.trace_limit]
    st = agent_stats(jobs)
    if a.json:
        print(orjson.dumps({**asdict(st), "expected_reuse": st.expected_reuse},
                           option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())
        return 0
    for line in agent_lines(a.file, st):
        print(line)
    return 0


def _spread(p: dict[str, float | None], fmt: str = "{:.1f}") -> str:
    return "  ".join(f"{k} {'null' if v is None else fmt.format(v)}" for k, v in p.items())


def agent_lines(name: str, st: AgentTraceStats) -> list[str]:
    """The lines `anvil trace stats` prints of agent jobs."""
    depth = ", ".join(f"{d}: {n}" for d, n in st.sessions_by_depth.items())
    unrec = (f" ({st.tool_waits_unrecorded} of unrecorded time)"
             if st.tool_waits_unrecorded else "")
    return [
        f"agent jobs {name}: {st.jobs} jobs, {st.sessions} sessions, {st.requests} requests",
        f"depth         max {st.depth_max}; sessions by depth {depth}",
        f"fan-out       {st.spawning_turns} spawning turns; children per turn "
        + _spread(st.fanout, "{:g}")
        + f"; {st.children_joined} joined, {st.children_background} background",
        f"tool time     {st.tool_waits} waits{unrec}, {st.tool_s_total:.1f} s in all; per "
        "job s " + _spread(st.tool_s_per_job),
        f"idle time     {st.idle_s_total:.1f} s in all; per job s "
        + _spread(st.idle_s_per_job),
        "input tokens  per job " + _spread(st.input_tokens_per_job, "{:.0f}"),
        "output tokens per job " + _spread(st.output_tokens_per_job, "{:.0f}"),
        f"expected prefix reuse: {st.cached_tokens} of {st.input_tokens} input tokens "
        f"({100 * st.expected_reuse:.1f} %); per job "
        + _spread({k: None if v is None else 100 * v for k, v in st.reuse_per_job.items()},
                  "{:.1f} %")
        + "; each job's requests in time order, a cache that keeps every block",
    ]
