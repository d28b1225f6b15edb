"""Prompts from dataset files end to end against the simulator, which logs what it received
(`--log-requests`: each message's role, length and CRC-32).

- a JSONL of prompts, single-turn: request k carried entry k mod n, its size is the
  server's count (`planned_context_tokens` null), and `anvil verify` passes;
- a ShareGPT file, multi-turn (`scenarios/conversation.toml`): each conversation sends its
  entry's human turns in order, the server's answers between, one session per conversation;
- a malformed entry: one line naming the file, where and the field, exit 2, no load.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from conftest import anvil
from simfork import start_simulator

pytestmark = pytest.mark.e2e

PROMPTS = [f"Question {i}: what is {i} times {i + 1}, and why?" for i in range(5)]
SHAREGPT = [{"conversations": [{"from": "human", "value": f"Conversation {c}, question {k}."}
                               if j % 2 == 0 else {"from": "gpt", "value": "An old answer."}
                               for j, k in enumerate([1, 1, 2, 2, 3][:2 * c + 1])]}
            for c in (1, 2)]  # entry 0: two questions, entry 1: three (old answers between)
SIM = ["--prefill-ms", "2", "--interval-ms", "1", "--reasoning-tokens", "0",
       "--content-tokens", "6", "--max-context", "8192"]


def digest(text: str) -> list:
    return [len(text), zlib.crc32(text.encode())]


def run(tmp_path: Path, scenario: str, dataset: Path, *flags: str) -> tuple[dict, list]:
    log = tmp_path / "received.jsonl"
    with start_simulator([*SIM, "--log-requests", str(log)]) as sim:
        proc = anvil("run", scenario, "--dataset", str(dataset), "-H", sim.url,
                     "--no-server-metrics", "--results-dir", str(tmp_path / "res"), *flags)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (bench,) = (tmp_path / "res").glob("benchmark-*/benchmark.json")
    assert anvil("verify", str(bench)).returncode == 0
    received = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    return orjson.loads(bench.read_bytes()), received


def test_single_turn_prompts_are_the_files_in_order(tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_bytes(b"".join(orjson.dumps({"prompt": p}) + b"\n" for p in PROMPTS))
    doc, received = run(tmp_path, "scenarios/smoke.toml", data, "-u", "1", "--requests", "7",
                        "--warmup-requests", "0")
    assert doc["dataset"] == {"file": "prompts.jsonl", "format": None, "entries": 5}
    rows = sorted(doc["request_timings"], key=lambda r: r["request_index"])
    assert len(rows) == 7 and all(r["planned_context_tokens"] is None for r in rows)
    assert all(r["prompt_tokens"] > 0 for r in rows) and doc["context_distribution"] is None
    sent = [x["messages"] for x in received if x["messages"] and x["messages"][-1][1] in
            {len(p) for p in PROMPTS}]
    # one user after the other, one request at a time: entry k mod 5
    assert [m[-1][1:] for m in sent[-7:]] == [digest(PROMPTS[k % 5]) for k in range(7)]


def test_sharegpt_conversations_send_their_human_turns_in_order(tmp_path: Path) -> None:
    data = tmp_path / "sharegpt.json"
    data.write_bytes(orjson.dumps(SHAREGPT))
    doc, received = run(tmp_path, "scenarios/conversation.toml", data, "-u", "2",
                        "--requests", "8")
    by_session: dict[str, list] = defaultdict(list)
    for x in received:
        if x["session"] is not None:
            by_session[x["session"]].append(x["messages"])
    assert len(by_session) == doc["conversation"]["conversations"] >= 2
    questions = [[m["value"] for m in e["conversations"] if m["from"] == "human"]
                 for e in SHAREGPT]
    for session, turns in by_session.items():
        conv = int(session.rsplit("-", 1)[1])
        mine = questions[conv % 2]
        assert len(turns) <= len(mine)
        for k, messages in enumerate(turns, start=1):
            users = [m for m in messages if m[0] == "user"]
            assert [m[1:] for m in users] == [digest(q) for q in mine[:k]], (session, k)
            assert [m[0] for m in messages] == ["user", "assistant"] * (k - 1) + ["user"]
    assert all(r["planned_context_tokens"] is None for r in doc["request_timings"])


def test_a_malformed_dataset_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"prompt": "fine"}\n{"prompt": ["not", "text"]}\n')
    proc = anvil("run", "scenarios/smoke.toml", "--dataset", str(data), "-H",
                 "http://127.0.0.1:9", "--results-dir", str(tmp_path / "res"))
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert "bad.jsonl:2: prompt = ['not', 'text'] is not allowed; use a string" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "res").exists()
