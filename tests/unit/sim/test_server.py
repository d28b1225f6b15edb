"""`anvil sim`'s routing (`sim/server.py`) in process (`simwire`): each route answers what it
is for, a known path with the wrong method gets 405 and an unknown one 404, the fault picker
and the script sit in front of the chat path, and a port already taken is exit 1 with one
line. The endpoints' own bodies are their modules' tests; here only who answers what."""

from __future__ import annotations

import socket
import time

import orjson
import pytest
from simwire import Wire

from anvil_metrics.checks import reasoning
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.faults import parse_rule
from anvil_metrics.sim.httpproto import error_body
from anvil_metrics.sim.identity import SIM_VERSION
from anvil_metrics.sim.ledger import STREAM_COUNTS
from anvil_metrics.sim.metrics import CONTENT_TYPE
from anvil_metrics.sim.server import CONTROL_PATHS, _model_of, main

HI = [{"role": "user", "content": "hi"}]
FAST = SimConfig(prefill_ms=0.0, interval_ms=0.0, reasoning_tokens=0, content_tokens=1)


def body(wire: Wire, path: str, payload: object = None, method: str = "GET") -> object:
    resp = wire.ask(path, payload, method)
    return resp.status, orjson.loads(resp.body)


def test_health_models_and_identity() -> None:
    wire = Wire(cfg=SimConfig(model="m", aliases=("a1",), max_context=100))
    assert body(wire, "/health") == (200, {})
    wire.transport.writes.clear()
    status, models = body(wire, "/v1/models")
    assert status == 200 and [c["id"] for c in models["data"]] == ["m", "a1"]  # type: ignore[index]
    assert {c["root"] for c in models["data"]} == {"m"}  # type: ignore[index]
    assert models["data"][0]["max_model_len"] == 100  # type: ignore[index]
    wire.transport.writes.clear()
    assert body(wire, "/version") == (200, {"version": SIM_VERSION})


def test_metrics_and_stats() -> None:
    wire = Wire(cfg=SimConfig(max_running=2, metrics_format="sglang", model="m"))
    resp = wire.ask("/metrics", method="GET")
    assert resp.status == 200 and resp.headers["content-type"] == CONTENT_TYPE
    assert b'sglang:num_running_reqs{model_name="m"}' in resp.body
    wire.transport.writes.clear()
    status, stats = body(wire, "/sim/stats")
    assert status == 200 and set(stats) == {"streams", "admission", "metrics", "control"}  # type: ignore[arg-type]
    assert stats["admission"] == {"max_running": 2, "running": 0, "waiting": 0}  # type: ignore[index]
    assert stats["control"] == {p: [] for p in CONTROL_PATHS}  # type: ignore[index]


def test_the_control_endpoints_answer_and_are_stamped() -> None:
    wire = Wire(cfg=SimConfig(prefix_cache=True))
    before = time.perf_counter_ns()
    for path in ("/reset_prefix_cache", "/start_profile", "/stop_profile", "/flush_cache"):
        assert body(wire, path, {}, "POST") == (200, {"ok": True})
        wire.transport.writes.clear()
    assert body(wire, "/reset_prefix_cache", method="GET")[0] == 404
    wire.transport.writes.clear()
    control = body(wire, "/sim/stats")[1]["control"]  # type: ignore[index]
    assert {p: len(v) for p, v in control.items()} == {p: 1 for p in CONTROL_PATHS}
    stamps = [control[p][0] for p in ("/reset_prefix_cache", "/start_profile",
                                      "/stop_profile", "/flush_cache")]
    assert before <= stamps[0] <= stamps[1] <= stamps[2] <= stamps[3] <= time.perf_counter_ns()


def test_chat_and_tokenize_routes() -> None:
    wire = Wire(cfg=FAST)
    started = STREAM_COUNTS["started"]
    resp = wire.ask("/v1/chat/completions", {"messages": HI, "stream": True})
    assert resp.status == 200 and resp.complete and STREAM_COUNTS["started"] == started + 1
    wire.transport.writes.clear()
    assert body(wire, "/tokenize", {"prompt": "hello"}, "POST")[1]["count"] == 2  # type: ignore[index]
    llama = Wire(cfg=SimConfig(tokenize_api="llamacpp"))
    assert body(llama, "/apply-template", {"messages": HI}, "POST")[0] == 200


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/chat/completions", 405),
    ("POST", "/health", 405),
    ("POST", "/metrics", 405),
    ("GET", "/tokenize", 405),
    ("POST", "/version", 405),
    ("GET", "/nowhere", 404),
    ("PUT", "/sim/script-faults", 404),  # only with --script
])
def test_wrong_method_and_unknown_path(method: str, path: str, status: int) -> None:
    got = body(Wire(), path, method=method)
    if status == 405:
        assert got == (405, error_body(f"method {method} not allowed", 405))
    else:
        assert got == (404, error_body(f"Not Found: {method} {path}", 404, "not_found_error"))


def test_the_fault_picker_counts_chat_requests_only_by_model() -> None:
    cfg = SimConfig(prefill_ms=0.0, model="a", aliases=("b",),
                    faults=(parse_rule("http503@b:1"),))
    wire = Wire(cfg=cfg)
    statuses = []
    for model in ("b", "a", "b", "b", "c"):
        wire.transport.writes.clear()
        statuses.append(wire.ask("/v1/chat/completions", {"model": model, "messages": HI,
                                                          "max_tokens": 1}).status)
    assert statuses == [200, 200, 503, 200, 404]  # the second request naming "b"
    assert _model_of(b'{"model": "x"}') == "x"
    assert _model_of(b"[1]") is _model_of(b"nope") is _model_of(b'{"model": 1}') is None


def test_the_script_answers_first_and_its_faults_switch() -> None:
    case = reasoning.CASES[0]
    ask = {"messages": [{"role": "user", "content": case.prompt}]}
    wire = Wire(cfg=SimConfig(script=True))
    status, reply = body(wire, "/v1/chat/completions", ask, "POST")
    assert status == 200 and reply["choices"][0]["message"]["content"] == case.answer  # type: ignore[index]
    wire.transport.writes.clear()
    fault = "reasoning_leakage:wrong_answer"
    assert body(wire, "/sim/script-faults", [fault], "PUT") == (200, [fault])
    wire.transport.writes.clear()
    _, wrong = body(wire, "/v1/chat/completions", ask, "POST")
    assert wrong["choices"][0]["message"]["content"] != case.answer  # type: ignore[index]
    for bad in ({"a": 1}, ["nope:nope"]):
        wire.transport.writes.clear()
        assert body(wire, "/sim/script-faults", bad, "PUT")[0] == 400
    wire.transport.writes.clear()
    other = wire.ask("/v1/chat/completions", {"messages": HI, "max_tokens": 1})
    assert orjson.loads(other.body)["object"] == "chat.completion"  # not a script question
    wire.transport.writes.clear()
    _, stats = body(wire, "/sim/stats", None, "GET")
    assert stats["script"] == {"right": 1, "wrong": 1, "by_family": {  # type: ignore[index]
        "reasoning": {"right": 1, "wrong": 1}}}


def test_a_taken_port_is_exit_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        assert main(["--port", str(port)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"anvil sim: cannot serve on 127.0.0.1:{port}: ") and "\n" not in err
    assert time.monotonic() - started < 5  # it gives up at once, it does not serve
