"""Item 6's proof against known truth: what a replay of agent jobs must show in the
simulator's own request log, as checks that each return the violations they find (a test
asserts the list is empty; a unit test plants one and sees it named).

Why from the server's log, not the client's rows: the client could be wrong about when it
sent what; the simulator (`anvil sim --log-requests FILE --log-answers`, `sim/requestlog.py`)
records each request's arrival, its job, session and turn (the replay's `X-Anvil-Job`,
`X-Anvil-Session`, `X-Anvil-Turn` headers), when it wrote its answer's first and last bytes,
the prompt tokens it counted and the prefix-cache hits it reported. Every stamp is the
simulator's `time.monotonic_ns()`, the clock of a client's `perf_counter_ns` on the same
host, so a row's start and end compare with them directly.

The checks (`logged_turns` reads the log once; each check takes the jobs, `agentjob.Job`,
and its result):

- (a) `check_spawns`: every child's first request arrived after its spawn turn's answer
  ended (a child spawned with its parent's start is not ordered);
- (b) `check_joins`: every joined parent turn arrived after every child joined there sent
  its last answer;
- (c) `check_tool_waits`: each tool wait (the answer before a `tool_result` turn to that
  turn's arrival) is within `tol_ms` of its recorded duration / speed, capped by the
  longest wait (an unrecorded duration is not checked); a turn that also joins children
  is due at the later of that and their last answers (the replay waits the tool, then
  the join);
- (d) `check_prompt_sizes`: the simulator's prompt tokens equal the turn's `input_tokens`;
- (e) `check_reuse`: the simulator's prefix-cache hits against `agentstats.job_figures`'s
  expected reuse, within `tol_points` percentage points, overall and (`per_job`) per job.
  Overall is item 6's figure. Per job is exact too except where jobs race: a request that
  arrives while another's equal prefix is still in prefill misses it (as on a real server:
  no in-batch sharing), so at `--agents 16` the first wave's jobs miss the trace's global
  prefix that `agentstats` (jobs one after another) counts; `per_job=False` then;
- (f) `job_latency_truth`: each job's latency (its first request's arrival to its last
  answer's end) from the log, and `check_job_latency` against a run's own figures
  (`reported_job_latency` reads them from `benchmark.json`'s rows: a job's first row's
  start to its last row's end, from `start_offset_ms` and `e2e_ms`).

A row and a log line name a turn differently, both on purpose: a row's `job_id` is the
run's job number and its `session_id` the session's place in the job, its `turn` counts
from 1 (as a conversation's rows do); the log has the headers, the trace's job and session
ids and `X-Anvil-Turn` from 0 (the index into the session's turns). `row_key` joins a row
to its log key.

The prompt layout under which the simulator's prefix cache counts exactly what `agentstats`
expects (`block_prompt`; `tests/unit/sim/test_prefixcache_agents.py` holds it over 200
jobs): one user message whose blocks are the trace's, with the chat template's tokens
inside them (the first block less the template's opening, the last block its remainder
less the closing), so every `hash_id` is one `block_size` block of the templated prompt as
the server counts it; the simulator runs with `--prefix-cache-block` equal to the trace's
block size and `--prefix-cache-tokens` at least the trace's summed input tokens (nothing is
evicted: the unbounded cache `agentstats` assumes). Each last block must hold the template's
closing and one token (`fit_job` lengthens the generator's shorter ones; a real trace's
counts include the template, so its blocks do).

Every check names what it could not find in the log (a turn never received or never
answered) as a violation, so a check never passes on a log that lacks its evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import numpy as np

from anvil_metrics.load.agentjob import Job, Session, Turn
from anvil_metrics.load.agentstats import job_figures
from anvil_metrics.prep.traceprompts import block_text
from anvil_metrics.sim.tokenizer import prompt_token_ids

BLOCK_SEED = 7  # the seed of every block's words

Key = tuple[str, str, int]  # (job id, session id, turn index in its session)


@dataclass(frozen=True, slots=True)
class Logged:
    """One agent request as the simulator logged it (monotonic ns; module docstring)."""

    arrival_ns: int
    first_sent_ns: int | None = None
    last_sent_ns: int | None = None  # None: no answer line (never answered)
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completed: bool = False


@dataclass(frozen=True, slots=True)
class TruthLog:
    """The log's agent requests by (job, session, turn), and what could not be read."""

    turns: dict[Key, Logged]
    problems: tuple[str, ...]


def logged_turns(lines: Iterable[Mapping[str, Any]]) -> TruthLog:
    """The agent requests of a `--log-requests --log-answers` log's lines (parsed JSON):
    each arrival line that names a job, joined to its answer line by its arrival stamp. A
    request logged twice, or with a turn that is not a whole number, is a problem."""
    arrivals: list[Mapping[str, Any]] = []
    answers: dict[int, Mapping[str, Any]] = {}
    for line in lines:
        if "answer_t0_ns" in line:
            answers[line["answer_t0_ns"]] = line
        elif line.get("anvil_job") is not None:
            arrivals.append(line)
    turns: dict[Key, Logged] = {}
    problems: list[str] = []
    for a in arrivals:
        key = (a["anvil_job"], a["anvil_session"], a["anvil_turn"])
        if not isinstance(key[2], int):
            problems.append(f"{key}: turn header is not a whole number")
            continue
        if key in turns:
            problems.append(f"{_name(key)}: received twice")
            continue
        ans = answers.get(a["t_ns"])
        turns[key] = Logged(a["t_ns"]) if ans is None else Logged(
            a["t_ns"], ans["first_sent_ns"], ans["last_sent_ns"], ans["prompt_tokens"],
            ans["cached_tokens"], ans["completed"])
    return TruthLog(turns, tuple(problems))


def _name(key: Key) -> str:
    return f"job {key[0]} session {key[1]} turn {key[2]}"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


class _Find:
    """Looks turns up, recording each one missing or unanswered as a violation."""

    def __init__(self, log: TruthLog) -> None:
        self.turns = log.turns
        self.out: list[str] = []

    def arrival(self, key: Key) -> int | None:
        got = self.turns.get(key)
        if got is None:
            self.out.append(f"{_name(key)}: not in the log")
            return None
        return got.arrival_ns

    def answered(self, key: Key) -> Logged | None:
        got = self.turns.get(key)
        if got is None or got.last_sent_ns is None or not got.completed:
            self.out.append(f"{_name(key)}: " + ("not in the log" if got is None
                                                  else "its answer did not complete"))
            return None
        return got


    def whole_job(self, job: Job) -> list[Logged] | None:
        """Every turn of `job`, answered; None (and the missing named) if one is not."""
        got = [self.answered((job.id, s.id, k)) for s in job.sessions
               for k in range(len(s.turns))]
        return None if None in got else [g for g in got if g is not None]


def _children(job: Job) -> Iterable[tuple[Session, Session]]:
    by_id = {s.id: s for s in job.sessions}
    for s in job.sessions:
        if s.parent_id is not None:
            yield by_id[s.parent_id], s


def check_spawns(jobs: list[Job], log: TruthLog) -> list[str]:
    """(a): each child's first request arrived after its spawn turn's answer ended."""
    find = _Find(log)
    for job in jobs:
        for parent, child in _children(job):
            if child.spawn_after_turn is None:
                continue
            spawn = find.answered((job.id, parent.id, child.spawn_after_turn))
            first = find.arrival((job.id, child.id, 0))
            if spawn is not None and first is not None and first <= spawn.last_sent_ns:
                find.out.append(
                    f"spawn: {_name((job.id, child.id, 0))} arrived "
                    f"{_ms(spawn.last_sent_ns - first)} before the answer of its spawn "
                    f"turn {child.spawn_after_turn} of session {parent.id} ended")
    return find.out


def check_joins(jobs: list[Job], log: TruthLog) -> list[str]:
    """(b): each joined parent turn arrived after every child joined there answered last."""
    find = _Find(log)
    for job in jobs:
        for parent, child in _children(job):
            if child.join_before_turn is None:
                continue
            last = find.answered((job.id, child.id, len(child.turns) - 1))
            joined = find.arrival((job.id, parent.id, child.join_before_turn))
            if last is not None and joined is not None and joined <= last.last_sent_ns:
                find.out.append(
                    f"join: {_name((job.id, parent.id, child.join_before_turn))} arrived "
                    f"{_ms(last.last_sent_ns - joined)} before child session {child.id}'s "
                    "last answer ended")
    return find.out


@dataclass(frozen=True, slots=True)
class Wait:
    """How long the log shows the client waited before one turn (the previous answer's
    last send to its arrival, ms) against what the replay owes: `want_ms`, its tool time /
    speed (capped) plus its idle time (capped), or the last joined child's answer if later.
    `kind`: "join" when the join is the later, else "tool" (a `tool_result` turn), "idle"
    (an idle gap) or "none" (due at once)."""

    key: Key
    kind: str
    tool: bool  # the turn carries a tool's result
    want_ms: float
    got_ms: float

    @property
    def late_ms(self) -> float:
        return self.got_ms - self.want_ms


def logged_waits(jobs: list[Job], log: TruthLog, speed: float = 1.0,
                 max_wait_ms: float | None = None, max_idle_ms: float | None = 0.0
                 ) -> tuple[list[Wait], list[str]]:
    """Every turn's wait after its session's previous answer (`Wait`), and what the log
    lacks for them. A tool time not recorded is not a wait (skipped); `max_idle_ms` caps
    an idle gap (None: no cap; 0: none replayed)."""
    find = _Find(log)
    out: list[Wait] = []
    for job in jobs:
        for s in job.sessions:
            for k, t in enumerate(s.turns):
                tool = t.input_type == "tool_result"
                if k == 0 or (tool and t.tool_wait_ms is None):
                    continue
                want = (t.tool_wait_ms or 0.0) / speed
                if max_wait_ms is not None:
                    want = min(want, max_wait_ms)
                idle = t.idle_ms or 0.0
                want += idle if max_idle_ms is None else min(idle, max_idle_ms)
                before = find.answered((job.id, s.id, k - 1))
                arrival = find.arrival((job.id, s.id, k))
                joined = [find.answered((job.id, c.id, len(c.turns) - 1))
                          for c in job.children(s.id) if c.join_before_turn == k]
                if before is None or arrival is None or None in joined:
                    continue
                last = max((c.last_sent_ns or 0 for c in joined if c is not None), default=0)
                join_ms = (last - before.last_sent_ns) / 1e6
                kind = ("join" if joined and join_ms > want else "tool" if tool
                        else "idle" if want > 0 else "none")
                out.append(Wait((job.id, s.id, k), kind, tool, max(want, join_ms),
                                (arrival - before.last_sent_ns) / 1e6))
    return out, find.out


def check_tool_waits(jobs: list[Job], log: TruthLog, speed: float = 1.0,
                     max_wait_ms: float | None = None, tol_ms: float = 2.0,
                     late_ms: float | None = None) -> list[str]:
    """(c): each tool wait is its recorded duration / `speed` (capped at `max_wait_ms`;
    None: no cap) within `tol_ms` early and `late_ms` late (None: `tol_ms`)."""
    late = tol_ms if late_ms is None else late_ms
    waits, out = logged_waits(jobs, log, speed, max_wait_ms)
    for w in waits:
        if w.tool and not -tol_ms <= w.late_ms <= late:
            out.append(f"tool wait: {_name(w.key)} waited {w.got_ms:.3f} ms, not "
                       f"{w.want_ms:.3f} ms (± {tol_ms} ms)")
    return out


def check_prompt_sizes(jobs: list[Job], log: TruthLog) -> list[str]:
    """(d): the simulator's count of each prompt equals the turn's input tokens."""
    find = _Find(log)
    for job in jobs:
        for s in job.sessions:
            for k, t in enumerate(s.turns):
                got = find.answered((job.id, s.id, k))
                if got is not None and got.prompt_tokens != t.input_tokens:
                    find.out.append(f"prompt size: {_name((job.id, s.id, k))} was "
                                    f"{got.prompt_tokens} tokens, not {t.input_tokens}")
    return find.out


def check_reuse(jobs: list[Job], log: TruthLog, tol_points: float = 2.0,
                per_job: bool = True) -> list[str]:
    """(e): the simulator's cached over prompt tokens against the expected reuse
    (`agentstats.job_figures`, in percentage points), over all `jobs` and, with `per_job`,
    for each one."""
    find = _Find(log)
    totals = [0, 0, 0, 0]  # cached, prompt (the simulator's); expected cached, input
    for job, fig in zip(jobs, job_figures(jobs), strict=True):
        got = find.whole_job(job)
        if got is None or any(g.cached_tokens is None for g in got):
            find.out.append(f"reuse: job {job.id} has no cache figure for every turn")
            continue
        cached = sum(g.cached_tokens or 0 for g in got)
        prompt = sum(g.prompt_tokens or 0 for g in got)
        for i, v in enumerate((cached, prompt, fig.cached_tokens, fig.input_tokens)):
            totals[i] += v
        if per_job:
            _compare(find.out, f"job {job.id}", cached, prompt, fig.reuse, tol_points)
    if totals[1]:
        _compare(find.out, "all jobs", totals[0], totals[1], totals[2] / totals[3],
                 tol_points)
    return find.out


def _compare(out: list[str], what: str, cached: int, prompt: int, expected: float,
             tol_points: float) -> None:
    got = 100 * cached / prompt
    if abs(got - 100 * expected) > tol_points:
        out.append(f"reuse: {what} hit {got:.2f} % of its prompt tokens in the cache, "
                   f"expected {100 * expected:.2f} % (± {tol_points} points)")


def job_latency_truth(jobs: list[Job], log: TruthLog) -> tuple[dict[str, float], list[str]]:
    """(f): each job's latency in ms, its first request's arrival to its last answer's
    end, from the log; and the violations (turns missing or unanswered)."""
    find = _Find(log)
    out: dict[str, float] = {}
    for job in jobs:
        got = find.whole_job(job)
        if got is not None:
            first = min(g.arrival_ns for g in got)
            last = max(g.last_sent_ns or 0 for g in got)
            out[job.id] = (last - first) / 1e6
    return out, find.out


def row_key(row: Mapping[str, Any], jobs: list[Job]) -> Key:
    """The log's key of a row (module docstring): the trace's job and session ids, and
    the turn from 0 (a row's `turn` counts from 1, `X-Anvil-Turn` from 0)."""
    job = jobs[row["job_id"]]
    return job.id, job.sessions[row["session_id"]].id, row["turn"] - 1


def reported_job_latency(rows: Iterable[Mapping[str, Any]], jobs: list[Job]
                         ) -> dict[str, float]:
    """A run's job latency in ms from `benchmark.json`'s rows, by the trace's job id: a
    job's earliest row start to its latest row end (`start_offset_ms`, `+ e2e_ms`), over
    its rows with both."""
    spans: dict[str, list[float]] = {}
    for r in rows:
        start, e2e = r.get("start_offset_ms"), r.get("e2e_ms")
        if r.get("job_id") is None or start is None or e2e is None:
            continue
        job = row_key(r, jobs)[0]
        span = spans.setdefault(job, [start, start + e2e])
        span[0], span[1] = min(span[0], start), max(span[1], start + e2e)
    return {job: end - start for job, (start, end) in spans.items()}


def check_job_latency(truth: Mapping[str, float], reported: Mapping[str, float | None],
                      tol_ms: float = 1.0) -> list[str]:
    """(f): each job's reported latency within `tol_ms` of the log's truth; a job the
    truth has and the run does not report (or reports as null) is a violation."""
    out = []
    for job, want in truth.items():
        got = reported.get(job)
        if got is None:
            out.append(f"job latency: job {job} is not reported")
        elif abs(got - want) > tol_ms:
            out.append(f"job latency: job {job} reported {got:.3f} ms, the log's truth "
                       f"is {want:.3f} ms (± {tol_ms} ms)")
    return out


@cache
def template_tokens() -> tuple[int, int]:
    """(opening, closing): the simulator's template tokens before and after a one-message
    prompt's text (the generation prompt included)."""
    a, b = (prompt_token_ids([{"role": "user", "content": w}]) for w in ("an", "by"))
    opening = int(np.argmax(a != b))
    return opening, len(a) - opening - 1


def fit_job(job: Job) -> Job:
    """The job with each turn's last block long enough for the template (module
    docstring)."""
    opening, closing = template_tokens()

    def fit(t: Turn) -> Turn:
        n = len(t.hash_ids)
        least = job.block_size * (n - 1) + closing + 1 + (opening if n == 1 else 0)
        return replace(t, input_tokens=max(t.input_tokens, least))
    return replace(job, sessions=tuple(replace(s, turns=tuple(map(fit, s.turns)))
                                       for s in job.sessions))


def block_prompt(t: Turn, block_size: int) -> list[dict[str, str]]:
    """A turn's messages under the module docstring's layout: `t.input_tokens` long by
    the simulator's count, block k the words of id k (the same words wherever it is)."""
    opening, closing = template_tokens()
    n = len(t.hash_ids)
    words = [block_size] * n
    words[0] -= opening
    words[-1] = t.input_tokens - block_size * (n - 1) - closing - (opening if n == 1 else 0)
    text = " ".join(block_text(BLOCK_SEED, h, w) for h, w in zip(t.hash_ids, words,
                                                                   strict=True))
    return [{"role": "user", "content": text}]
