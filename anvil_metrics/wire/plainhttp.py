"""Small bounded HTTP requests to the server under test, outside the load.

Why one module: the identity probes (`provenance.py`) and the campaign's alias check
(`restoration.py`) both ask a server a few JSON questions with the same rules — the
environment's proxies are not used and redirects are not followed (a redirect would carry
the Authorization header to another host), and an answer is read only up to a size and a
time, so a server that trickles its body forever or sends gigabytes cannot hold a check.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

MAX_BODY_BYTES = 4 << 20  # SGLang's server info is ~10 KB, llama.cpp's props (template) ~50 KB


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx becomes an HTTPError: reported, never followed


OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


class BodyError(Exception):
    """An answer's body could not be read whole; `fatal` when the server stopped answering
    as it should (too slow, never ending) rather than answering too much."""

    def __init__(self, message: str, fatal: bool) -> None:
        super().__init__(message)
        self.fatal = fatal


def read_body(response: Any, what: str, wait_s: float) -> bytes:
    """The whole body of `response` (an open urllib response), read within `wait_s` seconds
    and `MAX_BODY_BYTES`; `what` ("GET /version") names it in the BodyError's message."""
    give_up = time.monotonic() + wait_s
    chunks: list[bytes] = []
    size = 0
    for _ in range(MAX_BODY_BYTES // 1024 + 2):  # read1 returns >= 1 byte or EOF
        if time.monotonic() > give_up:
            raise BodyError(f"{what}: no whole answer within {wait_s:g} s", fatal=True)
        chunk = response.read1(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyError(f"{what}: answer over {MAX_BODY_BYTES} bytes", fatal=False)
        chunks.append(chunk)
    raise BodyError(f"{what}: answer never ended", fatal=True)
