"""`--endpoint completions | responses | embeddings | messages` against the simulator: what it
received, each request's stamps against its own (`--stamp-send`), and the bad values.

The simulator logs every request (`--log-requests`: path, `max_tokens` or
`max_output_tokens`, the `prompt`'s or each input message's digest, `previous_response_id`).
A completions or Responses stream's stamps are judged by the rule of a chat stream's
(tests/sendstamps.py: never before its bytes were readable, never later than the run's own
loop lag allows); an embeddings answer, which is one write, by its send stamp and the
moment the request reached the server (`anvil-t0-ns`): the client's start is before it, its
end after the send, and the server held it for the prefill it planned.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario
from sendstamps import lag_bounds_ms, readable_ns
from simfork import start_simulator

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "endpoints"
requests = 24
warmup_requests = 2
concurrency = 4
max_tokens = 12
context_tokens = 2048
max_context_tokens = 4096
{extra}
[context_distribution]
512 = 1
2000 = 1

[request]
endpoint = "{endpoint}"
"""


def received(log: Path, path: str) -> list[dict]:
    return [r for r in map(orjson.loads, log.read_bytes().splitlines()) if r["path"] == path]


def run(tmp_path: Path, text: str, sim_args: list[str], *flags: str
        ) -> tuple[Path, dict, Path, str]:
    """One run of scenario `text` against a simulator logging to `log`: (benchmark.json,
    its document, the log, the CLI's output)."""
    log = tmp_path / "requests.log"
    scenario = write_scenario(tmp_path / "s.toml", text)
    with start_simulator([*sim_args, "--log-requests", str(log)]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir",
                     str(tmp_path / "r"), "--no-server-metrics", *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bench = result_path(proc)
    return bench, load_json(bench), log, proc.stdout


def stamped_as_sent(bench: Path, doc: dict, count: int) -> list[dict]:
    """The raw records (`count` of them), each stream's stamps judged against the
    simulator's send stamps (tests/sendstamps.py); then `anvil verify` passes."""
    _, worst_ms = lag_bounds_ms(doc)
    records = [r for r in raw_lines(bench.parent) if r.get("type") == "request"]
    assert len(records) == count
    for rec in records:
        for stamp, readable in readable_ns(rec).items():
            late_ms = (rec[stamp] - readable) / 1e6
            assert 0 <= late_ms <= worst_ms, (stamp, late_ms, worst_ms)
        assert rec["start_ns"] <= rec["extra"]["server"]["t0_ns"]
    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    return records


@pytest.mark.parametrize("ids", [False, True], ids=["text", "token-ids-on-2-workers"])
def test_completions_are_sized_and_stamped_as_the_server_saw_them(tmp_path: Path,
                                                                  ids: bool) -> None:
    # token ids: sent by two worker processes, each asking the server for the same ids
    bench, doc, log, _ = run(tmp_path, SCENARIO.format(extra="", endpoint="completions"),
                             ["--stamp-send", "--prefill-ms", "20", "--interval-ms", "4"],
                             *(["--prompt-ids", "--processes", "2"] if ids else []))
    assert doc["endpoint"] == "completions" and doc["completed"] == 24
    assert doc.get("prompt_ids", False) is ids
    loaded = [r for r in received(log, "/v1/completions") if r["max_tokens"] == 12]
    assert len(loaded) == 26  # 24 measured and 2 warm-ups, not the sizing probes
    assert all(r["messages"] is None and (r["prompt"][0] == "ids") is ids for r in loaded)
    if ids:  # exactly the planned count of ids, no two requests alike
        assert {r["prompt"][1] for r in loaded} == {512, 2000}
        assert len({r["prompt"][2] for r in loaded}) == 26
    for row in doc["request_timings"]:  # sized in the server's raw count, no chat template
        assert row["output_tokens"] == 12 and row["content_chunks"] == 12
        planned = row["planned_context_tokens"]
        assert planned in (512, 2000)
        assert abs(row["prompt_tokens"] - planned) <= (0 if ids else 0.005 * planned), row
    assert doc["prompt_calibration"]["method"] == "tokenize"
    stamped_as_sent(bench, doc, 26)
    assert "POST     completions " in (bench.parent / "locust.log").read_text()


def _cut_at_12(doc: dict, reasoning_tokens: int | None) -> None:
    """Every row: 3 reasoning chunks, then content cut at 12 output tokens (the server's
    reasoning count as given), its prompt within 0.5 % of the plan, the first content no
    sooner than the first output (it may arrive in the same read as the reasoning)."""
    for row in doc["request_timings"]:
        assert (row["output_tokens"], row["reasoning_tokens"], row["reasoning_chunks"],
                row["content_chunks"]) == (12, reasoning_tokens, 3, 9)
        assert abs(row["prompt_tokens"] - row["planned_context_tokens"]) <= 0.005 * row[
            "planned_context_tokens"], row
        assert row["ttft_ms"] >= row["time_to_first_output_ms"] > 0


def test_responses_are_streamed_sized_and_stamped_as_the_server_saw_them(tmp_path: Path
                                                                         ) -> None:
    bench, doc, log, _ = run(tmp_path, SCENARIO.format(
        extra='[serve_flags]\nreasoning_effort = "low"\n', endpoint="responses"),
        ["--stamp-send", "--prefill-ms", "20", "--interval-ms", "4", "--reasoning-tokens", "3"])
    assert doc["endpoint"] == "responses" and doc["completed"] == 24
    loaded = received(log, "/v1/responses")
    assert len(loaded) == 26  # 24 measured and 2 warm-ups; the sizing counted chat prompts
    assert all(r["max_tokens"] == 12 and r["messages"] is None and r["input"][-1][0] == "user"
               and r["previous_response_id"] is None for r in loaded)
    _cut_at_12(doc, reasoning_tokens=3)  # 3 reasoning tokens, then content cut at 12
    assert doc["prompt_calibration"]["method"] == "tokenize"
    records = stamped_as_sent(bench, doc, 26)
    assert all(r["finish_reason"] == "length" for r in records)
    assert "POST     responses " in (bench.parent / "locust.log").read_text()


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "2-workers"])
def test_messages_are_streamed_sized_and_stamped_as_the_server_saw_them(tmp_path: Path,
                                                                        workers: int) -> None:
    text = SCENARIO.format(extra='[serve_flags]\nreasoning_effort = "low"\n',
                           endpoint='messages"\nsystem_prompt = "be brief')
    bench, doc, log, _ = run(tmp_path, text, ["--stamp-send", "--prefill-ms", "20",
                                              "--interval-ms", "4", "--reasoning-tokens", "3"],
                             *(["--processes", "2"] if workers > 1 else []))
    assert doc["endpoint"] == "messages" and doc["completed"] == 24
    loaded = received(log, "/v1/messages")
    assert len(loaded) == 26  # 24 measured and 2 warm-ups; the sizing counted chat prompts
    # the system prompt on top, the messages after it: the user's
    assert all(r["max_tokens"] == 12 and r["system"] == [8, zlib.crc32(b"be brief")]
               and [m[0] for m in r["messages"]] == ["user"]
               and r["headers"]["anthropic-version"] == "2023-06-01" for r in loaded)
    # 3 thinking tokens, then text cut at 12 (the Messages API reports no reasoning count:
    # null, not 0)
    _cut_at_12(doc, reasoning_tokens=None)
    assert doc["prompt_calibration"]["method"] == "tokenize"
    records = stamped_as_sent(bench, doc, 26)
    assert all(r["finish_reason"] == "length" for r in records)
    assert "POST     messages " in (bench.parent / "locust.log").read_text()


def test_a_messages_conversation_counts_its_cache_hits_in_the_prompt(tmp_path: Path) -> None:
    text = SCENARIO.format(extra="", endpoint="messages").replace(
        "[context_distribution]\n512 = 1\n2000 = 1\n", "")
    bench, doc, log, _ = run(tmp_path, text, ["--prefill-ms", "5", "--interval-ms", "1",
                                              "--prefix-cache"], "--conversation",
                             "conversations=4,turns=3,turn_tokens=64,system_prompt_tokens=32")
    assert doc["completed"] == 12
    turns = [r for r in received(log, "/v1/messages") if r["session"] is not None]
    assert len(turns) == 12 and all(r["system"] is not None for r in turns)
    for row in doc["request_timings"]:  # input_tokens + cache_read_input_tokens
        if row["turn"] > 1:
            assert row["prompt_tokens"] > row["history_tokens"] > 0, row
            assert row["cached_tokens"] >= row["history_tokens"] - 16, row
    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_conversation_continues_by_previous_response_id(tmp_path: Path) -> None:
    text = SCENARIO.format(extra="", endpoint="responses").replace(
        "[context_distribution]\n512 = 1\n2000 = 1\n", "")
    bench, doc, log, _ = run(tmp_path, text, ["--prefill-ms", "5", "--interval-ms", "1",
                                              "--prefix-cache"], "--conversation",
                             "conversations=4,turns=3,turn_tokens=64,previous_response_id=true")
    assert doc["completed"] == 12 and doc["conversation"]["plan"]["previous_response_id"]
    by_session: dict[str | None, list[dict]] = {}
    for r in received(log, "/v1/responses"):
        by_session.setdefault(r["session"], []).append(r)
    assert len(by_session.pop(None)) == 2  # the warm-ups: single requests
    assert len(by_session) == 4
    ids = set()
    for turns in by_session.values():
        assert len(turns) == 3 and turns[0]["previous_response_id"] is None
        for later in turns[1:]:  # its new message only, after the last answer's id
            assert len(later["input"]) == 1 and later["input"][0][0] == "user"
            assert later["previous_response_id"].startswith("resp_")
            ids.add(later["previous_response_id"])
    assert len(ids) == 8  # each turn continues its own answer
    # the server continued each stored response: its count of a later turn's prompt holds
    # the whole history (an unknown id would have been a 404), and its cache served it
    for row in doc["request_timings"]:
        if row["turn"] > 1:
            assert row["prompt_tokens"] > row["history_tokens"] > 0, row
            assert row["cached_tokens"] >= row["history_tokens"] - 16, row
    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_embeddings_are_timed_against_the_servers_receipt_and_send(tmp_path: Path) -> None:
    bench, doc, log, out = run(tmp_path, SCENARIO.format(extra="", endpoint="embeddings"),
                               ["--stamp-send", "--prefill-ms", "15",
                                "--prefill-ms-per-token", "0.01"])
    assert doc["endpoint"] == "embeddings" and doc["completed"] == 24
    loaded = [r for r in received(log, "/v1/embeddings") if len(r["input"]) == 1
              and r["input"][0][0] > 1000]  # the load's texts, not the sizing's "hello"
    assert len(loaded) == 26 and all(r["max_tokens"] is None for r in loaded)

    m = doc["metrics"]
    assert m["ttft_samples"] == 0 and m["ttft_p50_ms"] is None and m["e2e_p50_ms"] > 15
    assert m["input_throughput_tok_s"] == m["prompt_tokens"] / (doc["wall_clock_ms"] / 1000)
    for row in doc["request_timings"]:
        assert row["time_to_first_output_ms"] is None and row["output_tokens"] == 0
        assert abs(row["prompt_tokens"] - row["planned_context_tokens"]) <= 0.005 * row[
            "planned_context_tokens"], row

    _, worst_ms = lag_bounds_ms(doc)
    records = [r for r in raw_lines(bench.parent) if r.get("type") == "request"]
    prompt = {r["request_index"]: r["prompt_tokens"] for r in doc["request_timings"]}
    for rec in records:
        srv = rec["extra"]["server"]
        assert rec["start_ns"] <= srv["t0_ns"] <= srv["last_sent_ns"] <= rec["end_ns"]
        assert (rec["end_ns"] - srv["last_sent_ns"]) / 1e6 <= worst_ms
        if not rec["warmup"]:  # held for the planned prefill, to the scheduler's tick
            held_ms = (srv["last_sent_ns"] - srv["t0_ns"]) / 1e6
            assert held_ms >= 15 + 0.01 * prompt[rec["request_index"]] - 0.001
    assert "tok/s in" in out
    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.parametrize(("endpoint", "flags", "named"), [
    ("chat", ("--endpoint", "completions", "--conversation", "turns=2,turn_tokens=64"),
     "conversation"),
    # (a second [request] key, after the endpoint's: a system prompt)
    ("completions\"\nsystem_prompt = \"be brief", (), "request.system_prompt"),
    ("chat", ("--endpoint", "rankings"), "--endpoint 'rankings' is not allowed; expected one "
     "of chat, completions, responses, embeddings, messages"),
    ("embeddings", ("--cancel-rate", "0.5", "--cancel-after", "decode"),
     "--cancel-after 'decode': cancel.after = 'decode' is not allowed; use \"prefill\" or a "
     "time in ms with request.endpoint = \"embeddings\""),
    ("chat", ("--endpoint", "embeddings", "--max-tokens", "8", "--conversation",
              "turns=2,turn_tokens=8"), "conversation"),
    ("chat", ("--prompt-ids",), "--prompt-ids: request.prompt_ids = True is not allowed"),
    ("messages", ("--prompt-ids",), "--prompt-ids: request.prompt_ids = True is not allowed"),
    ("chat", ("--endpoint", "messages", "--conversation", "turns=2,turn_tokens=8,"
              "history=fixed"), "conversation.history = 'fixed' is not allowed; use "
     "\"server\" with request.endpoint = \"messages\""),
    ("chat", ("--conversation", "turns=2,turn_tokens=8,previous_response_id=true"),
     "conversation.previous_response_id = True is not allowed; use false unless "
     "request.endpoint = \"responses\""),
])
def test_what_an_endpoint_cannot_do_is_one_line_and_exit_2(
        tmp_path: Path, endpoint: str, flags: tuple, named: str) -> None:
    scenario = write_scenario(tmp_path / "e.toml", SCENARIO.format(extra="",
                                                                   endpoint=endpoint))
    proc = anvil("run", str(scenario), "-H", "http://127.0.0.1:9", "--results-dir",
                 str(tmp_path / "r"), *flags)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
