"""The transport's check of geventhttpclient's internals: the installed version passes; one
attribute taken away is refused at the first client with one line naming the installed
version, the attribute and the supported range (a UsageError: the CLI exits 2); the range
in that line is the one pyproject.toml pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import gevent.socket
import pytest
from conftest import self_signed_cert
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPResponse

from anvil_metrics.errors import TransportUnsupported, UsageError
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire import transport
from anvil_metrics.wire.client import ChatClient


def test_the_installed_geventhttpclient_has_every_internal() -> None:
    assert transport.missing_private_attribute() is None
    transport.require_private_api()


def _drop_after_init(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> None:
    init = cls.__init__

    def without(self, *args, **kw) -> None:
        init(self, *args, **kw)
        delattr(self, name)

    monkeypatch.setattr(cls, "__init__", without)


_GEVENT_SOCKET = gevent.socket.socket


class _SocketWithoutReadEvent:
    """An unconnected socket as a gevent without `_read_event` would make it."""

    def __init__(self) -> None:
        self._inner = _GEVENT_SOCKET()
        self._sock = self._inner._sock
        self.hub = self._inner.hub

    def close(self) -> None:
        self._inner.close()


@pytest.mark.parametrize("attribute", [
    "HTTPResponse._body_buffer", "HTTPClient._connection_pool",
    "gevent.socket.socket._read_event"])
def test_a_missing_internal_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                   attribute: str) -> None:
    if attribute == "HTTPResponse._body_buffer":
        _drop_after_init(monkeypatch, HTTPResponse, "_body_buffer")
    elif attribute == "HTTPClient._connection_pool":
        _drop_after_init(monkeypatch, HTTPClient, "_connection_pool")
    else:
        monkeypatch.setattr(gevent.socket, "socket", _SocketWithoutReadEvent)
    assert transport.missing_private_attribute() == attribute
    monkeypatch.setattr(transport, "_checked", False)  # as in a fresh process
    with pytest.raises(TransportUnsupported) as info:
        ChatClient(Endpoint.parse("http://127.0.0.1:9"))
    err = info.value
    assert isinstance(err, UsageError) and err.exit_code == 2
    text = str(err)
    assert "\n" not in text
    assert f"geventhttpclient {transport.installed_version()} is installed" in text
    assert attribute in text
    assert f"geventhttpclient{transport.SUPPORTED_GEVENTHTTPCLIENT}" in text
    assert not transport._checked  # refused: checked again next time


def test_pyproject_pins_the_supported_range() -> None:
    project = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    pins = [d for d in project["project"]["dependencies"] if d.startswith("geventhttpclient")]
    assert pins == [f"geventhttpclient{transport.SUPPORTED_GEVENTHTTPCLIENT}"]


_INTERNALS = re.compile(r"^\s*(import|from) geventhttpclient\b|\.(_sock|_body_buffer|_read_event"
                        r"|_write_event|_socket_queue|_semaphore|_connection_pool)\b", re.M)


def test_no_other_module_touches_geventhttpclient() -> None:
    """The transport is the package's one importer of geventhttpclient and one reader of
    its (and gevent's sockets') internals."""
    package = Path(transport.__file__).parent
    touching = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                      if p.name != "transport.py" and _INTERNALS.search(p.read_text()))
    assert touching == []
    assert _INTERNALS.search((package / "transport.py").read_text())  # the pattern finds them


_TLS_STREAMS = """
from gevent import monkey
monkey.patch_all()  # as Locust does: the client's TLS sockets are gevent's
import socket, ssl, sys, threading, time
from anvil_metrics.wire.client import ChatClient
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.observe import StreamObserver
cert, key = sys.argv[1:3]
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(cert, key)
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(2)
event = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\\n\\n'
end = (b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\\n\\n'
       b'data: [DONE]\\n\\n')
def serve():
    for pause_s in (0.05, 1.5):  # the second: a silence past the idle timeout
        raw, _ = srv.accept()
        with tls.wrap_socket(raw, server_side=True) as conn:
            data = b""
            while b"\\r\\n\\r\\n" not in data:
                data += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n"
                         b"Connection: close\\r\\n\\r\\n")
            for _ in range(3):
                time.sleep(0.05)
                conn.sendall(event)
            time.sleep(pause_s)
            try:
                conn.sendall(end)
            except OSError:
                pass
threading.Thread(target=serve, daemon=True).start()
client = ChatClient(Endpoint.parse(f"https://127.0.0.1:{srv.getsockname()[1]}"), None,
                    network_timeout_s=5, idle_timeout_s=0.5)
client.transport.pool.ssl_context.load_verify_locations(cert)
for i in range(2):
    obs = StreamObserver(i, time.perf_counter_ns())
    client.stream_chat(b"{}", obs)
    rec = obs.finish()
    f = rec.failure
    print(rec.content_chunks, None if f is None else f.kind, None if f is None else f.phase)
client.close()
"""


def test_a_tls_stream_is_read_through_the_tls_layer(tmp_path: Path) -> None:
    """Events that arrive over HTTPS after the response head was read are decrypted (the OS
    socket under TLS holds ciphertext: read raw, they were garbage — a malformed or
    truncated failure), and a silence past the idle timeout is still a `timeout`. Run in
    a gevent-patched process, as under Locust."""
    import subprocess
    import sys

    cert, key = self_signed_cert(tmp_path)
    out = subprocess.run([sys.executable, "-c", _TLS_STREAMS, str(cert), str(key)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["3 None None", "3 timeout decode"], out.stdout


def test_a_requests_chunks_are_counted_in_its_runs_stats_only() -> None:
    """`send_cooperatively` writes the parts in 64 KiB chunks and counts each in the
    `SendStats` it is given (a run's, owned by its session), never in another's."""
    written: list[bytes] = []

    class Sock:
        def sendall(self, chunk: bytes) -> None:
            written.append(bytes(chunk))

    parts = (b"head ", b"x" * (2 * transport.SEND_CHUNK_BYTES), b" tail")
    mine, other = transport.SendStats(), transport.SendStats()
    transport.send_cooperatively(Sock(), parts, mine)
    assert b"".join(written) == b"".join(parts) and len(written) == 3
    assert mine.chunks == len(written) and mine.max_chunk_ns > 0
    assert (other.chunks, other.max_chunk_ns) == (0, 0)
    transport.send_cooperatively(Sock(), parts)  # no stats: nothing counted
    assert mine.chunks == 3


def test_a_plain_answer_longer_than_the_limit_is_refused_not_read_whole() -> None:
    """Set-up's plain JSON answers (a calibration's, a model list) are read up to the
    client's limit: a 200 MB answer held whole peaked the load process at ~270 MB."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(2)

    def serve() -> None:
        for chunked in (True, False):
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                head = (b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % (1 << 22) if chunked
                        else b"Content-Length: %d\r\n\r\n" % (1 << 22))
                try:
                    conn.sendall(b"HTTP/1.1 200 OK\r\n" + head + b"x" * (1 << 22))
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    port = srv.getsockname()[1]
    for said in ("an answer longer than the client's limit (65536 bytes)",
                 "an answer of 4194304 bytes, longer than the client's limit (65536 bytes)"):
        t = transport.Transport("127.0.0.1", port, tls=False, headers={},
                                connect_timeout_s=5, network_timeout_s=5,
                                max_answer_bytes=65536)
        with pytest.raises(transport.AnswerTooLong, match=re.escape(said)):
            t.post("/x", b"{}")
        t.close()
    srv.close()
