"""Agent jobs replayed end to end: `anvil run --trace` of generated jobs (`agentgen.py`:
sub-agents joined and in the background, tool waits, shared `hash_ids`) against the
simulator with its prefix cache on, 4 jobs at once.

The truth each figure is held to: the trace itself. Every job's every request is there,
once, with its job fields; each prompt is its turn's `in` tokens as the server counted it;
from the raw stamps, each sub-agent's first request starts after its spawn turn's answer
ended, each joined parent turn after all its children's last answers, and each tool wait
slept is at least its recorded time ÷ `--tool-speed`; `anvil verify` recomputes the
document; by one process and by `--processes 2` (each job on one worker). An open loop
of job starts, and the refusals of a request trace's flags with agent jobs.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from agentgen import agent_jobs, write_agent_jsonl
from conftest import anvil
from simfork import start_simulator

from anvil_metrics.load.agentjob import Job
from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e

JOBS, AGENTS, SPEED = 10, 4, 2.0


@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "processes-2"])
def replay(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The replay by one Locust process, and by a master with two workers (each job and
    its sub-agents on one worker; the master's budget counts jobs)."""
    tmp = tmp_path_factory.mktemp("agents")
    jobs = agent_jobs(JOBS, seed=3)
    trace = write_agent_jsonl(tmp / "jobs.jsonl", jobs)
    with start_simulator(["--prefill-ms", "1", "--interval-ms", "1", "--reasoning-tokens",
                          "0", "--max-context", "32768", "--prefix-cache",
                          "--prefix-cache-block", "64"]) as sim:
        proc = anvil("run", "scenarios/smoke.toml", "--trace", str(trace), "-H", sim.url,
                     "--agents", str(AGENTS), "--tool-speed", str(SPEED),
                     "--processes", str(request.param), "--no-server-metrics",
                     "--results-dir", str(tmp / "res"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (bench,) = (tmp / "res").glob("benchmark-*/benchmark.json")
    lines = list(map(orjson.loads, bench.with_name("requests.jsonl").read_bytes().splitlines()))
    raw = [x for x in lines if x.get("type") == "request"]
    return {"doc": orjson.loads(bench.read_bytes()), "path": bench, "jobs": jobs,
            "raw": raw, "params": lines[0]["params"], "stdout": proc.stdout, "trace": trace,
            "tmp": tmp, "processes": request.param}


def test_every_job_every_request_once_with_its_fields_and_exact_sizes(replay: dict) -> None:
    doc, jobs = replay["doc"], replay["jobs"]
    assert verify_benchmark(doc) == []
    assert "10 jobs" in replay["stdout"] and "4 at once" in replay["stdout"]
    rows = doc["request_timings"]
    assert len(rows) == sum(j.requests for j in jobs)
    template = replay["params"]["prompt_sizing"]["template_tokens"]
    assert template > 0
    seen = set()
    for r in rows:
        assert all(r[k] is not None for k in ("job_id", "session_id", "turn", "depth",
                                              "tool_wait_ms")), r
        job: Job = jobs[r["job_id"]]  # each job once: the run's job n is the trace's n
        s = job.sessions[r["session_id"]]
        assert r["depth"] == s.depth
        assert r["parent_session_id"] == (None if s.parent_id is None else [
            x.id for x in job.sessions].index(s.parent_id))
        turn = s.turns[r["turn"] - 1]
        # exact, unless smaller than the chat template's own tokens and one word
        assert r["planned_context_tokens"] == turn.input_tokens
        assert r["prompt_tokens"] == max(turn.input_tokens, template + 1)
        assert r["output_tokens"] == turn.output_tokens
        seen.add((r["job_id"], r["session_id"], r["turn"]))
    assert len(seen) == len(rows)  # none twice
    if replay["processes"] == 2:  # a job and its sub-agents on one worker; both used
        worker = {(x["extra"]["job"]): set() for x in replay["raw"]}
        for x in replay["raw"]:
            worker[x["extra"]["job"]].add(x["worker"])
        assert all(len(w) == 1 for w in worker.values()), worker
        assert len({x["worker"] for x in replay["raw"]}) == 2
    agent = replay["params"]["agent"]
    assert agent["job_ids"] == [j.id for j in jobs] and agent["jobs"] == JOBS
    assert agent["job_requests"] == [j.requests for j in jobs]


def test_spawn_join_and_tool_waits_hold_on_the_raw_stamps(replay: dict) -> None:
    jobs: list[Job] = replay["jobs"]
    at: dict[tuple[int, int, int], dict] = {}  # (job, session, turn from 1) → record
    for x in replay["raw"]:
        e = x["extra"]
        at[e["job"], e["session"], e["turn"]] = x
    children = defaultdict(list)
    checked = {"spawn": 0, "join": 0, "tool": 0}
    for n, job in enumerate(jobs):
        place = {s.id: i for i, s in enumerate(job.sessions)}
        for s in job.sessions:
            first = at[n, place[s.id], 1]
            if s.parent_id is not None and s.spawn_after_turn is not None:
                spawn = at[n, place[s.parent_id], s.spawn_after_turn + 1]
                assert first["start_ns"] >= spawn["end_ns"], (job.id, s.id)
                checked["spawn"] += 1
            if s.join_before_turn is not None:
                children[n, place[s.parent_id], s.join_before_turn + 1].append(
                    at[n, place[s.id], len(s.turns)])
            for k, turn in enumerate(s.turns):
                x = at[n, place[s.id], k + 1]
                if turn.tool_wait_ms:
                    slept_ms = x["extra"]["tool_wait_ns"] / 1e6
                    assert slept_ms >= turn.tool_wait_ms / SPEED - 1e-6, (job.id, s.id, k)
                    before = at[n, place[s.id], k]
                    assert x["start_ns"] - before["end_ns"] >= turn.tool_wait_ms / SPEED * 1e6
                    checked["tool"] += 1
    for key, lasts in children.items():
        assert at[key]["start_ns"] >= max(c["end_ns"] for c in lasts), key
        checked["join"] += 1
    assert min(checked.values()) > 0, checked  # the trace has each kind


def test_open_loop_job_starts_and_a_budget_past_the_traces_jobs(replay: dict) -> None:
    """(Once, beside the one-process replay.) `--rate`: each job's first request falls due
    on the schedule (its due time, start − start delay, is the job's; the rest follow);
    `--jobs 13` of 10: jobs 10-12 replay the trace's 0-2 again with blocks of their own."""
    if replay["processes"] != 1:
        pytest.skip("run once")
    jobs, res = replay["jobs"], replay["tmp"] / "open"
    with start_simulator(["--prefill-ms", "1", "--interval-ms", "1", "--reasoning-tokens",
                          "0", "--max-context", "32768"]) as sim:
        proc = anvil("run", "scenarios/smoke.toml", "--trace", str(replay["trace"]), "-H",
                     sim.url, "--rate", "25", "--jobs", "13", "-u", "8", "--max-idle", "0",
                     "--no-server-metrics", "--results-dir", str(res))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "13 jobs" in proc.stdout and "poisson job arrivals at 25/s" in proc.stdout
    (bench,) = res.glob("benchmark-*/benchmark.json")
    doc = orjson.loads(bench.read_bytes())
    assert verify_benchmark(doc) == [] and doc["load"]["arrival"] == "poisson"
    per_job = defaultdict(int)
    for r in doc["request_timings"]:
        per_job[r["job_id"]] += 1
    assert per_job == {n: jobs[n % JOBS].requests for n in range(13)}
    raw = [x for x in map(orjson.loads, bench.with_name("requests.jsonl").read_bytes()
                          .splitlines()) if x.get("type") == "request"]
    firsts = sorted((x for x in raw if x["extra"]["session"] == 0 and x["extra"]["turn"] == 1),
                    key=lambda x: x["extra"]["job"])
    due = [x["start_ns"] - x["extra"]["start_delay_ns"] for x in firsts]
    assert due == sorted(due) and len(set(due)) == 13  # one arrival each, in start order


def test_refused_in_one_line_before_any_load(replay: dict) -> None:
    if replay["processes"] != 1:
        pytest.skip("run once")
    trace, res = str(replay["trace"]), str(replay["tmp"] / "refused")
    for extra, words in ((["--trace-limit", "3"], "trace.limit"),
                         (["--tool-speed", "0"], "--tool-speed")):
        proc = anvil("run", "scenarios/smoke.toml", "--trace", trace, "-H",
                     "http://127.0.0.1:9", *extra, "--results-dir", res, timeout=30)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    assert not Path(res).exists()
    plain = anvil("run", "scenarios/smoke.toml", "--trace", str(Path(__file__)),
                  "--tool-speed", "2", "-H", "http://127.0.0.1:9", "--results-dir", res,
                  timeout=30)
    assert plain.returncode == 2 and "trace.tool_speed" in plain.stderr


def test_the_progress_counts_jobs_by_one_process_and_a_master(replay: dict) -> None:
    """The last progress reading (`progress.json`, what `anvil run` draws) counts the jobs
    as the raw records have them: all done, none in flight, the job latency p50 within the
    live sketch's 1 % of the nearest rank of each job's first start to its last answer's
    end (on a master: from the workers' `anvil_job_end` messages and records)."""
    progress = orjson.loads(replay["path"].with_name("progress.json").read_bytes())
    assert (progress["jobs_planned"], progress["jobs_completed"], progress["jobs_cut"],
            progress["jobs_in_flight"]) == (JOBS, JOBS, 0, 0)
    spans: dict[int, list[int]] = defaultdict(list)
    for r in replay["raw"]:
        if not r["warmup"]:
            spans[r["extra"]["job"]] += [r["start_ns"], r["end_ns"]]
    truth = sorted((max(s) - min(s)) / 1e6 for s in spans.values())
    want = truth[(len(truth) + 1) // 2 - 1]  # nearest rank p50: the ceil(n / 2)-th
    assert abs(progress["job_latency_p50_ms"] - want) <= 0.01 * want + 1.0
