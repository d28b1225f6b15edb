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
from anvil_metrics.load.optionvalues import whole, window
from anvil_metrics.load.trace import FORMATS, MOONCAKE_BLOCK_TOKENS, read_trace, trace_stats


def add_trace(sub: Commands) -> None:
    """`anvil trace stats FILE [--trace-format F] [--trace-block N] [--trace-model M]
    [--trace-window START:END] [--trace-limit N] [--json]`."""
    t = sub.add_parser("trace", help="a recorded trace: 'anvil trace stats FILE'")
    verbs = t.add_subparsers(dest="trace_command", required=True, parser_class=type(t))
    s = verbs.add_parser("stats", help="requests, span, rates, sizes and expected prefix "
                         "reuse of a trace file")
    s.add_argument("file", help="a Mooncake JSONL, BurstGPT CSV or anvil JSONL trace")
    s.add_argument("--trace-format", choices=FORMATS, default=None,
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
                   help="only the first N requests (of the window, if one is given)")
    s.add_argument("--json", action="store_true", help="print the figures as JSON")


def cmd_trace(a: argparse.Namespace) -> int:
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
