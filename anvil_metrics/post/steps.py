"""Stepped runs: the load changes in steps, and each request belongs to the step in force
when it started.

Why: a sweep (`--steps 1,4,16,64` users, or `--rates 1,2,4,8` requests/s, each for
`--step-duration`) answers "how do latency and throughput change with load" in one run,
and a `LoadTestShape` changes the load too. A run that records `concurrency` once would
misreport both. So the process that owns the run writes a `"step"` line to the raw file
whenever the load changes (`{step, t_ns, users, rate}`, on its clock: the master's in a
distributed run) and a `"step_end"` line when the last step is over; after the run each
measured request is attributed to the last step that began at or before its start (its
start placed on the master's clock), so every request is in exactly one step. Rows carry
`step`; so do the failures of a stepped run.

`steps[]` in benchmark.json, one block per step: `{step, users | rate, started_s, ended_s,
requests, completed, failed, metrics, goodput_rps}`: seconds after the run's header
(`perf_anchor_ns`); a step ends where the next begins (the last at `step_end`, or at the
last measured request's end if the run stopped first); `metrics` is `stats.aggregate` over
the step's rows with `(ended_s − started_s) · 1000` as its wall clock; `goodput_rps` the
step's requests meeting the run's goodput criteria per second of the step (null without
criteria); with a mix's check classes, `checks` each one's pass rate over the step's
rows (`mixblock.PassRate`): a sweep shows the pass rate by load. `anvil verify` recomputes
all of it from the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import numpy as np
from msgspec import UNSET, Struct, UnsetType

from anvil_metrics.catalog import PER_GPU_AGGREGATES
from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.load.criteria import Criterion, parse_criteria
from anvil_metrics.post import stats
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent
from anvil_metrics.post.catalogtypes import Metrics
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.goodput import meets, rate
from anvil_metrics.post.mixblock import PassRate, check_classes, class_pass_rates
from anvil_metrics.post.rawcolumns import NULL
from anvil_metrics.post.schema import fmt, same

PER_GPU_KEYS = frozenset(a.name for a in PER_GPU_AGGREGATES)


class Step(Struct, forbid_unknown_fields=True, kw_only=True):
    """One step of a stepped run, over the requests that started in it."""

    step: Annotated[Count, described("", "the step's index, from 0")]
    users: Annotated[Count | None | UnsetType, described(
        "", "the users the step held (a users sweep or a load shape)")] = UNSET
    rate: Annotated[Figure | UnsetType, described(
        "req/s", "the step's open-loop rate (a rate sweep)")] = UNSET
    started_s: Annotated[float, described("s", "when the step began, seconds after the "
                                               "run's header")]
    ended_s: Annotated[float, described(
        "s", "when the step ended, seconds after the run's header: where the next began, or "
             "at the step_end line, or at the last measured request's end if the run "
             "stopped first")]
    requests: Annotated[Count, described("", "measured requests that started in the step")]
    completed: Annotated[Count, described("", "the step's requests that completed")]
    failed: Annotated[Count, described("", "the step's requests that failed")]
    metrics: Annotated[Metrics, described(
        "", "the metrics block over the step's rows, with (ended_s − started_s) · 1000 as "
            "its wall clock")]
    goodput_rps: Annotated[Figure | None, described(
        "req/s", "the step's requests meeting every goodput criterion per second of the "
                 "step; null without criteria")]
    checks: Annotated[dict[str, PassRate] | UnsetType, described(
        "", "a mix's check classes (by name): their verdicts and pass rate over the step's "
            "rows; absent without one")] = UNSET


def attribute(step_t_ns: Sequence[int], start_ns: Any) -> Any:
    """Per start stamp, the index of the last step that began at or before it (a start
    before the first step counts in step 0); NULL everywhere without steps."""
    if not len(step_t_ns):
        return np.full(len(start_ns), NULL, dtype=np.int64)
    at = np.searchsorted(np.asarray(step_t_ns, dtype=np.int64), start_ns, side="right") - 1
    return np.maximum(at, 0).astype(np.int64)


def build_steps(steps: Sequence[Mapping[str, JsonValue]], end_ns: int | None, anchor_ns: int,
                rows: RowColumns, failure_steps: Sequence[int],
                criteria: Sequence[Criterion] | None,
                checks: Mapping[int, str] | None = None) -> list[JsonObject]:
    """`steps[]` from the raw step lines, the time the last one ended (`end_ns`), the run's
    anchor, the rows (with their `step`), the failures' steps and a mix's check classes."""
    out = []
    fails = np.asarray(failure_steps, dtype=np.int64)
    for i, line in enumerate(steps):
        stop = steps[i + 1]["t_ns"] if i + 1 < len(steps) else end_ns
        started = (line["t_ns"] - anchor_ns) / 1e9
        ended = started if stop is None else (stop - anchor_ns) / 1e9
        block: JsonObject = {"step": i}
        block.update({"rate": line["rate"]} if line.get("rate") is not None
                     else {"users": line.get("users")})
        block.update(_figures(rows, i, started, ended, int(np.count_nonzero(fails == i)),
                              criteria, checks))
        out.append(block)
    return out


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """`steps[]` of a stepped run (its raw file has step lines), else ABSENT."""
    raw = inputs.raw
    if not raw.steps:
        return ABSENT
    m = inputs.measured
    end = raw.steps_end_ns if raw.steps_end_ns is not None else (
        int(m.last_ns.max()) if len(m.last_ns) else None)
    anchor = raw.steps[0]["t_ns"] if inputs.anchor_ns is None else inputs.anchor_ns
    return build_steps(raw.steps, end, anchor, inputs.rows,
                       [f["step"] for f in inputs.doc["failures"]], inputs.criteria,
                       check_classes(inputs.params.get("mix")))


def _figures(rows: RowColumns, i: int, started_s: float, ended_s: float, failed: int,
             criteria: Sequence[Criterion] | None,
             checks: Mapping[int, str] | None = None) -> JsonObject:
    """A step's counts, metrics, goodput (its window: `ended_s − started_s`) and its check
    classes' pass rates."""
    mine = rows.select(rows.present["step"] & (rows.counts["step"] == i))
    wall_ms = (ended_s - started_s) * 1000
    good = None
    if criteria:
        good = rate(int(np.count_nonzero(meets(mine, criteria))), wall_ms)
    return {"started_s": started_s, "ended_s": ended_s, "requests": len(mine) + failed,
            "completed": len(mine), "failed": failed,
            "metrics": stats.aggregate(mine, wall_ms), "goodput_rps": good,
            **({"checks": class_pass_rates(mine, checks)} if checks else {})}


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """`steps[]` and the rows' and failures' `step`, recomputed from the rows (when they
    are well-typed: `rows`)."""
    blocks = doc.get("steps")
    if blocks is None:
        if rows is not None and "step" not in rows.absent and rows.present["step"].any():
            problems.append("request_timings[].step: set, but the file has no steps")
        return
    before = len(problems)
    for i, b in enumerate(blocks):
        if ("users" in b) == ("rate" in b):
            problems.append(f"steps[{i}]: expected one of users, rate; file has {sorted(b)}")
        if b["step"] != i:
            problems.append(f"steps[{i}].step: expected {i}, file has {fmt(b['step'])}")
    if len(problems) > before or rows is None:
        return
    n = len(blocks)
    if "step" in rows.absent or not rows.present["step"].all() or (
            len(rows) and int(rows.counts["step"].max()) >= n):
        problems.append(f"request_timings[].step: every row of a stepped run names one of its "
                        f"{n} steps")
        return
    failures = doc.get("failures") or []
    fsteps = [f.get("step") for f in failures if isinstance(f, dict)]
    if not all(type(s) is int and 0 <= s < n for s in fsteps):
        problems.append(f"failures[].step: every failure of a stepped run names one of its {n} "
                        "steps")
        return
    criteria = None
    if isinstance(doc.get("goodput"), dict):
        try:
            criteria = parse_criteria(doc["goodput"].get("criteria") or [], "goodput.criteria")
        except Exception:  # noqa: BLE001 - goodput's own check says what is wrong
            return
    total = 0
    for i, b in enumerate(blocks):
        started, ended = b["started_s"], b["ended_s"]
        if not (isinstance(started, float) and isinstance(ended, float) and started <= ended):
            problems.append(f"steps[{i}]: started_s and ended_s must be seconds, started_s <= "
                            f"ended_s; file has {fmt(started)}, {fmt(ended)}")
            continue
        want = _figures(rows, i, started, ended, fsteps.count(i), criteria,
                        check_classes((doc.get("mix") or {}).get("plan")))
        for key, value in want.items():
            got = b.get(key)
            if key == "metrics" and isinstance(got, dict):  # per_gpu's keys: pergpu.verify
                got = {k: v for k, v in got.items() if k not in PER_GPU_KEYS}
                value = {k: v for k, v in value.items()  # keys added after the file
                         if k in got or k not in stats.ADDED_KEYS}
            if not same(got, value):
                problems.append(f"steps[{i}].{key}: file has {fmt(b.get(key))}, recomputed "
                                f"{fmt(value)} from the rows of step {i}")
        total += want["requests"]
    if total != doc.get("requests"):
        problems.append(f"steps: {total} requests over the steps, but requests is "
                        f"{fmt(doc.get('requests'))}; each request is in exactly one step")
