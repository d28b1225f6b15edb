"""`anvil_metrics.prep.provenance`: who the server is, against small stand-ins for each engine.

Each stand-in is a stdlib HTTP server on 127.0.0.1 answering the shapes the real engines
answer (vLLM's ``/version``, SGLang's ``/get_server_info`` with its echoed server arguments,
llama.cpp's ``/props``), plus servers that misbehave: answers that are not JSON, not HTTP at
all, never come, trickle in, or redirect elsewhere. Discovery must name the engine, or say why
not in one line per field, within its time budget, and never repeat a credential.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from conftest import http_server

from anvil_metrics.prep.provenance import FIELDS, Discovery, discover, merge

SECRET = "sk-test-not-a-real-key-0123"
Route = tuple[int, Any]  # (status, JSON value or raw bytes)


@contextmanager
def stub(routes: dict[str, Route | Callable[[dict[str, str]], Route]]
         ) -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """An HTTP server answering `routes` (path -> answer; others 404); yields its base URL
    and the (path, headers) of every request it got."""
    seen: list[tuple[str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen.append((self.path, headers))
            answer = routes.get(self.path, (404, {"detail": "Not Found"}))
            status, body = answer(headers) if callable(answer) else answer
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            if status in (301, 302, 307):
                self.send_header("Location", body.decode() if isinstance(body, bytes) else "")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Handler) as port:
        yield f"http://127.0.0.1:{port}", seen


@contextmanager
def raw_server(reply: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 whose every connection gets `reply` (then is closed)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    reply(conn)
                except OSError:
                    pass

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def models(*cards: dict[str, Any]) -> Route:
    return 200, {"object": "list", "data": list(cards)}


def assert_no_secret(found: Discovery) -> None:
    assert SECRET not in repr(found) and "pw" not in json.dumps(found.sources)


# -- each engine -------------------------------------------------------------------------------


def test_vllm_version_and_the_limit_of_the_model_in_use() -> None:
    routes = {"/version": (200, {"version": "0.11.2"}),
              "/v1/models": models({"id": "draft", "max_model_len": 1024},
                                   {"id": "main", "max_model_len": 4096})}
    with stub(routes) as (url, seen):
        found = discover(url, headers={"Authorization": f"Bearer {SECRET}"}, model="main")
        first = discover(url + "/v1")
    assert (found.engine, found.version, found.max_model_len, found.served_model) == (
        "vllm", "0.11.2", 4096, "main")
    assert found.sources == {"engine": "GET /version", "version": "GET /version",
                             "max_model_len": "GET /v1/models", "served_model": "GET /v1/models"}
    assert found.null_reasons == {}
    assert (first.served_model, first.max_model_len) == ("draft", 1024)  # no model: the first
    assert seen[0] == ("/version", seen[0][1]) and seen[0][1]["authorization"] == f"Bearer {SECRET}"
    assert_no_secret(found)


SGLANG_INFO = {"model_path": "Qwen/Qwen3-0.6B", "tokenizer_path": "Qwen/Qwen3-0.6B",
               "context_length": None, "api_key": SECRET, "served_model_name": "qwen",
               "max_total_num_tokens": 500000, "internal_states": [{}], "version": "0.5.9"}
SGLANG_MODEL = {"model_path": "Qwen/Qwen3-0.6B", "tokenizer_path": "Qwen/Qwen3-0.6B",
                "is_generation": True, "preferred_sampling_params": None}


@pytest.mark.parametrize("info_path", ["/get_server_info", "/server_info"])
def test_sglang_server_info_old_and_new_names(info_path: str) -> None:
    routes = {info_path: (200, SGLANG_INFO), "/get_model_info": (200, SGLANG_MODEL),
              "/v1/models": models({"id": "qwen", "max_model_len": 40960})}
    with stub(routes) as (url, seen):
        found = discover(url, model="qwen")
    assert (found.engine, found.version, found.max_model_len, found.served_model) == (
        "sglang", "0.5.9", 40960, "qwen")
    assert found.sources["engine"] == f"GET {info_path}"
    assert found.sources["max_model_len"] == "GET /v1/models"  # context_length was not set
    assert_no_secret(found)  # SGLang echoes its api_key in the server info
    paths = [p for p, _ in seen]
    assert "/props" not in paths  # identified: no further engine probed


def test_sglang_context_length_when_set_and_identity_from_model_info_alone() -> None:
    routes = {"/get_server_info": (200, {**SGLANG_INFO, "context_length": 8192}),
              "/v1/models": models({"id": "qwen", "max_model_len": 8192})}
    with stub(routes) as (url, _):
        found = discover(url)
    assert found.max_model_len == 8192 and found.sources["max_model_len"] == "GET /get_server_info"
    with stub({"/get_model_info": (200, SGLANG_MODEL)}) as (url, _):
        found = discover(url)
    assert (found.engine, found.version) == ("sglang", None)
    assert "no SGLang server info" in found.null_reasons["version"]
    assert found.null_reasons["served_model"] == "GET /v1/models: HTTP 404"


def test_llamacpp_props() -> None:
    props = {"build_info": "b8681-Debian", "model_path": "/m/model.gguf", "total_slots": 4,
             "default_generation_settings": {"n_ctx": 16384, "temperature": 0.8}}
    routes = {"/props": (200, props),
              "/v1/models": models({"id": "model.gguf", "meta": {"n_ctx_train": 131072}})}
    with stub(routes) as (url, _):
        found = discover(url)
    assert (found.engine, found.version, found.max_model_len, found.served_model) == (
        "llamacpp", "b8681-Debian", 16384, "model.gguf")
    assert found.sources["max_model_len"] == "GET /props"


def test_an_unknown_server_says_what_was_tried() -> None:
    routes = {"/version": (200, b"<html>hello</html>"),
              "/v1/models": models({"id": "m"})}
    with stub(routes) as (url, _):
        found = discover(url, model="m")
    assert (found.engine, found.version, found.max_model_len) == (None, None, None)
    assert found.served_model == "m"
    reason = found.null_reasons["engine"]
    for part in ("GET /version: not JSON", "GET /get_server_info: HTTP 404",
                 "GET /server_info: HTTP 404", "GET /props: HTTP 404",
                 "not vLLM, SGLang or llama.cpp"):
        assert part in reason, reason
    assert "<html>" not in reason  # never the body
    assert found.null_reasons["max_model_len"] == "GET /v1/models: no max_model_len"
    assert set(found.null_reasons) | set(found.sources) == set(FIELDS)
    assert all("\n" not in r for r in found.null_reasons.values())
    assert found.unreachable is None  # it answered, if not as any engine we know


def test_a_closed_port_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    found = discover(f"http://127.0.0.1:{port}", timeout_s=1.0)
    assert found.unreachable == (
        "GET /version: ConnectionRefusedError: [Errno 111] Connection refused")
    assert found.served_model is None and "not tried" in found.null_reasons["served_model"]


def test_a_prefix_before_v1_is_kept_and_url_credentials_are_dropped() -> None:
    routes = {"/api/version": (200, {"version": "0.9.0"}),
              "/api/v1/models": models({"id": "x", "max_model_len": 2048})}
    with stub(routes) as (url, seen):
        found = discover(url.replace("http://", "http://user:pw@") + "/api/v1")
    assert (found.engine, found.max_model_len) == ("vllm", 2048)
    assert all("authorization" not in h for _, h in seen)  # a URL password is not sent here
    assert_no_secret(found)


# -- servers that misbehave ---------------------------------------------------------------------


def test_not_http_at_all_stops_at_once() -> None:
    with raw_server(lambda c: c.sendall(b"SSH-2.0-OpenSSH_9\r\n")) as url:
        found = discover(url, timeout_s=1.0)
    # every field null, and nothing there is an HTTP server
    assert found == Discovery(null_reasons=found.null_reasons, unreachable=found.unreachable)
    assert found.unreachable is not None and found.unreachable.startswith("GET /version: ")
    assert found.null_reasons["engine"].startswith("GET /version:")
    assert "not tried" in found.null_reasons["served_model"]


def test_a_hanging_server_costs_one_timeout() -> None:
    held = threading.Event()  # the server answers nothing until the test is done (<= 10 s)
    with raw_server(lambda c: held.wait(10)) as url:
        start = time.monotonic()
        found = discover(url, timeout_s=0.3)
        elapsed = time.monotonic() - start
        held.set()
    assert found.engine is None and "no answer within 0.3 s" in found.null_reasons["engine"]
    assert "not tried" in found.null_reasons["max_model_len"]  # the other probes never sent
    assert found.unreachable == "GET /version: no answer within 0.3 s"
    assert elapsed < 5  # loose: one 0.3 s wait, not the server's 10 s


def test_a_trickling_answer_is_given_up_on() -> None:
    done = threading.Event()

    def trickle(conn: socket.socket) -> None:  # a byte every 50 ms until the test is done
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n")
        for _ in range(99):
            conn.sendall(b" ")
            if done.wait(0.05):
                return

    with raw_server(trickle) as url:
        start = time.monotonic()
        found = discover(url, timeout_s=0.3)
        elapsed = time.monotonic() - start
        done.set()
    assert "no whole answer within 0.3 s" in found.null_reasons["engine"]
    assert elapsed < 4  # loose: 0.3 s, not the ~5 s the whole body would take


def test_redirects_are_reported_never_followed() -> None:
    with stub({"/version": (200, {"version": "evil"})}) as (elsewhere, seen_elsewhere):
        routes = {"/version": (302, f"{elsewhere}/version".encode())}
        with stub(routes) as (url, _):
            found = discover(url, headers={"Authorization": f"Bearer {SECRET}"})
    assert seen_elsewhere == []  # the key never went to the other host
    assert "GET /version: HTTP 302" in found.null_reasons["engine"]
    assert found.version is None


def test_wrong_shapes_are_not_taken() -> None:
    routes = {"/version": (200, {"version": 3}),
              "/get_server_info": (200, {"version": "1.0"}),  # no SGLang fields
              "/props": (200, ["not", "an", "object"]),
              "/v1/models": models({"id": "m", "max_model_len": True}, {"id": "n"})}
    with stub(routes) as (url, _):
        found = discover(url)
    assert (found.engine, found.version, found.max_model_len) == (None, None, None)
    reason = found.null_reasons["engine"]
    assert "no version string" in reason and "not SGLang's server info" in reason
    assert "GET /props: not a JSON object" in reason


def test_a_bad_url_gives_reasons_not_an_exception() -> None:
    found = discover("ftp://127.0.0.1:9")
    assert found.engine is None and set(found.null_reasons) == set(FIELDS)
    assert "not a usable URL" in found.null_reasons["version"]


# -- merge -------------------------------------------------------------------------------------


def test_given_values_override_and_complete() -> None:
    found = Discovery(engine="vllm", version="0.11.2", sources={"engine": "GET /version",
                      "version": "GET /version"},
                      null_reasons={"max_model_len": "GET /v1/models: HTTP 404",
                                    "served_model": "GET /v1/models: HTTP 404"})
    merged = merge(found, {"version": "0.11.2+local", "max_model_len": 8192, "engine": None})
    assert (merged.engine, merged.version, merged.max_model_len) == ("vllm", "0.11.2+local", 8192)
    assert merged.sources == {"engine": "GET /version", "version": "given",
                              "max_model_len": "given"}
    assert merged.null_reasons == {"served_model": "GET /v1/models: HTTP 404"}
    assert found.version == "0.11.2"  # the discovered one is unchanged
    with pytest.raises(ValueError, match="gpu"):
        merge(found, {"gpu": "H100"})
