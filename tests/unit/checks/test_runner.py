"""runner: `anvil check`'s suites named in run order ("all" is every suite but near_limit),
a bad name refused naming the allowed ones, and the document assembled and written — here
against a 127.0.0.1 port nothing listens on, where every suite is an error that says why.

Why: the document is what a campaign gates on; a suite silently skipped, or run out of
order, or a host written with its password, would change a decision without a trace.
"""

from __future__ import annotations

import http.server
import socket
import threading
from pathlib import Path

import orjson
import pytest

from anvil_metrics.checks.docverify import SCHEMA, verify_checks
from anvil_metrics.checks.registry import SUITES
from anvil_metrics.checks.runner import parse_suites, run_checks, write_checks
from anvil_metrics.errors import UsageError


def test_suites_in_run_order_and_all_without_near_limit() -> None:
    assert parse_suites("tools, json") == ("json", "tools")
    everything = parse_suites("all")
    assert "near_limit" not in everything and len(everything) == len(SUITES) - 1
    assert parse_suites("all,near_limit") == tuple(SUITES)


@pytest.mark.parametrize(("text", "says"), [
    ("jsn", "check: suite 'jsn' is not known; allowed: all, coding, json"),
    (" , ", "check: SUITE ' , ' names no suite; allowed: all, coding"),
])
def test_a_bad_suite_is_refused_naming_the_allowed(text: str, says: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_suites(text)
    assert str(e.value).startswith(says)


def test_a_server_that_is_not_there_is_one_line_and_no_suite(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    seen: list[str] = []
    with pytest.raises(UsageError) as e:
        run_checks(f"http://u:pw@127.0.0.1:{port}", ("json", "tools"),
                   on_suite=lambda r: seen.append(r.suite))
    assert str(e.value) == (
        f"cannot reach http://127.0.0.1:{port}/v1 (GET /version: ConnectionRefusedError: "
        "[Errno 111] Connection refused); is the server running? check --host")
    assert e.value.exit_code == 2 and seen == []


def test_a_server_that_names_no_model_makes_each_suite_an_error(tmp_path: Path) -> None:
    """It answers (404 everywhere): each suite is an error that says why, in a document."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        doc = run_checks(f"http://u:pw@127.0.0.1:{port}", ("json", "tools"))
    finally:
        server.shutdown()
        server.server_close()
    assert list(doc["checks"]) == ["json", "tools"]
    assert doc["schema"] == SCHEMA and doc["host"] == f"http://127.0.0.1:{port}/v1"
    assert doc["model"] is None
    for suite in doc["checks"].values():
        assert suite["result"] == "error" and suite["total"] == 0
        assert suite["error"].startswith("the server named no model")
    assert verify_checks(doc) == []
    path = tmp_path / "checks.json"
    write_checks(path, doc)
    assert orjson.loads(path.read_bytes()) == doc
    assert path.read_bytes().endswith(b"}\n")
