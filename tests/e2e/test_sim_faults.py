"""The simulator's fault injection (`--fault`): the grammar, the selection, and the wire.

Parsing and selection are unit-tested; every fault kind is then checked against a real
simulator process with a raw socket, byte for byte: statuses and headers, RST versus clean
end, the exact SSE events, and (loosely) the stall durations.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from simfork import start_simulator

from anvil_metrics.sim.faultchat import OVERSIZE_BYTES
from anvil_metrics.sim.faults import Fault, FaultPicker, FaultRule, parse_rule
from anvil_metrics.sim.options import parse_args
from anvil_metrics.sim.rawclient import request_bytes

pytestmark = pytest.mark.e2e

# six tokens: r0 r1 c0 c1 c2 c3 (c3 carries finish_reason)
BASE = ("--prefill-ms", "0", "--interval-ms", "1", "--reasoning-tokens", "2",
        "--content-tokens", "4")  # fmt: skip
USER = [{"role": "user", "content": "Say hi."}]
ERROR_EVENT = (
    b'{"object":"error","message":"injected failure","type":"InternalServerError","code":500}'
)

# -- grammar and selection -----------------------------------------------------------------------


def test_parse_index_and_rate_rules() -> None:
    rule = parse_rule("http500@3,1,4")
    assert rule == FaultRule(Fault("http500"), indices=frozenset({1, 3, 4}), spec="http500@3,1,4")
    assert parse_rule("http429=7@0").fault == Fault("http429", 7.0)
    assert parse_rule("reset_mid_stream=3%0.25").rate == 0.25
    assert parse_rule("stall_first_byte=0.5@2").fault.ns == 500_000_000
    assert parse_rule("malformed_chunk=2%1").fault.count == 2
    assert parse_rule("no_done%0").rate == 0.0


@pytest.mark.parametrize(
    "spec",
    ["http404@1", "http500", "http500@", "http500@1,,2", "http500@-1", "http500@x",
     "http500%1.5", "http500%-0.1", "http500%nan", "http500%", "http500@1%0.5",
     "http429@1", "http429=1.5@1", "no_done=1@0", "reset_mid_stream@1",
     "reset_mid_stream=x@1", "reset_mid_stream=-1@1", "stall_first_byte=-1@0",
     "stall_first_byte=inf@0", "stall_mid_stream=@0", "@1", "", "http503@:0",
     "http503@m:", "http503@m:x"],
)  # fmt: skip
def test_bad_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="bad fault spec"):
        parse_rule(spec)


def test_index_selection_and_first_rule_wins() -> None:
    picker = FaultPicker([parse_rule("http500@1,3"), parse_rule("no_done@3,4")])
    kinds = [getattr(picker.pick(), "kind", None) for _ in range(6)]
    assert kinds == [None, "http500", None, "http500", "no_done", None]


def test_model_scoped_indices_count_that_models_requests_only() -> None:
    assert parse_rule("http503@qwen:7b:0").model == "qwen:7b"
    picker = FaultPicker([parse_rule("http503@llm.primary:0,2"), parse_rule("no_done@3")])
    models = ["org/sim", "llm.primary", "llm.primary", "other", "llm.primary", None]
    kinds = [getattr(picker.pick(m), "kind", None) for m in models]
    assert kinds == [None, "http503", None, "no_done", "http503", None]


def test_rate_selection_is_reproducible_with_the_seed() -> None:
    def kinds(seed: int) -> list[str | None]:
        picker = FaultPicker([parse_rule("http503%0.3"), parse_rule("no_usage%0.5")], seed)
        return [getattr(picker.pick(), "kind", None) for _ in range(400)]

    first = kinds(7)
    assert first == kinds(7)
    assert first != kinds(8)
    share = first.count("http503") / len(first)
    assert 0.2 < share < 0.4
    assert "no_usage" in first and None in first
    always = FaultPicker([parse_rule("no_done%1")], 3)
    never = FaultPicker([parse_rule("no_done%0")], 3)
    assert all(always.pick() for _ in range(50))
    assert not any(never.pick() for _ in range(50))


BAD_FAULT_FLAGS = [
    ["--fault", "http404@1"], ["--fault", "http500%2"], ["--fault", "no_done=1@0"],
    ["--fault", "no_done@0", "--fault", "slow_headers@0"], ["--fault-seed", "x"],
]  # fmt: skip


def assert_fault_flag_error(args: list[str], stderr: str) -> None:
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("anvil sim: error: argument --fault")
    if args[0] == "--fault":
        assert repr(args[-1]) in last and "KIND[=ARG]@I,J" in last and "slow_headers" in last


@pytest.mark.parametrize("args", BAD_FAULT_FLAGS)
def test_bad_fault_flags_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """In-process: the options `python -m anvil_metrics.sim` parses first (its `main`)."""
    with pytest.raises(SystemExit) as exc:
        parse_args(args)
    assert exc.value.code == 2
    assert_fault_flag_error(args, capsys.readouterr().err)


def test_a_bad_fault_flag_exits_the_process_2() -> None:
    """The same through a real process, once (each costs a Python start-up)."""
    args = BAD_FAULT_FLAGS[3]
    result = subprocess.run(
        [sys.executable, "-m", "anvil_metrics.sim", *args],
        capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert_fault_flag_error(args, result.stderr)


# -- the wire --------------------------------------------------------------------------------------

# Most wire tests share one simulator: each test's faults are scoped to a model name of its own
# (`KIND[=ARG]@NAME:I,J`, NAME an --alias), so a rule counts only that test's requests and the
# tests neither collide nor depend on their order. Where a test used `%1` to mean "every
# request", its rule now lists the indices of the requests it sends (one simulator serves many
# faults, each on its own model name; a process costs ~0.45 CPU-s). Simulators of their own
# remain for what applies to every request of a simulator: unscoped indices and the seeded
# rate draw count all its requests, and TIMED changes every answer: a prefill for the stalls
# to be measured against, the stamps slow_headers reads, usage in the finish chunk for
# no_usage; none of the tests on it looks at what the others need.
SCOPED: dict[tuple[str, ...], list[str]] = {}  # options -> the scoped --fault and --alias args
TIMED = ("--prefill-ms", "100", "--stamp-send", "--usage-in-finish-chunk")


def scoped(name: str, *specs: str, options: tuple[str, ...] = (), served: bool = True) -> str:
    """Model `name`, each spec `KIND[=ARG]@I,J` becoming `KIND[=ARG]@name:I,J` on the shared
    simulator with these options; served: `name` is an --alias (else it gets vLLM's 404)."""
    args = SCOPED.setdefault(options, [])
    for spec in specs:
        fault, _, indices = spec.partition("@")
        args += ["--fault", f"{fault}@{name}:{indices}"]
    if served:
        args += ["--alias", name]
    return name


@pytest.fixture(scope="module")
def sim() -> Iterator[Callable[..., int]]:
    """Factory: port of a simulator started with BASE plus the given options (one per set)
    plus the faults and aliases `scoped` registered for that set (at import, so all known)."""
    ports: dict[tuple[str, ...], int] = {}
    with ExitStack() as stack:

        def get(*args: str) -> int:
            if args not in ports:
                options = [*BASE, *args, *SCOPED.get(args, ())]
                process = stack.enter_context(start_simulator(options))
                ports[args] = int(process.url.rsplit(":", 1)[1])
            return ports[args]

        yield get


@dataclass
class Wire:
    """What one response put on the wire, read with a raw socket."""

    head: bytes = b""
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # Content-Length body
    events: list[bytes] = field(default_factory=list)  # SSE data payloads, one per HTTP chunk
    arrivals: list[float] = field(default_factory=list)  # monotonic s of each event
    head_at: float = 0.0
    terminated: bool = False  # the chunked terminator arrived
    ended: str = ""  # "complete", "reset" (ECONNRESET) or "eof" (FIN before complete)

    def chunks(self) -> list[dict[str, Any]]:
        return [orjson.loads(e) for e in self.events if e != b"[DONE]"]


def send(port: int, payload: dict[str, Any]) -> tuple[socket.socket, float]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = time.monotonic()
    sock.sendall(request_bytes("/v1/chat/completions", payload))
    return sock, sent


def read_response(sock: socket.socket) -> Wire:
    """Read one response: head, then a Content-Length body or chunks, noting how it ended."""
    wire, buf, pos = Wire(), bytearray(), 0

    def more() -> bool:
        try:
            data = sock.recv(1 << 20)
        except ConnectionResetError:
            wire.ended = "reset"
            return False
        if not data:
            wire.ended = "eof"
            return False
        buf.extend(data)
        return True

    while b"\r\n\r\n" not in buf:
        if not more():
            return wire
    wire.head_at = time.monotonic()
    end = buf.index(b"\r\n\r\n")
    wire.head = bytes(buf[:end])
    lines = wire.head.decode("latin-1").split("\r\n")
    wire.status = int(lines[0].split(" ")[1])
    wire.headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    pos = end + 4
    if wire.headers.get("transfer-encoding") != "chunked":
        length = int(wire.headers["content-length"])
        while len(buf) - pos < length:
            if not more():
                return wire
        wire.body, wire.ended = bytes(buf[pos : pos + length]), "complete"
        return wire
    while True:
        line_end = buf.find(b"\r\n", pos)
        size = int(buf[pos:line_end], 16) if line_end >= 0 else -1
        if size == 0 and len(buf) >= line_end + 4:
            assert buf[line_end + 2 : line_end + 4] == b"\r\n"
            wire.terminated, wire.ended = True, "complete"
            return wire
        if size > 0 and len(buf) >= line_end + 2 + size + 2:
            payload = bytes(buf[line_end + 2 : line_end + 2 + size])
            assert payload.startswith(b"data: ") and payload.endswith(b"\n\n"), payload[:80]
            wire.events.append(payload[6:-2])
            wire.arrivals.append(time.monotonic())
            pos = line_end + 2 + size + 2
            continue
        if not more():
            return wire


def chat(port: int, **fields: Any) -> tuple[Wire, float, socket.socket]:
    """One streaming chat request on a fresh connection; the socket stays open for checks."""
    payload = {"model": "sim-model", "messages": USER, "stream": True, **fields}
    sock, sent = send(port, payload)
    return read_response(sock), sent, sock


def still_open(sock: socket.socket) -> bool:
    """The connection was ended cleanly and kept alive: nothing more arrives, no FIN, no RST."""
    sock.settimeout(0.2)
    try:
        sock.recv(1)  # b"" (FIN) or stray bytes: not a clean, kept-alive end
        return False
    except TimeoutError:
        return True
    finally:
        sock.close()


def assert_normal_tokens(chunks: list[dict[str, Any]], count: int) -> None:
    """`count` token chunks after the role chunk, none with a finish_reason."""
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = chunks[1 : 1 + count]
    assert len(tokens) == count
    assert all(c["choices"][0]["finish_reason"] is None for c in tokens)


UNTOUCHED = scoped("untouched", "http500@99")


def test_no_fault_stream_is_untouched(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=UNTOUCHED, stream_options={"include_usage": True})
    assert wire.status == 200 and wire.terminated
    assert len(wire.events) == 1 + 6 + 1 + 1 and wire.events[-1] == b"[DONE]"
    assert still_open(sock)


def test_index_selection_on_the_wire(sim: Callable[..., int]) -> None:
    port = sim("--fault", "http500@1,3", "--fault", "http503@3,4")  # unscoped: its own simulator
    statuses = [chat(port)[0].status for _ in range(6)]
    assert statuses == [200, 500, 200, 500, 503, 200]


def test_rate_selection_on_the_wire_follows_the_seed(sim: Callable[..., int]) -> None:
    port = sim("--fault", "http503%0.5", "--fault-seed", "11")  # draws per request: its own
    statuses = [chat(port)[0].status for _ in range(20)]
    picker = FaultPicker([parse_rule("http503%0.5")], 11)
    assert statuses == [503 if picker.pick() else 200 for _ in range(20)]


HTTP_STATUS_MODELS = {kind: scoped(kind, f"{kind}@0") for kind in ("http400", "http500", "http503")}


@pytest.mark.parametrize(
    ("kind", "status", "err_type"),
    [("http400", 400, "invalid_request_error"), ("http500", 500, "server_error"),
     ("http503", 503, "server_error")],
)  # fmt: skip
def test_http_status_faults(sim: Callable[..., int], kind: str, status: int, err_type: str) -> None:
    wire, _, sock = chat(sim(), model=HTTP_STATUS_MODELS[kind])
    assert wire.status == status and wire.ended == "complete"
    assert wire.headers["content-type"] == "application/json"
    assert orjson.loads(wire.body) == {
        "error": {"message": f"injected fault: {kind}", "type": err_type, "param": None,
                  "code": status}
    }  # fmt: skip
    assert "retry-after" not in wire.headers
    assert still_open(sock)


HTTP429 = scoped("http429", "http429=7@0")


def test_http429_with_retry_after(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=HTTP429)
    assert wire.head.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
    assert wire.headers["retry-after"] == "7"
    error = orjson.loads(wire.body)["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == 429
    assert still_open(sock)


RESET_BEFORE_HEADERS = scoped("reset-before-headers", "reset_before_headers@0")


def test_reset_before_headers(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=RESET_BEFORE_HEADERS)
    sock.close()
    assert wire.ended == "reset" and wire.head == b""


RESET_MID_STREAM = scoped("reset-mid-stream", "reset_mid_stream=3@0")


def test_reset_mid_stream(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=RESET_MID_STREAM)
    sock.close()
    assert wire.status == 200 and wire.ended == "reset" and not wire.terminated
    chunks = wire.chunks()
    assert len(wire.events) == 4
    assert_normal_tokens(chunks, 3)


MALFORMED_CHUNK = scoped("malformed-chunk", "malformed_chunk=2@0")


def test_malformed_chunk(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=MALFORMED_CHUNK)
    assert wire.status == 200 and wire.terminated
    assert wire.events[3] == b"{not json"
    assert wire.events[-1] == b"[DONE]"
    good = [orjson.loads(e) for i, e in enumerate(wire.events[:-1]) if i != 3]
    assert len(good) == 1 + 6
    assert good[-1]["choices"][0]["finish_reason"] == "stop"
    assert still_open(sock)


STREAM_ERROR = scoped("stream-error", "stream_error=2@0")


def test_stream_error_event_then_done(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=STREAM_ERROR, stream_options={"include_usage": True})
    assert wire.status == 200 and wire.terminated
    assert wire.events[3:] == [ERROR_EVENT, b"[DONE]"]
    assert_normal_tokens(wire.chunks(), 2)
    assert all("usage" not in c for c in wire.chunks())
    assert still_open(sock)


STALL_FIRST_BYTE = scoped("stall-first-byte", "stall_first_byte=0.6@0", options=TIMED)


def test_stall_first_byte(sim: Callable[..., int]) -> None:
    wire, sent, sock = chat(sim(*TIMED), model=STALL_FIRST_BYTE)
    assert wire.status == 200 and wire.terminated and wire.events[-1] == b"[DONE]"
    assert 0.55 <= wire.head_at - sent < 1.2
    assert 0.65 <= wire.arrivals[1] - sent < 1.3  # first token: stall, then the whole prefill
    assert still_open(sock)


STALL_MID_STREAM = scoped("stall-mid-stream", "stall_mid_stream=0.5@0")


def test_stall_mid_stream(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=STALL_MID_STREAM)
    assert wire.status == 200 and wire.terminated and len(wire.events) == 1 + 6 + 1
    gaps = [b - a for a, b in zip(wire.arrivals[1:], wire.arrivals[2:], strict=False)]
    assert 0.45 <= gaps[0] < 1.0
    assert max(gaps[1:]) < 0.2
    assert still_open(sock)


NO_DONE = scoped("no-done", "no_done@0")


def test_no_done(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=NO_DONE, stream_options={"include_usage": True})
    assert wire.status == 200 and wire.terminated
    assert b"[DONE]" not in wire.events
    chunks = wire.chunks()
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert still_open(sock)


END_BEFORE_FINISH = scoped("end-before-finish", "end_before_finish=3@0")


def test_end_before_finish(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=END_BEFORE_FINISH)
    assert wire.status == 200 and wire.terminated and wire.ended == "complete"
    assert len(wire.events) == 4 and b"[DONE]" not in wire.events
    assert_normal_tokens(wire.chunks(), 3)
    assert still_open(sock)


NO_USAGE = {(): scoped("no-usage", "no_usage@0"),
            TIMED: scoped("no-usage-in-finish", "no_usage@0", options=TIMED)}  # fmt: skip


@pytest.mark.parametrize("where", [(), TIMED], ids=["usage-chunk", "usage-in-finish-chunk"])
def test_no_usage(sim: Callable[..., int], where: tuple[str, ...]) -> None:
    """No usage, where it would come in a chunk of its own or (TIMED's
    --usage-in-finish-chunk) in the finish chunk."""
    wire, _, sock = chat(sim(*where), model=NO_USAGE[where], stream_options={"include_usage": True})
    assert wire.status == 200 and wire.terminated and wire.events[-1] == b"[DONE]"
    assert len(wire.events) == 1 + 6 + 1
    assert all("usage" not in c for c in wire.chunks())
    assert still_open(sock)


OVERSIZE_CHUNK = scoped("oversize-chunk", "oversize_chunk@0")


def test_oversize_chunk(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=OVERSIZE_CHUNK, stream_options={"include_usage": True})
    assert wire.status == 200 and wire.terminated and wire.events[-1] == b"[DONE]"
    assert len(wire.events) == 1 + 6 + 1 + 1
    chunks = wire.chunks()
    big = [c for c in chunks if len(c["choices"] and c["choices"][0]["delta"].get("content") or "")
           == OVERSIZE_BYTES]  # fmt: skip
    assert len(big) == 1 and big[0] is chunks[3]  # the first content token (after r0 r1)
    assert len(max(wire.events, key=len)) > OVERSIZE_BYTES
    assert chunks[-1]["usage"]["completion_tokens"] == 6  # the big delta counts as one token
    assert still_open(sock)


SLOW_HEADERS_SHIFT = scoped("slow-headers-shift", "slow_headers=0.5@0", options=TIMED)


def test_slow_headers_shifts_the_schedule(sim: Callable[..., int]) -> None:
    wire, sent, sock = chat(sim(*TIMED), model=SLOW_HEADERS_SHIFT)
    assert wire.status == 200 and wire.terminated and wire.events[-1] == b"[DONE]"
    assert 0.45 <= wire.head_at - sent < 1.0
    assert 0.55 <= wire.arrivals[1] - sent < 1.1  # prefill runs after the wait
    chunks = wire.chunks()
    origin = int(wire.headers["anvil-t0-ns"])  # the shifted origin: deadlines follow from it
    first_token = chunks[1]["anvil_sent_ns"]
    assert first_token >= origin + 100_000_000
    assert still_open(sock)


NON_STREAMING = scoped("non-streaming", "reset_mid_stream=1@0")


def test_stream_faults_leave_non_streaming_answers_alone(sim: Callable[..., int]) -> None:
    wire, _, sock = chat(sim(), model=NON_STREAMING, stream=False)
    assert wire.status == 200 and wire.ended == "complete"
    assert orjson.loads(wire.body)["usage"]["completion_tokens"] == 6
    assert still_open(sock)


SLOW_WHOLE = scoped("slow-whole", "slow_headers=0.3@0")
SLOW_404 = scoped("slow-unserved", "slow_headers=0.3@0", served=False)  # a model not served


def test_slow_headers_also_delays_errors_and_whole_answers(sim: Callable[..., int]) -> None:
    port = sim()
    wire, sent, sock = chat(port, model=SLOW_WHOLE, stream=False)
    assert wire.status == 200 and 0.28 <= wire.head_at - sent < 0.9
    sock.close()
    wire, sent, sock = chat(port, model=SLOW_404)
    assert wire.status == 404 and 0.28 <= wire.head_at - sent < 0.9
    sock.close()
