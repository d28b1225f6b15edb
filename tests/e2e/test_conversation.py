"""Multi-turn conversations end to end: `anvil run scenarios/conversation.toml` at 8 users
against the simulator, which logs what each request carried (`--log-requests`).

What the server received is the truth here: every turn holds all earlier messages of its
conversation in order (the shared system prompt, each user message, each answer as the
server gave it) and one new user message; the session header is one value per
conversation and differs between them; each row's `history_tokens` is the server's count of
its conversation's previous prompt; per-turn TTFT rises with history when the simulator's
prefill grows with the prompt; and `anvil verify` recomputes the `conversation` block (and
names a tampered per-turn figure).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from conftest import REPO, anvil
from simfork import start_simulator

from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

TURNS, USERS = 4, 8
PER_TOKEN_MS = 0.25  # prefill: 5 ms + 0.25 ms per prompt token (~200 ms more at turn 4)
THINK_S = 0.05  # between an answer and the next turn
REQUESTS = 30  # turns: fewer than 8 users x 4, so some conversations are cut by the end


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("conv")
    log = tmp / "requests.log"
    # the shipped example, with a think time and a budget that cuts conversations
    text = (REPO / "scenarios" / "conversation.toml").read_text()
    for old, new in (("think_time = 0 ", f"think_time = {THINK_S} "),
                     ("requests = 32 ", f"requests = {REQUESTS} ")):
        assert old in text
        text = text.replace(old, new)
    scenario = tmp / "conversation.toml"
    scenario.write_text(text)
    with start_simulator(["--prefill-ms", "5", "--prefill-ms-per-token", str(PER_TOKEN_MS),
                          "--interval-ms", "1", "--reasoning-tokens", "0",
                          "--content-tokens", "24", "--max-context", "8192",
                          "--log-requests", str(log)]) as sim:
        # --no-server-metrics: no test reads the server block, and the sampler is a
        # process of its own beside the run (~0.3 CPU-s)
        proc = anvil("run", str(scenario), "-H", sim.url, "-u", str(USERS),
                     "--no-server-metrics", "--results-dir", str(tmp / "res"))
    ok(proc)
    (bench,) = (tmp / "res").glob("benchmark-*/benchmark.json")
    return {"doc": orjson.loads(bench.read_bytes()), "path": bench, "stdout": proc.stdout,
            "log": [orjson.loads(line) for line in log.read_bytes().splitlines()]}


def measured(run: dict) -> list[dict]:
    """The log's lines of conversation turns (sizing and probes carry no session)."""
    return [x for x in run["log"] if x["session"] is not None]


def test_every_turn_carries_its_whole_history_in_order(run: dict) -> None:
    by_session: dict[str, list[list]] = defaultdict(list)
    for line in measured(run):
        by_session[line["session"]].append(line["messages"])
    assert len(by_session) == run["doc"]["conversation"]["conversations"]
    systems = set()
    for session, turns in by_session.items():
        for k, messages in enumerate(turns, start=1):
            roles = [m[0] for m in messages]
            assert roles == ["system"] + ["user", "assistant"] * (k - 1) + ["user"], session
            systems.add(tuple(messages[0]))
            if k > 1:  # the previous turn's messages, then its answer, then a new question
                previous = turns[k - 2]
                assert messages[:len(previous)] == previous, (session, k)
                assert messages[-2][1] > 0  # the answer, as the server gave it
                assert messages[-1] != previous[-1]  # each turn's question is its own
        assert len(turns) <= TURNS
    assert len(systems) == 1  # one system prompt every conversation shares


def test_the_session_header_is_one_per_conversation(run: dict) -> None:
    rows = run["doc"]["request_timings"]
    sessions = [x["session"] for x in measured(run)]
    assert len(sessions) == len(rows) == run["doc"]["requests"]
    conversations = {r["conversation_id"] for r in rows}
    assert len(set(sessions)) == len(conversations) >= USERS
    # the value names the run and the conversation: `{run nonce}-{conversation_id}`
    assert {s.rsplit("-", 1)[1] for s in sessions} == {str(c) for c in conversations}


def test_rows_name_their_turn_and_history(run: dict) -> None:
    rows = run["doc"]["request_timings"]
    by_conv: dict[int, dict[int, dict]] = defaultdict(dict)
    for r in rows:
        by_conv[r["conversation_id"]][r["turn"]] = r
    for turns in by_conv.values():
        assert sorted(turns) == list(range(1, len(turns) + 1))
        assert turns[1]["history_tokens"] is None
        for k in range(2, len(turns) + 1):  # the server's count of the previous prompt
            assert turns[k]["history_tokens"] == turns[k - 1]["prompt_tokens"]
            assert turns[k]["prompt_tokens"] > turns[k - 1]["prompt_tokens"] + 256
    block = run["doc"]["conversation"]
    full = sum(1 for t in by_conv.values() if len(t) == TURNS)
    assert (block["conversations"], block["completed"]) == (len(by_conv), full)
    assert block["cut"] == len(by_conv) - full >= 1  # 30 turns cannot finish 8 x 4
    assert len(rows) == REQUESTS and block["plan"]["think_time"] == THINK_S


def test_each_turn_waits_its_think_time_after_the_answer(run: dict) -> None:
    """From the raw stamps: turn k starts at least THINK_S after turn k - 1 ended, and the
    closed loop's due time is that end plus the think time (the start delay is small)."""
    raw = run["path"].with_name("requests.jsonl")
    recs = [x for x in map(orjson.loads, raw.read_bytes().splitlines())
            if x.get("type") == "request" and "conversation" in (x.get("extra") or {})]
    ends = {(x["extra"]["conversation"], x["extra"]["turn"]): x["end_ns"] for x in recs}
    later = [x for x in recs if x["extra"]["turn"] > 1]
    assert later
    for x in later:
        key = (x["extra"]["conversation"], x["extra"]["turn"] - 1)
        gap_s = (x["start_ns"] - ends[key]) / 1e9
        assert gap_s >= THINK_S, (key, gap_s)
        assert gap_s - x["extra"]["start_delay_ns"] / 1e9 == pytest.approx(THINK_S, abs=2e-3)


def test_the_cli_prints_each_turn(run: dict) -> None:
    block = run["doc"]["conversation"]
    assert (f"conversations: {block['conversations']} ({block['completed']} completed, "
            f"{block['cut']} cut)") in run["stdout"]
    for t in block["turns"]:
        assert f"{t['turn']:>6}{t['requests']:>10}{t['ttft_p50_ms']:>11,.1f}" in run["stdout"]


def test_ttft_rises_with_history(run: dict) -> None:
    turns = run["doc"]["conversation"]["turns"]
    assert [t["turn"] for t in turns] == list(range(1, TURNS + 1))
    prompts = [t["prompt_tokens_mean"] for t in turns]
    assert prompts == sorted(prompts) and prompts[-1] > prompts[0] + 3 * 256
    # the simulator's prefill alone grows by PER_TOKEN_MS per token: turn 4 over turn 1 by
    # at least 3 x 256 x 0.25 = 192 ms; the medians must show at least half of it
    first, last = turns[0]["ttft_p50_ms"], turns[-1]["ttft_p50_ms"]
    assert last - first > 0.5 * PER_TOKEN_MS * (prompts[-1] - prompts[0]), turns


def test_verify_recomputes_the_conversation_block(run: dict) -> None:
    ok(anvil("verify", str(run["path"])))
    doc = orjson.loads(run["path"].read_bytes())
    doc["conversation"]["turns"][1]["ttft_p50_ms"] += 1.0
    doc["conversation"]["completed"] += 1
    problems = verify_benchmark(doc)  # what `anvil verify` prints, in this process
    assert any(p.startswith("conversation.turns[1].ttft_p50_ms") for p in problems)
    assert any(p.startswith("conversation.completed") for p in problems)


@pytest.fixture(scope="module")
def quick_sim() -> Iterator[SimProcess]:
    """A fast simulator without a request log, for the open loop and the flag's budget
    below: neither reads the server's state, only its own run's records and figures (one
    simulator start fewer, ~0.5 CPU-s). The run across workers reads what the server
    received, so it keeps a simulator (and a log) of its own."""
    with start_simulator(["--prefill-ms", "2", "--interval-ms", "1", "--reasoning-tokens",
                          "0", "--content-tokens", "8", "--max-context", "8192"]) as sim:
        yield sim


def _raw_turns(bench: Path) -> list[dict]:
    raw = map(orjson.loads, bench.with_name("requests.jsonl").read_bytes().splitlines())
    return [x for x in raw if x.get("type") == "request" and not x.get("warmup")]


def _check_open_loop(recs: list[dict], rate: float, think_s: float) -> None:
    """Conversation c's first turn falls due at the constant schedule's offset of its
    arrival (its rank among first turns) to the nanosecond, on the schedule's origin; each
    later turn falls due `think_s` after its previous turn's end, moved by the wait for its
    ticket (the master's reply across processes; tens of µs in one), and is sent after."""
    key = [(x["extra"]["conversation"], x["extra"]["turn"]) for x in recs]
    due = {k: x["start_ns"] - x["extra"]["start_delay_ns"] for k, x in zip(key, recs, strict=True)}
    starts = {k: x["start_ns"] for k, x in zip(key, recs, strict=True)}
    ends = {k: x["end_ns"] for k, x in zip(key, recs, strict=True)}
    firsts = sorted(due[k] for k in due if k[1] == 1)
    gap_ns = round(1e9 / rate)
    assert len(firsts) >= 3
    assert [d - firsts[0] for d in firsts] == [k * gap_ns for k in range(len(firsts))]
    later = [k for k in due if k[1] > 1]
    assert later
    waits = []
    for c, t in later:
        waits.append(due[(c, t)] - ends[(c, t - 1)] - round(think_s * 1e9))
        assert waits[-1] >= 0 and starts[(c, t)] >= due[(c, t)], ((c, t), waits[-1])
    print(f"\nfollow-ups: ticket wait max {max(waits) / 1e6:.3f} ms over {len(waits)}")


def test_an_open_loop_schedules_conversation_starts(quick_sim: SimProcess, tmp_path: Path
                                                    ) -> None:
    """`--rate` with a `[conversation]`: the schedule's arrivals are conversation starts,
    each later turn follows its think time after the previous answer; the load block's
    achieved rate counts first turns, as the offered rate counts conversations; verify
    recomputes the document."""
    rate, think_s = 20.0, 0.03
    text = (REPO / "scenarios" / "conversation.toml").read_text()
    assert "think_time = 0 " in text
    scenario = tmp_path / "open.toml"
    scenario.write_text(text.replace("think_time = 0 ", f"think_time = {think_s} "))
    proc = anvil("run", str(scenario), "-H", quick_sim.url, "-u", "16",
                 "--rate", str(rate), "--arrival", "constant", "--requests", "24",
                 "--no-server-metrics", "--results-dir", str(tmp_path / "res"))
    ok(proc)
    (bench,) = (tmp_path / "res").glob("benchmark-*/benchmark.json")
    doc = orjson.loads(bench.read_bytes())
    assert verify_benchmark(doc) == []
    recs = _raw_turns(bench)
    assert len(recs) == 24
    _check_open_loop(recs, rate, think_s)
    load = doc["load"]
    firsts = sorted(x["start_ns"] for x in recs if x["extra"]["turn"] == 1)
    assert load["offered_rate_rps"] == rate and load["arrival"] == "constant"
    assert load["achieved_rate_rps"] == pytest.approx(
        (len(firsts) - 1) / ((firsts[-1] - firsts[0]) / 1e9), rel=1e-9)
    assert load["schedule_lag_ms"]["p50"] is not None


def test_conversations_across_a_master_and_two_workers(tmp_path: Path) -> None:
    """`--processes 2` in an open loop: each worker's users hold their conversations
    (numbered by the master's request indices, so unique), the master's schedule gives
    their starts and its budget their later turns, their turns carry the whole history in
    order, and the master's document has the conversation block verify recomputes."""
    log = tmp_path / "received.jsonl"
    with start_simulator(["--prefill-ms", "2", "--interval-ms", "1", "--reasoning-tokens",
                          "0", "--content-tokens", "8", "--max-context", "8192",
                          "--log-requests", str(log)]) as sim:
        # a budget of 12 conversations of 4 turns (the master reads from each record
        # whether its conversation is over): each worker's 4 users ask for the first ones
        proc = anvil("run", "scenarios/conversation.toml", "-H", sim.url, "-u", "8",
                     "--conversation", "conversations=12", "--processes", "2",
                     "--no-server-metrics", "--rate", "20", "--arrival", "constant",
                     "--results-dir", str(tmp_path / "res"))
    ok(proc)
    (bench,) = (tmp_path / "res").glob("benchmark-*/benchmark.json")
    doc = orjson.loads(bench.read_bytes())
    assert verify_benchmark(doc) == []
    recs = _raw_turns(bench)
    assert len({x.get("worker") for x in recs}) == 2
    block = doc["conversation"]
    assert (block["conversations"], block["completed"], doc["requests"]) == (12, 12, 48)
    assert block["plan"]["conversations"] == 12 and doc["load"]["mode"] == "budget"
    # first turns on the master's schedule (each worker's stamps on its own clock: one
    # kernel here, so the same); later turns after the master's reply to a follow-up
    _check_open_loop(recs, 20.0, 0.0)
    by_session: dict[str, list[list]] = defaultdict(list)
    for line in map(orjson.loads, log.read_bytes().splitlines()):
        if line["session"] is not None:
            by_session[line["session"]].append(line["messages"])
    assert len(by_session) == doc["conversation"]["conversations"] >= 4
    for turns in by_session.values():
        for k in range(1, len(turns)):
            assert turns[k][:len(turns[k - 1])] == turns[k - 1]
            assert [m[0] for m in turns[k][len(turns[k - 1]):]] == ["assistant", "user"]


def test_a_budget_of_conversations_from_the_flag_alone(quick_sim: SimProcess,
                                                       tmp_path: Path) -> None:
    """A single-turn scenario made multi-turn by `--conversation turns=3,turn_tokens=64,
    conversations=5` at 2 users, closed loop: the run ends after 5 conversations, each with
    its 3 turns (15 requests, none cut; the flag's budget replaces the scenario's request
    count), and verify recomputes the document."""
    proc = anvil("run", "scenarios/smoke.toml", "-H", quick_sim.url, "-u", "2", "--max-tokens",
                 "16", "--conversation", "turns=3,turn_tokens=64,conversations=5",
                 "--no-server-metrics", "--results-dir", str(tmp_path / "res"))
    ok(proc)
    (bench,) = (tmp_path / "res").glob("benchmark-*/benchmark.json")
    doc = orjson.loads(bench.read_bytes())
    assert verify_benchmark(doc) == []
    block = doc["conversation"]
    assert (block["conversations"], block["completed"], block["cut"]) == (5, 5, 0)
    assert doc["requests"] == doc["completed"] == 15
    assert [t["requests"] for t in block["turns"]] == [5, 5, 5]
    assert "conversations: 5 (5 completed, 0 cut)" in proc.stdout
