"""Fixed answers by path from a stdlib HTTP server on 127.0.0.1 (`conftest.http_server`),
for unit tests.

Why: the modules that ask a server small questions outside the load (`wire/plainhttp.py`,
`telemetry/scrape.py`) are tested against real sockets, without the simulator's start-up
or its rules; each answer is exactly what a test wrote.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from conftest import http_server

# path -> (status, headers, body)
Answers = Mapping[str, tuple[int, Mapping[str, str], bytes]]


@contextmanager
def serving(answers: Answers) -> Iterator[str]:
    """Serve `answers` to GET and POST (a POST's body is read and dropped; 404 for any
    other path); yields the server's `http://127.0.0.1:PORT`."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            status, headers, body = answers.get(self.path, (404, {}, b"not here"))
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as port:
        yield f"http://127.0.0.1:{port}"
