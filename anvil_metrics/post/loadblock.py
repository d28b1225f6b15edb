"""The benchmark's `load` block: how load was offered, and what the run achieved of it.

Why its own block: a latency means little without the load it was measured under, and
closed-loop and open-loop runs fail differently. Closed-loop users at saturation quietly
wait, and latency looks better than it is; an open-loop schedule that outruns its users
sends requests late. So the block says which kind of run it was and, for an open loop,
whether the generator kept up: offered vs achieved rate, how late requests went out after
their due time (`schedule_lag_ms`, from the rows: `anvil verify` recomputes it) and how many
found no free user when they fell due. Members (null where they do not apply):

- `mode`: "budget" (a request count ended the run; a duration, if any, was a time limit),
  "duration", or "until_stopped";
- `arrival`: "closed" (users back to back), "poisson", "gamma", "constant" or "trace" (a
  replayed trace's own timestamps, `load/replay.py`);
- `offered_rate_rps`, `burstiness`: the open-loop plan (`arrivals.ArrivalPlan`);
- `achieved_rate_rps`: `(n − 1) / ((last start − first start) / 1e9)` over the measured
  requests (completed and failed): the rate they were actually written at; in an open
  loop of conversations over their first turns only, the conversation starts the schedule
  gives (a later turn follows its think time, not the schedule), and of agent jobs over
  each job's first request (its start), so offered and achieved count the same thing;
- `duration_s`: the duration asked for; `window_s`: `[first start, last end]` of the
  measured requests, in seconds after the run's header (its `perf_anchor_ns`) — or, with
  `--warmup`/`--cooldown`, the measured window itself: only requests that started in it
  are in the document, and `outside_window: {warmup, cooldown}` (anvil's member) counts
  the others, which stay in `requests.jsonl` (its `"window"` line marks the bounds);
- `schedule_lag_ms`: `{p50, p99, max}` of the rows' `schedule_lag_ms` (open loop; in a
  closed loop the same figure is the client's own delay, `client.start_delay_ms`);
- `waited_for_user`: measured requests that fell due while every user was busy (open loop);
- `cancelled`: measured requests recorded as `cancelled` — stopped by the run's end (a
  duration, Stop, Ctrl-C) after `--stop-timeout`, never the server's failure.

What `anvil verify` can and cannot recompute: `schedule_lag_ms` and `cancelled` follow from
the rows and failures and are recomputed; the members copied from the plan are checked for
consistency with `arrival`; `achieved_rate_rps`, `window_s` and `waited_for_user` come from
the requests' start stamps and flags in `requests.jsonl`, which the document does not hold,
so verify checks their types and bounds only (`anvil postprocess` rebuilds them exactly).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import numpy as np
from msgspec import UNSET, Meta, Struct, UnsetType

from anvil_metrics.fieldtypes import Count, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.post import stats
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent, num
from anvil_metrics.post.derive import Flags, Ints, RowColumns
from anvil_metrics.post.schema import fmt, same

MODES = ("budget", "duration", "until_stopped")
ARRIVAL_KINDS = ("closed", "poisson", "gamma", "constant", "trace")
Positive = Annotated[float, Meta(gt=0)]


class ScheduleLag(Struct, forbid_unknown_fields=True):
    """Nearest-rank figures of the rows' schedule_lag_ms."""

    p50: Annotated[float | None, described("ms", "nearest-rank median schedule lag")]
    p99: Annotated[float | None, described("ms", "nearest-rank 99th percentile schedule "
                                                 "lag")]
    max: Annotated[float | None, described("ms", "the largest schedule lag")]


class OutsideWindow(Struct, forbid_unknown_fields=True):
    """Measured requests that started outside the --warmup/--cooldown window."""

    warmup: Annotated[Count, described("", "measured requests that started in the warm-up "
                                           "window")]
    cooldown: Annotated[Count, described("", "measured requests that started in the "
                                             "cool-down window")]


class Load(Struct, forbid_unknown_fields=True, kw_only=True):
    """How load was offered, and what the run achieved of it (module docstring)."""

    mode: Annotated[Literal[MODES], described(  # type: ignore[valid-type]
        "", '"budget" (a request count ended the run; a duration, if any, was a time '
            'limit), "duration" or "until_stopped"')]
    arrival: Annotated[Literal[ARRIVAL_KINDS], described(  # type: ignore[valid-type]
        "", '"closed" (users back to back) or the open-loop arrival process: "poisson", '
            '"gamma", "constant" or "trace" (a replayed trace\'s own timestamps)')]
    offered_rate_rps: Annotated[Positive | None, described(
        "req/s", "the open-loop schedule's rate; null in a closed loop")]
    achieved_rate_rps: Annotated[Positive | None, described(
        "req/s", "(n − 1) / (last start − first start) over the measured requests, "
                 "completed and failed: the rate they were written at")]
    burstiness: Annotated[Positive | None, described(
        "", "the gamma process's shape (1.0 for poisson); null for closed and constant "
            "arrivals")]
    duration_s: Annotated[Positive | None, described("s", "the duration the run asked for; "
                                                          "null without one")]
    window_s: Annotated[tuple[float, float] | None, described(
        "s", "[first start, last end] of the measured requests, seconds after the run's "
             "header — or the --warmup/--cooldown window itself")]
    schedule_lag_ms: Annotated[ScheduleLag | None, described(
        "ms", "nearest-rank figures of the rows' schedule_lag_ms (open loop; null in a "
              "closed loop, where client.start_delay_ms says it)")]
    waited_for_user: Annotated[Count | None, described(
        "", "measured requests that fell due while every user was busy (open loop; null in "
            "a closed loop)")]
    cancelled: Annotated[Count, described(
        "", "measured requests stopped by the run's end (a duration, Stop, Ctrl-C) after "
            '--stop-timeout: the failures of kind "cancelled"')]
    # anvil's, beyond the spec's list
    outside_window: Annotated[OutsideWindow | None | UnsetType, described(
        "", "{warmup, cooldown}: requests that started outside the measured window (in "
            "requests.jsonl, not in the document); null without one")] = UNSET


def build_load(params: Mapping[str, JsonValue], start_ns: Ints, last_ns: Ints, waited: Flags,
               anchor_ns: int | None, rows: RowColumns, cancelled: int,
               window_ns: tuple[int, int] | None = None,
               outside: Mapping[str, int] | None = None, turn: Ints | None = None
               ) -> JsonObject:
    """The block from the raw header's `params.load` and the measured records (their
    `start_ns`, `last_ns` — end, or start without one — on the master's clock, `waited`
    flags and, in a conversation run, `turn`s (`NULL` for none), numpy columns) and the
    rows; `window_ns`/`outside`: a run with `--warmup`/`--cooldown` windows, and how many
    requests started outside them."""
    plan = params.get("arrivals") if isinstance(params.get("arrivals"), dict) else None
    n = len(start_ns)
    # an open loop's conversations: the schedule's arrivals are their first turns (a record
    # without a turn is none: one the master wrote for a lost worker's request)
    arrivals = (start_ns if turn is None or plan is None else start_ns[turn == 1])
    achieved = None
    if len(arrivals) >= 2:
        span_s = int(arrivals.max() - arrivals.min()) / 1e9
        achieved = (len(arrivals) - 1) / span_s if span_s > 0 else None
    window = None
    if window_ns is not None and isinstance(anchor_ns, int):
        window = [(window_ns[0] - anchor_ns) / 1e9, (window_ns[1] - anchor_ns) / 1e9]
    elif n and isinstance(anchor_ns, int):
        window = [int(start_ns.min() - anchor_ns) / 1e9, int(last_ns.max() - anchor_ns) / 1e9]
    return {
        "mode": params.get("mode"),
        "arrival": plan["arrival"] if plan else "closed",
        "offered_rate_rps": plan["rate_rps"] if plan else None,
        "achieved_rate_rps": achieved,
        "burstiness": plan.get("burstiness") if plan else None,
        "duration_s": params.get("duration_s"),
        "window_s": window,
        "schedule_lag_ms": schedule_lag(rows) if plan else None,
        "waited_for_user": int(np.count_nonzero(waited)) if plan else None,
        "cancelled": cancelled,
        "outside_window": None if outside is None else dict(outside),
    }


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run whose raw header says how load was offered (`params.load`; a raw
    file from before the block has none: ABSENT)."""
    load = inputs.params.get("load")
    if not isinstance(load, dict):
        return ABSENT
    m, doc = inputs.measured, inputs.doc
    cancelled = sum(1 for f in doc["failures"] if f["kind"] == "cancelled")
    turn = None
    if inputs.params.get("conversation"):
        turn = m.column("turn")
    elif inputs.params.get("agent"):  # an agent replay's arrivals are its jobs' starts
        turn = job_starts(m.column("job_id"), m.start_ns)
    return build_load(load, m.start_ns, m.last_ns, m.column("waited") != 0, inputs.anchor_ns,
                      inputs.rows, cancelled, inputs.raw.window_ns, inputs.outside, turn=turn)


def job_starts(job: Ints, start_ns: Ints) -> Ints:
    """1 where a measured record is its agent job's first (the earliest start of its
    `job_id`), else 0: as a conversation's first turns are, the starts an open loop's
    schedule offers (a job's later requests follow its waits, not the schedule)."""
    out = np.zeros(len(job), dtype=np.int64)
    if len(job):
        by = np.lexsort((start_ns, job))
        first = np.r_[True, job[by][1:] != job[by][:-1]]
        out[by[first]] = 1
    return out


def schedule_lag(rows: RowColumns) -> dict[str, float | None] | None:
    """`{p50, p99, max}` (nearest rank) of the rows' `schedule_lag_ms`; None for rows
    without the field (a file written before it)."""
    if "schedule_lag_ms" in rows.absent:
        return None
    lag = rows.floats["schedule_lag_ms"]
    lag = lag[~np.isnan(lag)]
    p50, p99, top = stats.nearest_rank_columns(lag, (50, 99, 100))
    return {"p50": p50, "p99": p99, "max": top}


BEHIND_FRACTION = 0.01  # more of the requests than this waited for a user: warn


def behind(load: Mapping[str, JsonValue] | None, requests: Any) -> str | None:
    """One line when an open-loop schedule outran its users (more than `BEHIND_FRACTION`
    of the requests fell due with every user busy), else None."""
    waited = (load or {}).get("waited_for_user")
    if not waited or not isinstance(requests, int) or waited <= BEHIND_FRACTION * requests:
        return None
    assert load is not None
    lag = load.get("schedule_lag_ms") or {}
    offered, achieved = load.get("offered_rate_rps"), load.get("achieved_rate_rps")
    return (f"the schedule outran the users: {waited} of {requests} requests fell due "
            f"with every user busy and went out late (schedule lag p99 "
            f"{_num(lag.get('p99'))} ms, max {_num(lag.get('max'))} ms; achieved "
            f"{_num(achieved)} of {_num(offered)} requests/s offered); latencies from due "
            "include the wait: add users (-u) or lower --rate")


def _num(v: Any) -> str:
    return num(v, ",.2f")


def _outside(out: Any) -> str:
    if not isinstance(out, dict):
        return ""
    return (f"; left out: {out.get('warmup')} started in the warm-up window, "
            f"{out.get('cooldown')} in the cool-down")


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """What the CLI summary says about the load (nothing for a file without the block)."""
    load = doc.get("load")
    if not isinstance(load, dict):
        return []
    window = load.get("window_s") or [None, None]
    how = {"budget": f"{doc.get('requests')} requests",
           "duration": f"duration {_num(load.get('duration_s'))} s",
           "until_stopped": "until stopped"}.get(str(load.get("mode")), str(load.get("mode")))
    unit = "req/s"
    if load.get("arrival") == "closed":
        offered = f"closed loop, {doc.get('concurrency')} users"
    else:  # an open loop of conversations (agent jobs) offers and counts their starts
        unit = ("conversations/s" if isinstance(doc.get("conversation"), dict) else
                "job starts/s" if isinstance(doc.get("jobs"), dict) else unit)
        offered = (f"open loop {load.get('arrival')} at {_num(load.get('offered_rate_rps'))} "
                   f"{unit} offered (burstiness {load.get('burstiness')})")
    lines = [f"load: {how}; {offered}; achieved {_num(load.get('achieved_rate_rps'))} {unit}; "
             f"measured window {_num(window[0])}-{_num(window[1])} s; cancelled by the end "
             f"{load.get('cancelled')}" + _outside(load.get("outside_window"))]
    if load.get("arrival") != "closed":
        lag = load.get("schedule_lag_ms") or {}
        m = doc.get("metrics") or {}
        lines.append(
            f"schedule: lag p50 {_num(lag.get('p50'))} / p99 {_num(lag.get('p99'))} / max "
            f"{_num(lag.get('max'))} ms; waited for a user {load.get('waited_for_user')}; from "
            f"due: time to first output p50 {_num(m.get('time_to_first_output_from_due_p50_ms'))}"
            f" p95 {_num(m.get('time_to_first_output_from_due_p95_ms'))} ms, end to end p50 "
            f"{_num(m.get('e2e_from_due_p50_ms'))} p95 {_num(m.get('e2e_from_due_p95_ms'))} ms")
    warning = behind(load, doc.get("requests"))
    if warning:
        lines.append(f"WARNING: {warning}")
    return lines


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """What the block's type cannot say: the open-loop members null exactly in a closed
    loop, the burstiness its arrival process has, a duration run's duration, the window in
    order, `cancelled` = the failures of kind "cancelled", `waited_for_user` at most
    `requests`, and `schedule_lag_ms` recomputed from the rows (when they are well-typed:
    `rows`)."""
    load = doc.get("load")
    if load is None:
        return
    arrival = load["arrival"]
    closed = arrival == "closed"
    for key in ("offered_rate_rps", "schedule_lag_ms", "waited_for_user"):
        if (load[key] is None) != closed:
            problems.append(f"load.{key}: {'null' if closed else 'set'} exactly in a closed "
                            f"loop (arrival {fmt(arrival)}), file has {fmt(load[key])}")
    want_burst = {"closed": None, "constant": None, "trace": None, "poisson": 1.0}.get(arrival)
    burst = load["burstiness"]
    if (arrival == "gamma" and burst is None) or (arrival != "gamma" and not same(
            burst, want_burst)):
        expected = "a number > 0" if arrival == "gamma" else fmt(want_burst)
        problems.append(f"load.burstiness: {expected} with arrival {fmt(arrival)}, file has "
                        f"{fmt(burst)}")
    if load["mode"] == "duration" and load["duration_s"] is None:
        problems.append("load.duration_s: null, but mode is \"duration\"")
    window = load["window_s"]
    if window is not None and not window[0] <= window[1]:
        problems.append(f"load.window_s: expected [start, end] in seconds, start <= end, "
                        f"or null, file has {fmt(window)}")
    _check_counts(doc, load, problems)
    if not closed and rows is not None and isinstance(load["schedule_lag_ms"], dict):
        want = schedule_lag(rows)
        if want is not None and not same(load["schedule_lag_ms"], want):
            problems.append(f"load.schedule_lag_ms: file has {fmt(load['schedule_lag_ms'])}, "
                            f"recomputed {fmt(want)} from the rows' schedule_lag_ms")


def _check_counts(doc: Mapping[str, JsonValue], load: Mapping[str, JsonValue], problems: list[str]
                  ) -> None:
    failures = doc.get("failures") if isinstance(doc.get("failures"), list) else []
    want = sum(1 for f in failures if isinstance(f, dict) and f.get("kind") == "cancelled")
    if load["cancelled"] != want:
        problems.append(f"load.cancelled: file has {fmt(load['cancelled'])}, but "
                        f"failures has {want} of kind \"cancelled\"")
    waited = load["waited_for_user"]
    requests = doc.get("requests")
    if waited is not None and type(requests) is int and waited > requests:
        problems.append(f"load.waited_for_user: expected a count from 0 to requests "
                        f"({fmt(requests)}) or null, file has {fmt(waited)}")
