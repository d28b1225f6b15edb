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
``GET /sim/stats`` (``"metrics"``). The engines' control endpoints (`POST /reset_prefix_cache`
and `/flush_cache` empty the prefix cache; `/start_profile`, `/stop_profile`) answer and are
stamped in ``/sim/stats``'s ``"control"``, so a run's hooks can be checked against them.

Runs as its own process: ``python -m anvil_metrics.sim --port 0`` prints exactly one line,
``anvil sim listening on http://HOST:PORT``, then serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import time
from typing import Any

import orjson

from anvil_metrics.sim import script, tokenapi
from anvil_metrics.sim.admission import Admission
from anvil_metrics.sim.burst import BurstChatStream
from anvil_metrics.sim.chat import ChatStream, answer_chat
from anvil_metrics.sim.chatrequest import RequestError, count_prompt, load_json_object
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.energy import SimGpus
from anvil_metrics.sim.faultchat import answer_with_fault
from anvil_metrics.sim.faults import FaultPicker
from anvil_metrics.sim.httpproto import HttpConnection, HttpRequest, Intake, error_body
from anvil_metrics.sim.identity import identity_routes
from anvil_metrics.sim.ledger import LEDGER, STREAM_COUNTS, Snapshot
from anvil_metrics.sim.metrics import CONTENT_TYPE, render
from anvil_metrics.sim.options import config_from_args, parse_args
from anvil_metrics.sim.prefixcache import PrefixCache
from anvil_metrics.sim.requestlog import RequestLog
from anvil_metrics.sim.scheduler import Scheduler, make_scheduler

LISTEN_BACKLOG = 4096


# the engines' control endpoints the simulator answers (vLLM's and SGLang's; `live/hooks.py`)
CONTROL_PATHS = ("/reset_prefix_cache", "/flush_cache", "/start_profile", "/stop_profile")


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
        # scripted answers given, right (as without faults) or wrong: `GET /sim/stats`
        # the scripted answers given, right and wrong, in all and by suite family ("json",
        # "tools", "retrieval": the script module that answered)
        self.script_answers: dict[str, Any] = {"right": 0, "wrong": 0, "by_family": {}}
        self.request_log = (RequestLog(cfg.log_requests, cfg.session_header)
                            if cfg.log_requests else None)
        LEDGER.on_answer = (self.request_log.answer
                            if self.request_log is not None and cfg.log_answers else None)
        self.responses: Any = None  # responsesload.ResponseStore, made on the first request
        self.gpus = (SimGpus(cfg.gpus, cfg.power_model, cfg.origin_ns)  # --power-model
                     if cfg.power_model is not None else None)
        # the control hooks' calls (`/reset_prefix_cache`, `/flush_cache`, `/start_profile`,
        # `/stop_profile`), each path's perf_counter_ns stamps: `GET /sim/stats`'s "control"
        self.control: dict[str, list[int]] = {p: [] for p in CONTROL_PATHS}

    def _other_endpoint(self, request: HttpRequest, conn: HttpConnection, t0_ns: int) -> None:
        """`/v1/responses` (`--endpoint responses`; the checks' questions with --script),
        `/v1/embeddings` and `/v1/messages`. Their modules are imported on the first such
        request: the checks' suite is 0.1 s of a start most tests never need."""
        if self.request_log is not None:
            self.request_log.write(request.headers, request.body, t0_ns, request.path)
        if request.path == "/v1/embeddings":
            from anvil_metrics.sim.embeddings import answer_embeddings

            answer_embeddings(conn, self.sched, self.cfg, request.body, t0_ns)
        elif request.path == "/v1/messages":  # `--endpoint messages`
            from anvil_metrics.sim.messages import answer_messages

            answer_messages(conn, self.sched, self.cfg, request.body, t0_ns,
                            self.prefix_cache, self._admit)
        elif self.cfg.script:
            from anvil_metrics.sim.responses import answer_responses

            answer_responses(conn, self.cfg, request.body, self._script_faults)
        else:
            from anvil_metrics.sim.responsesload import ResponseStore, answer_responses_load

            if self.responses is None:
                self.responses = ResponseStore()
            answer_responses_load(conn, self.sched, self.cfg, request.body, t0_ns,
                                  self.responses, self.prefix_cache, self._admit)

    def connection(self) -> HttpConnection:
        conn = HttpConnection(self.handle, self.intake, self.connections.discard)
        self.connections.add(conn)
        return conn

    def handle(self, request: HttpRequest, conn: HttpConnection, t0_ns: int) -> None:
        route = (request.method, request.path)
        if route == ("POST", "/v1/chat/completions") and self.request_log is not None:
            self.request_log.write(request.headers, request.body, t0_ns)
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
        elif route == ("POST", "/v1/completions"):  # `--endpoint completions`
            if self.request_log is not None:
                self.request_log.write(request.headers, request.body, t0_ns, request.path)
            from anvil_metrics.sim.completions import answer_completions

            answer_completions(conn, self.sched, self.cfg, request.body, t0_ns, self._admit)
        elif route in (("POST", "/v1/responses"), ("POST", "/v1/embeddings"),
                       ("POST", "/v1/messages")):
            self._other_endpoint(request, conn, t0_ns)
        elif route == ("PUT", "/sim/script-faults") and self.cfg.script:
            self._set_script_faults(request, conn)
        elif request.method == "POST" and request.path in CONTROL_PATHS:
            self._control(request.path, conn)
        elif route == ("GET", "/health"):
            conn.respond(200, b"{}")
        elif route == ("GET", "/sim/stats"):
            stats: dict[str, object] = {"streams": dict(STREAM_COUNTS)}
            if self.admission is not None:
                stats["admission"] = self.admission.stats()
            stats["metrics"] = self.snapshot().truth()
            stats["control"] = self.control
            if self.cfg.script:
                stats["script"] = self.script_answers
            conn.respond_json(200, stats)
        elif route == ("GET", "/metrics"):
            text = render(self.snapshot(), self.cfg.metrics_format, self.cfg.model)
            if self.gpus is not None:  # a DCGM exporter's series too (`energy.py`)
                text += self.gpus.exposition(LEDGER.generation_tokens).encode()
            conn.respond(200, text, content_type=CONTENT_TYPE)
        elif route == ("GET", "/anvil/energy") and self.gpus is not None:
            conn.respond_json(200, self.gpus.truth(LEDGER.generation_tokens))
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

    def _control(self, path: str, conn: HttpConnection) -> None:
        """A control hook's call, stamped (the run's clock: perf_counter_ns is the host's
        monotonic clock); a cache reset empties the prefix cache."""
        self.control[path].append(time.perf_counter_ns())
        if path in ("/reset_prefix_cache", "/flush_cache") and self.prefix_cache is not None:
            self.prefix_cache.clear()
        conn.respond_json(200, {"ok": True})

    def _scripted(self, request: HttpRequest, conn: HttpConnection) -> bool:
        """Answer from the script (`script.py`) when it knows the question; False if not."""
        try:
            data = load_json_object(request.body)
        except RequestError:
            return False
        faults = self._script_faults
        above = self.cfg.script_fault_above
        if above is not None and self.snapshot().running <= above:
            faults = frozenset()  # not under load enough: answered right
        found = script.family_answer(data, faults)
        if found is None:
            return False
        family, reply = found
        right = "right" if reply == (script.answer(data, frozenset()) if faults
                                     else reply) else "wrong"
        self.script_answers[right] += 1
        by = self.script_answers["by_family"].setdefault(family, {"right": 0, "wrong": 0})
        by[right] += 1
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
            pd_role=self.cfg.pd_role,
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
