"""`anvil sim --log-requests`: one line per chat request, as it arrived, with the session
header's value and each message's role, length and CRC-32, in the order received."""

from __future__ import annotations

import urllib.error
import urllib.request
import zlib
from pathlib import Path

import orjson

from anvil_metrics.sim.requestlog import message_digest


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_each_request_is_logged_with_its_session_and_messages(simulator, tmp_path: Path
                                                              ) -> None:
    log = tmp_path / "requests.jsonl"
    sim = simulator("--prefill-ms", "1", "--interval-ms", "1", "--reasoning-tokens", "0",
                    "--content-tokens", "2", "--log-requests", str(log),
                    "--session-header", "X-Conv")
    turn1 = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo"}]
    turn2 = [*turn1, {"role": "assistant", "content": "hi"},
             {"role": "user", "content": [{"type": "text", "text": "again"}]}]
    sent = []
    for messages, session in ((turn1, "c-1"), (turn2, "c-1"), (turn1, None)):
        body = orjson.dumps({"model": "sim-model", "messages": messages, "max_tokens": 4})
        assert _post(sim.url, body, {"X-Conv": session} if session else {}) == 200
        sent.append((messages, session))
    assert _post(sim.url, b"{not json", {"X-Conv": "c-2"}) == 400
    lines = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    assert len(lines) == 4
    for line, (messages, session) in zip(lines, sent, strict=False):
        assert line["session"] == session and line["model"] == "sim-model"
        assert line["messages"] == [message_digest(m) for m in messages]
    assert lines[0]["messages"][1] == ["user", 5, zlib.crc32("héllo".encode())]
    assert lines[1]["messages"][3][0] == "user" and lines[1]["messages"][3][1] > 5
    assert lines[3] == {**lines[3], "session": "c-2", "model": None, "messages": None}
    assert [x["t_ns"] for x in lines] == sorted(x["t_ns"] for x in lines)
