"""`anvil sim --log-requests`: one line per chat request, as it arrived, with the session
header's value and each message's role, length and CRC-32, in the order received."""

from __future__ import annotations

import time
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


def _stream(url: str, messages: list, headers: dict[str, str]) -> list[dict]:
    """One streamed chat answer's chunks (the simulator's `anvil_sent_ns` stamps in them)."""
    body = orjson.dumps({"model": "sim-model", "messages": messages, "max_tokens": 4,
                         "stream": True, "stream_options": {"include_usage": True}})
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=30) as r:
        events = r.read().split(b"\n\n")
    return [orjson.loads(e[6:]) for e in events if e.startswith(b"data: {")]


def test_log_answers_adds_agent_headers_and_each_answers_stamps(simulator, tmp_path: Path
                                                                ) -> None:
    """An arrival line names the job, session and turn; with --log-answers a second line,
    keyed by the arrival's stamp, carries the first and last send stamps (on the chunks'
    own clock: the first generated token's chunk and the last stamped chunk lie between
    them), the prompt tokens and the prefix-cache hits the answer's usage reported."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--prefill-ms", "1", "--interval-ms", "2", "--reasoning-tokens", "0",
                    "--content-tokens", "3", "--stamp-send", "--prefix-cache",
                    "--prefix-cache-block", "4", "--log-requests", str(log),
                    "--log-answers")
    words = " ".join(f"w{i}" for i in range(40))
    turn = [{"role": "user", "content": words}]
    agent = {"X-Anvil-Job": "j7", "X-Anvil-Session": "j7-a1", "X-Anvil-Turn": "2"}
    answers = [_stream(sim.url, turn, agent), _stream(sim.url, turn, {"X-Anvil-Turn": "x"})]
    deadline = time.monotonic() + 10  # the answer's line follows its response's last write
    while len(lines := [orjson.loads(x) for x in log.read_bytes().splitlines()]) < 4:
        assert time.monotonic() < deadline, lines
        time.sleep(0.01)
    arrivals = [x for x in lines if "t_ns" in x]
    ends = {x["answer_t0_ns"]: x for x in lines if "answer_t0_ns" in x}
    assert len(arrivals) == 2 and len(ends) == 2
    assert [(x["anvil_job"], x["anvil_session"], x["anvil_turn"]) for x in arrivals] == [
        ("j7", "j7-a1", 2), (None, None, "x")]
    for arrival, chunks in zip(arrivals, answers, strict=True):
        end = ends[arrival["t_ns"]]
        usage = chunks[-1]["usage"]
        assert end["prompt_tokens"] == usage["prompt_tokens"] > 40
        assert end["cached_tokens"] == usage["prompt_tokens_details"]["cached_tokens"]
        assert end["completed"] is True
        sent = [c["anvil_sent_ns"] for c in chunks if c["choices"]
                and c["choices"][0]["delta"].get("content")]
        assert arrival["t_ns"] < end["first_sent_ns"] <= sent[0]
        assert sent[0] - end["first_sent_ns"] < 5_000_000  # the same write, µs apart
        assert chunks[-1]["anvil_sent_ns"] <= end["last_sent_ns"]
    assert ends[arrivals[0]["t_ns"]]["cached_tokens"] == 0
    assert ends[arrivals[1]["t_ns"]]["cached_tokens"] > 0  # the same prompt again
    # a whole (non-streamed) answer: its first and last byte are one write
    assert _post(sim.url, orjson.dumps({"model": "sim-model", "messages": turn,
                                        "max_tokens": 3}), agent) == 200
    while len(lines := [orjson.loads(x) for x in log.read_bytes().splitlines()]) < 6:
        assert time.monotonic() < deadline, lines
        time.sleep(0.01)
    arrival, end = lines[-2:] if "t_ns" in lines[-2] else lines[-1:-3:-1]
    assert end["answer_t0_ns"] == arrival["t_ns"] < end["first_sent_ns"] == end["last_sent_ns"]
    assert end["prompt_tokens"] == ends[arrivals[0]["t_ns"]]["prompt_tokens"]
    assert end["cached_tokens"] > 0 and end["completed"] is True


def test_log_answers_needs_log_requests() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "anvil_metrics.sim", "--log-answers"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "--log-answers: needs --log-requests FILE" in proc.stderr
