"""A tiny HTTP server on 127.0.0.1 for unit tests: fixed answers by path, in a thread,
stopped when the `with` block ends.

Why: the modules that ask a server small questions outside the load (`wire/plainhttp.py`,
`telemetry/scrape.py`) are tested against real sockets, without the simulator's start-up
or its rules; each answer is exactly what a test wrote.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# path -> (status, headers, body)
Answers = Mapping[str, tuple[int, Mapping[str, str], bytes]]


@contextmanager
def serving(answers: Answers) -> Iterator[str]:
    """Serve `answers` (404 for any other path); yields the server's `http://127.0.0.1:PORT`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            status, headers, body = answers.get(self.path, (404, {}, b"not here"))
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
