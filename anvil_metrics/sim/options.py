"""`anvil sim`'s command line: its options as one table, parsed and cross-checked into a
`SimConfig`.

Why apart from `server.py`: the server routes requests and knows nothing of argparse; the
options are a table (flag, type, default, help) read top to bottom, and one loop turns it into
the parser, so adding a flag is one row and `anvil sim --help` lists the rows in their order.
Every value is checked here: a bad one exits 2 with argparse's one line naming the flag.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from anvil_metrics.sim import script
from anvil_metrics.sim.config import (
    METRICS_FORMATS,
    PD_ROLES,
    REASONING_FIELDS,
    ROLE_CHUNK_MODES,
    TIMER_KINDS,
    TOKENIZE_APIS,
    SimConfig,
)
from anvil_metrics.sim.energy import PowerModel, parse_power_model
from anvil_metrics.sim.faults import FaultRule, parse_rule
from anvil_metrics.sim.specdecode import MAX_SPEC_K
from anvil_metrics.sim.tokenizer import RULES


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _in_range(convert: Callable[[str], float], low: float, high: float, kind: str
              ) -> Callable[[str], float]:
    """An argparse type: `convert(text)` within [low, high] (NaN never is)."""

    def parse(text: str) -> float:
        try:
            value: float | None = convert(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be {kind} from {low:g} to {high:g}, got {text!r}")
        return value

    return parse


def _fault_rule(text: str) -> FaultRule:
    try:
        return parse_rule(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _power_model(text: str) -> PowerModel:
    try:
        return parse_power_model(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class SimOption:
    """One flag of `anvil sim`: `add_argument`'s arguments, those left None not passed (a
    switch's `store_true` takes no type, and an unset default stays argparse's own)."""

    flag: str
    help: str
    type: Callable[[str], Any] | None = None
    default: object = None
    choices: tuple[str, ...] | None = None
    action: str | None = None
    dest: str | None = None
    metavar: str | None = None
    const: str | None = None

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        named = ("type", "default", "choices", "action", "dest", "metavar", "const")
        extra = {k: v for k in named if (v := getattr(self, k)) is not None}
        parser.add_argument(self.flag, help=self.help, **extra)


_FAULT_HELP = (
    "inject a fault into chat completion requests, repeatable: KIND[=ARG]@I,J,... "
    "hits those 0-based request indices, KIND[=ARG]@MODEL:I,J,... those among the requests "
    "naming that model, KIND[=ARG]%%P each request with probability P; "
    "the first matching --fault wins. KIND: http400, http500, http503, http429=SECONDS, "
    "reset_before_headers, reset_mid_stream=K, malformed_chunk=K, stream_error=K, "
    "stall_first_byte=SECONDS, stall_mid_stream=SECONDS, no_done, end_before_finish=K, "
    "no_usage, oversize_chunk, slow_headers=SECONDS; a hostile server's: "
    "headers_then_silence, endless_stream, html_200, huge_header=BYTES, huge_line=BYTES, "
    "invalid_utf8=K, nan_usage, negative_usage, comment_flood=LINES "
    "(see anvil_metrics/sim/faultchat.py)")

# In `anvil sim --help`'s order.
OPTIONS: tuple[SimOption, ...] = (
    SimOption("--host", "address to bind", default="127.0.0.1"),
    SimOption("--port", "port to bind; 0 picks a free one", _int_at_least(0), 0),
    SimOption("--model", "model id served and checked", default="sim-model"),
    SimOption("--alias", "another name the model answers to, repeatable: listed by /v1/models "
              "and accepted as a chat request's model (as a router's serving aliases are)",
              action="append", dest="aliases", metavar="NAME"),
    SimOption("--prefill-ms", "fixed prefill time", _non_negative_float, 300.0),
    SimOption("--prefill-ms-per-token", "extra prefill time per prompt token",
              _non_negative_float, 0.0),
    SimOption("--prefill-drift-ms-per-s", "prefill grows by this many ms for every second "
              "the server has been up (a server that slows as it runs; the steady-state "
              "verdict's drifting case); 0: none", _non_negative_float, 0.0),
    SimOption("--reasoning-tokens", "reasoning tokens per answer", _int_at_least(0), 20),
    SimOption("--content-tokens", "content tokens per answer", _int_at_least(0), 50),
    SimOption("--interval-ms", "time between successive generated tokens",
              _non_negative_float, 8.0),
    SimOption("--reasoning-field", "delta field of reasoning text (vLLM now sends reasoning)",
              default="reasoning_content", choices=REASONING_FIELDS),
    SimOption("--role-chunk", "send the role-only chunk at once (default) or together with "
              "the first token (as vLLM sends it: its server-side TTFT is that moment)",
              default="immediate", choices=ROLE_CHUNK_MODES),
    SimOption("--max-context", "context window, tokens", _int_at_least(1), 32768),
    SimOption("--tokenizer", "prompt token counting rule", default="words4", choices=RULES),
    SimOption("--usage-in-finish-chunk",
              "always put usage inside the finish chunk (transformers serve)",
              action="store_true"),
    SimOption("--no-done", "end streams without data: [DONE]", action="store_true"),
    SimOption("--tokenize-api", "token counting endpoints to imitate: vLLM's /tokenize with "
              "messages, llama.cpp's /apply-template + /tokenize, SGLang's /v1/tokenize of "
              "plain text, or none", default="vllm", choices=TOKENIZE_APIS),
    SimOption("--no-tokenize", "same as --tokenize-api none", action="store_const",
              dest="tokenize_api", const="none"),
    SimOption("--stamp-send", 'add "anvil_sent_ns": perf_counter_ns() to every chunk as it '
              "is written, and anvil-t0-ns and anvil-start-ns response headers (the request's t0 "
              "and the start of its plan, later when it waited for a slot; same clock)",
              action="store_true"),
    SimOption("--timer", "deadline timer: Linux timerfd (precise) or asyncio call_at (~1 ms "
              "late)", default="auto", choices=TIMER_KINDS),
    SimOption("--prefix-cache", "reuse the leading blocks of earlier prompts (vLLM/SGLang "
              "prefix caching): prefill only the uncached tokens and report "
              "usage.prompt_tokens_details.cached_tokens", action="store_true"),
    SimOption("--media", "a multimodal model: image_url and input_audio parts are counted "
              "(ceil(w/28)*ceil(h/28)+2 tokens an image, one per 40 ms of audio: sim/media.py), "
              "in usage.prompt_tokens and prompt_tokens_details, not refused",
              action="store_true"),
    SimOption("--prefix-cache-block", "tokens per prefix-cache block (with --prefix-cache)",
              _int_at_least(1), 16),
    SimOption("--prefix-cache-tokens", "prefix-cache capacity in tokens, least recently used "
              "blocks evicted beyond it (with --prefix-cache)", _int_at_least(1), 4_000_000),
    SimOption("--fault", _FAULT_HELP, _fault_rule, action="append", dest="faults",
              metavar="SPEC"),
    SimOption("--fault-seed", "seed of the --fault %%P draws", _int_at_least(0), 0),
    SimOption("--burst", "write N token chunks (each still its own SSE event and HTTP chunk) "
              "in one socket write every N x interval, at the deadline of the burst's last "
              "token, pre-serialised: a cheap sender for measuring a client's capacity; 1 "
              "writes each token at its own deadline (not combinable with --fault)",
              _int_at_least(1), 1),
    SimOption("--max-running", "run at most N streaming chat requests at once (in prefill or "
              "generating), like vLLM's --max-num-seqs; later ones wait in a FIFO queue and "
              "their whole plan starts when a running one ends, so the wait adds to their "
              "time to first token (anvil-t0-ns stays the arrival); non-streaming requests "
              "never wait; unset: no limit", _int_at_least(1), metavar="N"),
    SimOption("--metrics-format", "GET /metrics in this engine's Prometheus names, and its "
              "identity endpoints: vLLM's /version, or SGLang's /get_server_info and "
              "/get_model_info", default="vllm", choices=METRICS_FORMATS),
    SimOption("--spec-k", "speculative decoding: K draft tokens per step, counted in "
              "/metrics (the stream's timing does not change); 0: off",
              _in_range(int, 0, MAX_SPEC_K, "an integer"), 0, metavar="K"),
    SimOption("--spec-accept", "with --spec-k: the share of draft tokens accepted, 0 to 1 "
              "(deterministic, see anvil_metrics/sim/specdecode.py)",
              _in_range(float, 0.0, 1.0, "a number"), 0.7, metavar="A"),
    SimOption("--kv-capacity-tokens", "KV-cache size in tokens behind the usage gauge "
              "(running streams' prompt and generated tokens / N); unset: 16 x --max-context",
              _int_at_least(1), metavar="N"),
    SimOption("--pd-role", "serve as one side of a disaggregated prefill/decode pair: count "
              "one KV transfer per completed streaming chat request, of prompt tokens x "
              "--kv-bytes-per-token bytes taking bytes / 10 GB/s, in vLLM's NIXL series on "
              "/metrics (vllm:nixl_*) and in /sim/stats", choices=PD_ROLES),
    SimOption("--kv-bytes-per-token", "with --pd-role: KV bytes transferred per prompt token",
              _int_at_least(1), 65536, metavar="B"),
    SimOption("--script", "answer anvil check's questions right, from the suites' own answer "
              "keys (sim/script.py); other requests are answered as without it",
              action="store_true"),
    SimOption("--script-fault", "with --script, answer SUITE's questions wrong in the way "
              "KIND, repeatable (e.g. tools:wrong_name; an unknown one is refused with the "
              "list)", action="append", dest="script_faults", metavar="SUITE:KIND"),
    SimOption("--script-fault-above", "with --script-fault, answer wrong only while more than "
              "N streams are running (the running gauge), right otherwise: a server that "
              "fails under load; /sim/stats counts the right and wrong answers",
              _int_at_least(0), metavar="N"),
    SimOption("--log-requests", "append a JSON line per chat request received to FILE: its "
              "arrival, the --session-header value, and each message's role, length and "
              "CRC-32 (sim/requestlog.py), so a test can check what each turn carried",
              metavar="FILE"),
    SimOption("--session-header", "the header --log-requests records for each request",
              default="X-Session-ID", metavar="NAME"),
    SimOption("--gpus", "with --power-model: this many simulated GPUs, each with its DCGM "
              "series on /metrics", _int_at_least(1), 1, metavar="N"),
    SimOption("--power-model", "serve a DCGM exporter's DCGM_FI_DEV_POWER_USAGE (W) and "
              "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ) per GPU on /metrics, the energy "
              "exactly N x idle x uptime + per_token x the output tokens answered, split "
              "evenly; GET /anvil/energy tells it (sim/energy.py)", _power_model,
              metavar="idle=W,per_token=J"),
    SimOption("--log-answers", "with --log-requests, also a line when each chat answer "
              "ends: its first and last send stamps, prompt tokens and prefix-cache "
              "hits (sim/requestlog.py)", action="store_true"),
)


def build_parser() -> argparse.ArgumentParser:
    """The `anvil sim` options (`OPTIONS`); every one has a default."""
    parser = argparse.ArgumentParser(
        prog="anvil sim",
        description="OpenAI-compatible streaming simulator with exact, configurable timing.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for option in OPTIONS:
        option.add_to(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and cross-check the options; a bad value exits 2 with argparse's one-line error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.prefix_cache_tokens < args.prefix_cache_block:
        parser.error(
            f"argument --prefix-cache-tokens: must be >= --prefix-cache-block "
            f"({args.prefix_cache_block}), got {args.prefix_cache_tokens}"
        )
    if args.gpus != 1 and args.power_model is None:
        parser.error("argument --gpus: needs --power-model idle=W,per_token=J")
    if args.log_answers and not args.log_requests:
        parser.error("argument --log-answers: needs --log-requests FILE")
    args.faults = tuple(args.faults or ())
    args.aliases = tuple(dict.fromkeys(a for a in args.aliases or () if a != args.model))
    if args.burst > 1 and args.faults:
        parser.error("argument --burst: cannot be combined with --fault")
    try:
        args.script_faults = script.check_faults(args.script_faults or ())
    except ValueError as e:
        parser.error(f"argument --script-fault: {e}")
    if args.script_faults and not args.script:
        parser.error("argument --script-fault: needs --script")
    if args.script_fault_above is not None and not args.script_faults:
        parser.error("argument --script-fault-above: needs --script-fault SUITE:KIND")
    return args


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The config of these options; its drift (if any) counts from now."""
    values = {f.name: getattr(args, f.name) for f in fields(SimConfig) if f.name != "origin_ns"}
    return SimConfig(**values, origin_ns=time.monotonic_ns())
