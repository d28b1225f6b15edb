"""scrape: one `/metrics` scrape from a 127.0.0.1 server read into series, and every way it
can fail given as a one-line reason; the child's command line writing its header line and
a marked sample. (The exposition parser and the sampler's loop: `test_servermetrics.py`.)

Why: a failed scrape is written into the samples file, and the benchmark's
`server.null_reasons` quotes it; "ValueError" alone would leave the user guessing.
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from localhttp import serving

from anvil_metrics.telemetry import scrape

TEXT = b"# TYPE up gauge\nup 1\n# TYPE t counter\nt_total{b=\"2\",a=\"1\"} 7\n"


def test_a_good_scrape_gives_its_series() -> None:
    with serving({"/metrics": (200, {"Content-Type": "text/plain"}, TEXT)}) as url:
        assert scrape.scrape_once(url + "/metrics", 5) == {"up": 1.0,
                                                          't_total{a="1",b="2"}': 7.0}


@pytest.mark.parametrize(("answer", "error", "says"), [
    ((500, {}, b"down"), OSError, "HTTP 500 from "),
    ((200, {}, b"\xff\xfe"), ValueError, "the reply is not UTF-8 text"),
    ((200, {}, b"{not metrics"), ValueError, "not Prometheus text ("),
    ((200, {}, b"# nothing here\n"), ValueError, "the reply holds no metrics"),
])
def test_a_bad_reply_is_one_line(answer: tuple, error: type, says: str) -> None:
    with serving({"/metrics": answer}) as url, pytest.raises(error) as e:
        scrape.scrape_once(url + "/metrics", 5)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_reply_over_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scrape, "MAX_BYTES", len(TEXT) - 1)
    with serving({"/metrics": (200, {}, TEXT)}) as url, \
            pytest.raises(ValueError, match="the reply is larger than"):
        scrape.scrape_once(url + "/metrics", 5)


def test_a_server_that_is_not_there() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OSError, match=f"cannot reach http://127.0.0.1:{port}/metrics"):
        scrape.scrape_once(f"http://127.0.0.1:{port}/metrics", 5)


def test_a_failed_sample_is_written_with_its_reason() -> None:
    def fetch(url: str, timeout_s: float) -> dict[str, float]:
        raise OSError("no answer within 2 s")

    out = io.BytesIO()
    assert scrape.Sampler("u", out, 1.0, 2.0, fetch).sample("first") == 0
    line = orjson.loads(out.getvalue())
    assert (line["ok"], line["error"], line["mark"], line["seq"]) == (
        False, "no answer within 2 s", "first", 0)
    assert line["done_ns"] >= line["t_ns"]


def test_the_child_writes_its_header_and_answers_last(tmp_path: Path) -> None:
    out = tmp_path / "samples.jsonl"
    with serving({"/metrics": (200, {}, TEXT)}) as url:
        done = subprocess.run(
            [sys.executable, "-m", "anvil_metrics.telemetry.scrape", url + "/metrics",
             str(out), "--interval-s", "3600", "--timeout-s", "5"],
            input=b"last\n", capture_output=True, timeout=30)
    assert done.returncode == 0
    lines = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert lines[0] == {"type": "scrape", "url": url + "/metrics", "interval_s": 3600.0,
                        "timeout_s": 5.0}
    assert lines[-1]["mark"] == "last" and lines[-1]["ok"] is True
    assert done.stdout == f"done {lines[-1]['seq']}\n".encode()
