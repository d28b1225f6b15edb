"""plainhttp: a small answer read whole; a redirect reported, never followed; the
environment's proxies not used; a body too large or too slow refused, naming it.

Why: these requests carry the Authorization header; a followed redirect would hand it to
another host, and a server that trickles its body forever must not hold a check.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from localhttp import serving

from anvil_metrics.wire import plainhttp
from anvil_metrics.wire.plainhttp import OPENER, BodyError, read_body


@pytest.fixture
def server() -> Iterator[str]:
    with serving({"/ok": (200, {}, b'{"ok": true}'),
                  "/moved": (302, {"Location": "/secret-elsewhere"}, b""),
                  "/big": (200, {}, b"x" * 5000)}) as url:
        yield url


def test_an_answer_is_read_whole_without_the_environments_proxy(
        server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")  # a proxy nobody runs
    with OPENER.open(server + "/ok", timeout=5) as response:
        assert read_body(response, "GET /ok", 5) == b'{"ok": true}'


def test_a_redirect_is_reported_not_followed(server: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as e:
        OPENER.open(server + "/moved", timeout=5)
    assert e.value.code == 302
    e.value.close()


def test_a_body_over_the_limit_is_refused(server: str, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.setattr(plainhttp, "MAX_BODY_BYTES", 4096)
    with OPENER.open(server + "/big", timeout=5) as response, \
            pytest.raises(BodyError, match="^GET /big: answer over 4096 bytes$") as e:
        read_body(response, "GET /big", 5)
    assert e.value.fatal is False


def test_a_body_that_trickles_past_its_time_is_refused(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    clock = iter(range(100))  # each look at the clock: one second later
    monkeypatch.setattr(plainhttp, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    trickle = SimpleNamespace(read1=lambda n: b"x")
    with pytest.raises(BodyError, match=r"^GET /v: no whole answer within 3 s$") as e:
        read_body(trickle, "GET /v", 3)
    assert e.value.fatal is True


def test_a_body_that_never_ends_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plainhttp, "MAX_BODY_BYTES", 2048)  # at most 2048 // 1024 + 2 reads
    assert read_body(SimpleNamespace(read1=lambda n: b""), "GET /e", 5) == b""
    with pytest.raises(BodyError, match="^GET /e: answer never ended$") as e:
        read_body(SimpleNamespace(read1=lambda n: b"x"), "GET /e", 5)  # 1 byte a read
    assert e.value.fatal is True
