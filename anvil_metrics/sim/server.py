"""`anvil sim`: an OpenAI-compatible server on 127.0.0.1 whose timing is exact.

anvil measures time to first token, inter-token latency and end-to-end latency. To trust those
figures we need a server whose true timing is known in advance: this one writes token i at
exactly ``t0 + prefill + i * interval`` (t0 = request body received), so any difference a client
reports is the client's own error. It also reproduces the stream shapes of real servers (reasoning
field name, where usage goes, whether ``[DONE]`` is sent) and their token-counting endpoints
(``--tokenize-api``, see `tokenapi.py`) so one client can be tested against all of them. See
``/work/shared/design/SERVERS.md`` for the servers it imitates.

With ``--max-running N`` (`admission.py`) at most N streams run at once, like a real server's
batch; a request beyond them waits in a FIFO queue and its whole plan starts when it is
admitted: t0 stays its arrival, and the queue wait lies between t0 and the prefill start.

It also says what a real server says about itself: ``GET /metrics`` in vLLM's or SGLang's
naming (``--metrics-format``, `metrics.py`, counted as `ledger.py` defines, with
speculative-decoding counters under ``--spec-k``/``--spec-accept``, `specdecode.py`), that
engine's identity endpoints (`identity.py`), and the exact values behind the scrape in
``GET /sim/stats`` (``"metrics"``).

Runs as its own process: ``python -m anvil_metrics.sim --port 0`` prints exactly one line,
``anvil sim listening on http://HOST:PORT``, then serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import fields

import orjson

from anvil_metrics.sim import script, tokenapi
from anvil_metrics.sim.admission import Admission
from anvil_metrics.sim.burst import BurstChatStream
from anvil_metrics.sim.chat import (
    ChatStream,
    RequestError,
    answer_chat,
    count_prompt,
    load_json_object,
)
from anvil_metrics.sim.config import (
    METRICS_FORMATS,
    REASONING_FIELDS,
    ROLE_CHUNK_MODES,
    TIMER_KINDS,
    TOKENIZE_APIS,
    SimConfig,
)
from anvil_metrics.sim.faultchat import answer_with_fault
from anvil_metrics.sim.faults import FaultPicker, FaultRule, parse_rule
from anvil_metrics.sim.httpproto import HttpConnection, HttpRequest, Intake, error_body
from anvil_metrics.sim.identity import identity_routes
from anvil_metrics.sim.ledger import LEDGER, STREAM_COUNTS, Snapshot
from anvil_metrics.sim.metrics import CONTENT_TYPE, render
from anvil_metrics.sim.prefixcache import PrefixCache
from anvil_metrics.sim.responses import answer_responses
from anvil_metrics.sim.scheduler import Scheduler, make_scheduler
from anvil_metrics.sim.specdecode import MAX_SPEC_K
from anvil_metrics.sim.tokenizer import RULES

LISTEN_BACKLOG = 4096


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


def build_parser() -> argparse.ArgumentParser:
    """The `anvil sim` options; every one has a default."""
    p = argparse.ArgumentParser(
        prog="anvil sim",
        description="OpenAI-compatible streaming simulator with exact, configurable timing.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = p.add_argument
    add("--host", default="127.0.0.1", help="address to bind")
    add("--port", type=_int_at_least(0), default=0, help="port to bind; 0 picks a free one")
    add("--model", default="sim-model", help="model id served and checked")
    add(
        "--alias",
        dest="aliases",
        metavar="NAME",
        action="append",
        help="another name the model answers to, repeatable: listed by /v1/models and accepted "
        "as a chat request's model (as a router's serving aliases are)",
    )
    add("--prefill-ms", type=_non_negative_float, default=300.0, help="fixed prefill time")
    add(
        "--prefill-ms-per-token",
        type=_non_negative_float,
        default=0.0,
        help="extra prefill time per prompt token",
    )
    add("--reasoning-tokens", type=_int_at_least(0), default=20, help="reasoning tokens per answer")
    add("--content-tokens", type=_int_at_least(0), default=50, help="content tokens per answer")
    add(
        "--interval-ms",
        type=_non_negative_float,
        default=8.0,
        help="time between successive generated tokens",
    )
    add(
        "--reasoning-field",
        choices=REASONING_FIELDS,
        default="reasoning_content",
        help="delta field of reasoning text (vLLM now sends reasoning)",
    )
    add(
        "--role-chunk",
        choices=ROLE_CHUNK_MODES,
        default="immediate",
        help="send the role-only chunk at once (default) or together with the first token "
             "(as vLLM sends it: its server-side TTFT is that moment)",
    )
    add("--max-context", type=_int_at_least(1), default=32768, help="context window, tokens")
    add("--tokenizer", choices=RULES, default="words4", help="prompt token counting rule")
    add(
        "--usage-in-finish-chunk",
        action="store_true",
        help="always put usage inside the finish chunk (transformers serve)",
    )
    add("--no-done", action="store_true", help="end streams without data: [DONE]")
    add(
        "--tokenize-api",
        choices=TOKENIZE_APIS,
        default="vllm",
        help="token counting endpoints to imitate: vLLM's /tokenize with messages, llama.cpp's "
        "/apply-template + /tokenize, SGLang's /v1/tokenize of plain text, or none",
    )
    add(
        "--no-tokenize",
        dest="tokenize_api",
        action="store_const",
        const="none",
        help="same as --tokenize-api none",
    )
    add(
        "--stamp-send",
        action="store_true",
        help='add "anvil_sent_ns": perf_counter_ns() to every chunk as it is written, '
        "and an anvil-t0-ns response header (the request's t0, same clock)",
    )
    add(
        "--timer",
        choices=TIMER_KINDS,
        default="auto",
        help="deadline timer: Linux timerfd (precise) or asyncio call_at (~1 ms late)",
    )
    add(
        "--prefix-cache",
        action="store_true",
        help="reuse the leading blocks of earlier prompts (vLLM/SGLang prefix caching): prefill "
        "only the uncached tokens and report usage.prompt_tokens_details.cached_tokens",
    )
    add(
        "--prefix-cache-block",
        type=_int_at_least(1),
        default=16,
        help="tokens per prefix-cache block (with --prefix-cache)",
    )
    add(
        "--prefix-cache-tokens",
        type=_int_at_least(1),
        default=4_000_000,
        help="prefix-cache capacity in tokens, least recently used blocks evicted beyond it "
        "(with --prefix-cache)",
    )
    add(
        "--fault",
        dest="faults",
        metavar="SPEC",
        action="append",
        type=_fault_rule,
        help="inject a fault into chat completion requests, repeatable: KIND[=ARG]@I,J,... "
        "hits those 0-based request indices, KIND[=ARG]@MODEL:I,J,... those among the requests "
        "naming that model, KIND[=ARG]%%P each request with probability P; "
        "the first matching --fault wins. KIND: http400, http500, http503, http429=SECONDS, "
        "reset_before_headers, reset_mid_stream=K, malformed_chunk=K, stream_error=K, "
        "stall_first_byte=SECONDS, stall_mid_stream=SECONDS, no_done, end_before_finish=K, "
        "no_usage, oversize_chunk, slow_headers=SECONDS (see anvil_metrics/sim/faultchat.py)",
    )
    add("--fault-seed", type=_int_at_least(0), default=0, help="seed of the --fault %%P draws")
    add(
        "--burst",
        type=_int_at_least(1),
        default=1,
        help="write N token chunks (each still its own SSE event and HTTP chunk) in one socket "
        "write every N x interval, at the deadline of the burst's last token, pre-serialised: "
        "a cheap sender for measuring a client's capacity; 1 writes each token at its own "
        "deadline (not combinable with --fault)",
    )
    add(
        "--max-running",
        type=_int_at_least(1),
        metavar="N",
        help="run at most N streaming chat requests at once (in prefill or generating), like "
        "vLLM's --max-num-seqs; later ones wait in a FIFO queue and their whole plan starts "
        "when a running one ends, so the wait adds to their time to first token (anvil-t0-ns "
        "stays the arrival); non-streaming requests never wait; unset: no limit",
    )
    add(
        "--metrics-format",
        choices=METRICS_FORMATS,
        default="vllm",
        help="GET /metrics in this engine's Prometheus names, and its identity endpoints: "
        "vLLM's /version, or SGLang's /get_server_info and /get_model_info",
    )
    add(
        "--spec-k",
        type=_in_range(int, 0, MAX_SPEC_K, "an integer"),
        default=0,
        metavar="K",
        help="speculative decoding: K draft tokens per step, counted in /metrics (the stream's "
        "timing does not change); 0: off",
    )
    add(
        "--spec-accept",
        type=_in_range(float, 0.0, 1.0, "a number"),
        default=0.7,
        metavar="A",
        help="with --spec-k: the share of draft tokens accepted, 0 to 1 (deterministic, "
        "see anvil_metrics/sim/specdecode.py)",
    )
    add(
        "--kv-capacity-tokens",
        type=_int_at_least(1),
        metavar="N",
        help="KV-cache size in tokens behind the usage gauge (running streams' prompt and "
        "generated tokens / N); unset: 16 x --max-context",
    )
    add(
        "--script",
        action="store_true",
        help="answer anvil check's questions right, from the suites' own answer keys "
        "(sim/script.py); other requests are answered as without it",
    )
    add(
        "--script-fault",
        dest="script_faults",
        metavar="SUITE:KIND",
        action="append",
        help="with --script, answer SUITE's questions wrong in the way KIND, repeatable "
        "(e.g. tools:wrong_name; an unknown one is refused with the list)",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and cross-check the options; a bad value exits 2 with argparse's one-line error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.prefix_cache_tokens < args.prefix_cache_block:
        parser.error(
            f"argument --prefix-cache-tokens: must be >= --prefix-cache-block "
            f"({args.prefix_cache_block}), got {args.prefix_cache_tokens}"
        )
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
    return args


def config_from_args(args: argparse.Namespace) -> SimConfig:
    return SimConfig(**{field.name: getattr(args, field.name) for field in fields(SimConfig)})


class App:
    """Routes one request to its endpoint; everything answers JSON except chat streams."""

    def __init__(self, cfg: SimConfig, sched: Scheduler, intake: Intake) -> None:
        self.cfg = cfg
        self.sched = sched
        self.intake = intake
        self.connections: set[HttpConnection] = set()
        self._created = int(time.time())
        self.tokenize_api = tokenapi.APIS[cfg.tokenize_api]
        self.prefix_cache = (
            PrefixCache(cfg.prefix_cache_block, cfg.prefix_cache_tokens)
            if cfg.prefix_cache
            else None
        )
        self.faults = FaultPicker(cfg.faults, cfg.fault_seed) if cfg.faults else None
        # --burst 1 keeps the token-by-token ChatStream, exactly as without the option
        self.make_stream = BurstChatStream if cfg.burst > 1 else ChatStream
        self.admission = (
            Admission(cfg.max_running, sched.now_ns) if cfg.max_running is not None else None
        )
        self._admit = self.admission.enter if self.admission is not None else None
        LEDGER.set_max_context(cfg.max_context)
        self.identity = identity_routes(cfg, lambda: self.snapshot().spec)
        self._script_faults = frozenset(cfg.script_faults)

    def connection(self) -> HttpConnection:
        conn = HttpConnection(self.handle, self.intake, self.connections.discard)
        self.connections.add(conn)
        return conn

    def handle(self, request: HttpRequest, conn: HttpConnection, t0_ns: int) -> None:
        route = (request.method, request.path)
        if route == ("POST", "/v1/chat/completions") and self.cfg.script and self._scripted(
                request, conn):
            return
        if route == ("POST", "/v1/chat/completions"):
            fault = None
            if self.faults is not None:
                model = _model_of(request.body) if self.faults.needs_model else None
                fault = self.faults.pick(model)
            if fault is None:
                answer_chat(conn, self.sched, self.cfg, request.body, t0_ns, self.prefix_cache,
                            self.make_stream, admit=self._admit)
            else:
                answer_with_fault(conn, self.sched, self.cfg, request.body, t0_ns,
                                  self.prefix_cache, fault, self._admit)  # fmt: skip
        elif route == ("POST", "/v1/responses"):  # streamed only; scripted with --script
            answer_responses(conn, self.cfg, request.body,
                             self._script_faults if self.cfg.script else None)
        elif route == ("PUT", "/sim/script-faults") and self.cfg.script:
            self._set_script_faults(request, conn)
        elif route == ("GET", "/health"):
            conn.respond(200, b"{}")
        elif route == ("GET", "/sim/stats"):
            stats: dict[str, object] = {"streams": dict(STREAM_COUNTS)}
            if self.admission is not None:
                stats["admission"] = self.admission.stats()
            stats["metrics"] = self.snapshot().truth()
            conn.respond_json(200, stats)
        elif route == ("GET", "/metrics"):
            text = render(self.snapshot(), self.cfg.metrics_format, self.cfg.model)
            conn.respond(200, text, content_type=CONTENT_TYPE)
        elif request.method == "GET" and request.path in self.identity:
            conn.respond_json(200, self.identity[request.path]())
        elif route == ("GET", "/v1/models"):
            conn.respond_json(200, self.models())
        elif request.path in self.tokenize_api.routes and request.method == "POST":
            status, body = tokenapi.answer(self.tokenize_api, request.path, request.body, self.cfg)
            conn.respond(status, body)
        elif request.path in ("/v1/chat/completions", "/health", "/v1/models", "/metrics") or (
            request.path in self.tokenize_api.routes or request.path in self.identity
        ):
            conn.respond_json(405, error_body(f"method {request.method} not allowed", 405))
        else:
            message = f"Not Found: {request.method} {request.path}"
            conn.respond_json(404, error_body(message, 404, "not_found_error"))

    def _scripted(self, request: HttpRequest, conn: HttpConnection) -> bool:
        """Answer from the script (`script.py`) when it knows the question; False if not."""
        try:
            data = load_json_object(request.body)
        except RequestError:
            return False
        reply = script.answer(data, self._script_faults)
        if reply is None:
            return False
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            try:
                prompt_tokens = count_prompt(data, self.cfg)
            except RequestError as exc:
                conn.respond_json(exc.status, exc.body)
                return True
        script.respond(conn, data, reply, self.cfg.model, self.cfg.reasoning_field,
                       prompt_tokens)
        return True

    def _set_script_faults(self, request: HttpRequest, conn: HttpConnection) -> None:
        """``PUT /sim/script-faults`` with a JSON list of "suite:kind": the faults from now on
        (tests switch faults without restarting the simulator); answers the list in force."""
        try:
            names = orjson.loads(request.body)
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValueError("the body must be a JSON list of \"suite:kind\" strings")
            self._script_faults = frozenset(script.check_faults(names))
        except (orjson.JSONDecodeError, ValueError) as e:
            conn.respond_json(400, error_body(str(e), 400))
            return
        conn.respond_json(200, sorted(self._script_faults))

    def snapshot(self) -> Snapshot:
        """The server's own figures now (`ledger.py`), the queue's from the admission."""
        adm = self.admission
        return LEDGER.snapshot(
            waiting=adm.waiting if adm is not None else 0,
            waiting_max=adm.waiting_max if adm is not None else 0,
            kv_capacity_tokens=self.cfg.kv_capacity,
            spec_k=self.cfg.spec_k,
        )

    def models(self) -> dict[str, object]:
        cards = [
            {
                "id": name,
                "object": "model",
                "created": self._created,
                "owned_by": "anvil-sim",
                "root": self.cfg.model,
                "parent": None,
                "max_model_len": self.cfg.max_context,
            }
            for name in (self.cfg.model, *self.cfg.aliases)
        ]
        return {"object": "list", "data": cards}


def _model_of(body: bytes) -> str | None:
    """The "model" a chat request names, None when its body does not say (or is not JSON)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


def _listening_url(server: asyncio.AbstractServer) -> str:
    sockets = getattr(server, "sockets", None) or ()
    host, port = sockets[0].getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


async def serve(cfg: SimConfig) -> None:
    """Bind, announce the URL on stdout, serve until SIGTERM/SIGINT, then drop connections."""
    loop = asyncio.get_running_loop()
    intake = Intake(loop)
    sched = make_scheduler(loop, cfg.timer, intake.waiting)
    app = App(cfg, sched, intake)
    server = await loop.create_server(
        app.connection, cfg.host, cfg.port, backlog=LISTEN_BACKLOG, reuse_address=True
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Everything allocated so far lives for the whole process: move it out of the
    # collector's reach, so a full collection never stalls every stream's chunks for ms.
    gc.collect()
    gc.freeze()
    print(f"anvil sim listening on {_listening_url(server)}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        for conn in list(app.connections):
            conn.abort()
        sched.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``anvil sim`` and ``python -m anvil_metrics.sim``; returns an exit code."""
    cfg = config_from_args(parse_args(argv))
    try:
        asyncio.run(serve(cfg))
    except OSError as exc:
        print(f"anvil sim: cannot serve on {cfg.host}:{cfg.port}: {exc}", file=sys.stderr)
        return 1
    return 0
