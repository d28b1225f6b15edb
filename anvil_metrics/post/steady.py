"""The benchmark's `steady_state` block: did the run reach a steady state, and did its
latencies hold there?

Why a verdict of its own: a run's percentiles average over everything it measured. A
ramp-up (users still spawning) or a drain (the last requests finishing alone) inside the
window makes a server look faster than it is under the load asked for, and a server that
slows as it runs (a filling KV cache, a leak, thermal throttling) gives percentiles of no
load in particular. vllm-bench reports a steady-state block; MLCommons' endpoint harness
says "no steady state" rather than report one. So anvil finds the plateau in the rows and
tests the latencies in it, and says which of three it saw:

- `steady`: the load held its level over at least half the run, and no latency moved;
- `drifting`: the load held, but a latency moved within the plateau (`reason` says which,
  where and by how much);
- `no_plateau`: the load never held its level long enough (or too few requests to judge).

Definitions (one implementation: `build_steady`, which `anvil verify` runs again):

1. The span is [first start, last end] of the completed rows (`start_offset_ms`,
   `start_offset_ms + e2e_ms`), cut into `BINS` equal bins.
2. The load per bin: in a closed loop, the time-averaged number of requests in flight
   (`level_kind` "in_flight"); in an open loop, the requests that started in it per second
   ("arrival_rate_rps"). The plateau `level` is the median of the bins'.
3. A bin holds the level when it is within `LEVEL_TOLERANCE` of it; in an open loop the
   band is at least 3 standard deviations of a Poisson count of the level's size, so a
   Poisson schedule's noise is not taken for a change of load. The plateau is the longest
   run of bins that hold (the first such run on a tie); `window_s` is its bounds in
   seconds after the run's header, `share` its fraction of the span, `requests` the rows
   that started in it. Less than `MIN_SHARE` of the span, or fewer than `MIN_REQUESTS`
   completed rows in all, or a level more than `LEVEL_TOLERANCE` below the load the run
   asked for (its users, or its offered rate, where that is the level: `steady_of`):
   `no_plateau`.
4. Each latency of `METRICS` over the plateau's rows (by start): cut into `QUARTERS` runs
   of equal size (numpy's `array_split`), the nearest-rank p50 of each beside the window's
   (`quarters_p50`, `p50`). A quarter moved when its p50 is more than `DRIFT_LIMIT` from
   the window's (relative) and a Mann-Whitney U test of its values against the other
   quarters' gives p < `P_LIMIT` (`significance.mann_whitney`): both a
   change worth reporting and one beyond noise. `shift_pct` and `p_value` are the quarter
   that moved most (by |shift|). A trend shows in the first and last quarters, a level
   shift in those on either side of it.

A stepped run (a sweep, a load shape) changes its load by design: it has no block (each
step has its own figures). Failed requests have no row: they are not in flight here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Literal

import numpy as np
from msgspec import Meta, Struct

from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.post.blockkit import BuildInputs, _Absent
from anvil_metrics.post.derive import Floats, RowColumns
from anvil_metrics.post.schema import fmt, same
from anvil_metrics.post.significance import mann_whitney
from anvil_metrics.post.stats import nearest_rank_columns

VERDICTS = ("steady", "drifting", "no_plateau")
LEVEL_KINDS = ("in_flight", "arrival_rate_rps")
METRICS = ("ttft_ms", "mean_inter_token_latency_ms", "e2e_ms")
BINS = 20
LEVEL_TOLERANCE = 0.10
MIN_SHARE = 0.5
MIN_REQUESTS = 40
QUARTERS = 4
DRIFT_LIMIT = 0.10
P_LIMIT = 0.001


class SteadyMetric(Struct, forbid_unknown_fields=True):
    """One latency over the plateau's requests."""

    p50: Annotated[float, described("ms", "nearest-rank p50 over the plateau's requests")]
    p95: Annotated[float, described("ms", "nearest-rank p95 over the plateau's requests")]
    p99: Annotated[float, described("ms", "nearest-rank p99 over the plateau's requests")]
    quarters_p50: Annotated[list[float], Meta(min_length=QUARTERS, max_length=QUARTERS),
                            described("ms", "nearest-rank p50 of each quarter of the "
                                            "plateau's requests, in start order")]
    shift_pct: Annotated[float, described("%", "the quarter p50 furthest from the plateau's "
                                               "p50, relative to it")]
    p_value: Annotated[Figure, described("", "Mann-Whitney U p of that quarter's values "
                                             "against the other quarters'")]
    moved: Annotated[bool, described("", "some quarter's p50 is more than 10 % from the "
                                         "plateau's with p < 0.001")]


class SteadyState(Struct, forbid_unknown_fields=True):
    """Did the run reach a steady state, and did its latencies hold there (module
    docstring)."""

    verdict: Annotated[Literal[VERDICTS], described(  # type: ignore[valid-type]
        "", "steady (the load held its level over at least half the run and no latency "
            "moved), drifting (it held, but a latency moved) or no_plateau")]
    reason: Annotated[str, described("", "what the verdict rests on, in one sentence")]
    level_kind: Annotated[Literal[LEVEL_KINDS], described(  # type: ignore[valid-type]
        "", "in_flight (a closed loop: requests in flight, time-averaged per bin) or "
            "arrival_rate_rps (an open loop: requests started per second)")]
    level: Annotated[float | None, described("", "the plateau's level: the median of the "
                                                  "20 bins' loads")]
    window_s: Annotated[tuple[float, float] | None, described(
        "s", "[start, end] of the plateau, seconds after the run's header")]
    share: Annotated[Figure | None, described("", "the plateau's fraction of the run's "
                                                  "span")]
    requests: Annotated[Count, described("", "completed requests that started in the "
                                             "plateau")]
    metrics: Annotated[dict[Literal[METRICS], SteadyMetric | None],  # type: ignore[valid-type]
                       described("", "per latency (ttft_ms, mean_inter_token_latency_ms, "
                                     "e2e_ms) over the plateau's requests; null with fewer "
                                     "than 8 values")]


def _in_flight_ms(start: Floats, end: Floats, at: Floats) -> Floats:
    """For each time in `at`: Σ over the requests of their time in flight before it,
    Σ max(0, min(t, end) − start), from sorted stamps and prefix sums (no row × bin table,
    so a million rows cost what sorting them costs)."""
    s, e = np.sort(start), np.sort(end)
    cs = np.concatenate([[0.0], np.cumsum(s)])
    ce = np.concatenate([[0.0], np.cumsum(e)])
    ns = np.searchsorted(s, at, side="left")
    ne = np.searchsorted(e, at, side="left")
    return (ns * at - cs[ns]) - (ne * at - ce[ne])


def _bins(start: Floats, end: Floats, closed: bool) -> tuple[Floats, float, float]:
    """(the load per bin, the span's start and each bin's width, ms)."""
    t0, t1 = float(start.min()), float(end.max())
    width = (t1 - t0) / BINS
    if width <= 0:
        return np.zeros(BINS), t0, width
    if closed:  # time in flight within each bin, over its width
        return np.diff(_in_flight_ms(start, end, t0 + width * np.arange(BINS + 1))) / width, \
            t0, width
    which = np.clip(((start - t0) // width).astype(np.int64), 0, BINS - 1)
    return np.bincount(which, minlength=BINS) / (width / 1000.0), t0, width


def _plateau(load: Floats, level: float, closed: bool, width_ms: float) -> tuple[int, int]:
    """[first, last) bins of the longest run that holds the level."""
    band = LEVEL_TOLERANCE * level
    if not closed:  # a Poisson count of the level's size: 3 sd, in requests per second
        band = max(band, 3.0 * math.sqrt(level * width_ms / 1000.0) / (width_ms / 1000.0))
    holds = np.abs(load - level) <= band
    best, at, run = (0, 0), 0, 0
    for i, ok in enumerate(holds.tolist()):
        run = run + 1 if ok else 0
        if ok and run == 1:
            at = i
        if run > best[1] - best[0]:
            best = (at, i + 1)
    return best


def _metric(v: Floats) -> JsonObject | None:
    """A latency's figures over the plateau (values in start order, NaN dropped); None
    with too few values for a quarter of 2."""
    v = v[~np.isnan(v)]
    if len(v) < 2 * QUARTERS:
        return None
    p50, p95, p99 = nearest_rank_columns(v, (50, 95, 99))
    parts = np.array_split(v, QUARTERS)
    quarters = [nearest_rank_columns(q, (50,))[0] for q in parts]
    worst: tuple[float, float] | None = None  # (shift, p) of the quarter that moved most
    moved = False
    for k, q in enumerate(parts):
        shift = (quarters[k] - p50) / p50 if p50 else 0.0
        test = mann_whitney(q, np.concatenate(parts[:k] + parts[k + 1:]))
        p = 1.0 if test is None else test.p_two_sided
        moved = moved or (abs(shift) > DRIFT_LIMIT and p < P_LIMIT)
        if worst is None or abs(shift) > abs(worst[0]):
            worst = (shift, p)
    assert worst is not None
    return {"p50": p50, "p95": p95, "p99": p99, "quarters_p50": quarters,
            "shift_pct": 100.0 * worst[0], "p_value": worst[1], "moved": moved}


def _block(verdict: str, reason: str, kind: str, level: float | None = None,
           window: list[float] | None = None, share: float | None = None, requests: int = 0,
           metrics: JsonObject | None = None) -> JsonObject:
    return {"verdict": verdict, "reason": reason, "level_kind": kind, "level": level,
            "window_s": window, "share": share, "requests": requests,
            "metrics": metrics or {}}


def build_steady(rows: RowColumns, arrival: str | None, intended: float | None = None
                 ) -> JsonObject | None:
    """The block (module docstring) of rows with `start_offset_ms`, for a run whose
    load block's `arrival` is `arrival` ("closed", or an open loop's; None: a file without a load
    block, taken as closed) and whose load was asked to be `intended` (users in flight, or
    requests per second; None: not known); None when the rows have no start offsets."""
    if "start_offset_ms" in rows.absent:
        return None
    start = rows.values("start_offset_ms")
    ok = ~np.isnan(start)
    if not ok.all():
        return None
    closed = arrival in (None, "closed")
    kind = LEVEL_KINDS[0] if closed else LEVEL_KINDS[1]
    if len(rows) < MIN_REQUESTS:
        return _block("no_plateau", f"too few completed requests to judge: {len(rows)} (at "
                      f"least {MIN_REQUESTS})", kind)
    end = start + rows.values("e2e_ms")
    load, t0, width = _bins(start, end, closed)
    if width <= 0:
        return _block("no_plateau", "every request started and ended at one instant", kind)
    level = float(np.median(load))
    if level <= 0:
        return _block("no_plateau", "no load in most of the run's bins", kind)
    first, last = _plateau(load, level, closed, width)
    share = (last - first) / BINS
    window = [(t0 + first * width) / 1000.0, (t0 + last * width) / 1000.0]
    what = (f"{level:.1f} in flight" if closed else f"{level:.2f} req/s")
    if intended is not None and level < (1 - LEVEL_TOLERANCE) * intended:
        asked = f"{intended:g} users" if closed else f"{intended:g} req/s offered"
        return _block("no_plateau", f"the load's level was {what}, below the {asked}: the "
                      "run never reached its load (users spawned too slowly for the "
                      "requests, or a generator behind its schedule)", kind, level, window,
                      share)
    if share < MIN_SHARE:
        return _block("no_plateau", f"the load held its level ({what}, ±"
                      f"{LEVEL_TOLERANCE:.0%}) over {share:.0%} of the run, less than "
                      f"{MIN_SHARE:.0%}", kind, level, window, share)
    inside = (start >= t0 + first * width) & ((start < t0 + last * width) | (last == BINS))
    order = np.argsort(start[inside], kind="stable")
    mine = rows.select(inside)
    metrics = {name: _metric(mine.values(name)[order]) for name in METRICS}
    moved = [(name, m) for name, m in metrics.items() if m is not None and m["moved"]]
    if moved:
        name, m = max(moved, key=lambda x: abs(x[1]["shift_pct"]))
        k = int(np.argmax([abs(q - m["p50"]) for q in m["quarters_p50"]]))
        reason = (f"{name}: quarter {k + 1} of the plateau has p50 {m['quarters_p50'][k]:.1f} "
                  f"against the plateau's {m['p50']:.1f} ({m['shift_pct']:+.1f} %, "
                  f"Mann-Whitney p {m['p_value']:.1e})")
        return _block("drifting", reason, kind, level, window, share, len(mine), metrics)
    reason = (f"the load held {what} (±{LEVEL_TOLERANCE:.0%}) over {share:.0%} of the run, "
              f"and no latency's quarter moved beyond ±{DRIFT_LIMIT:.0%} of its p50")
    return _block("steady", reason, kind, level, window, share, len(mine), metrics)


def steady_of(doc: Mapping[str, JsonValue], rows: RowColumns) -> JsonObject | None:
    """The block of a document with these rows: none in a stepped run (its load changes by
    design); the intended level is the users of a closed loop or the offered rate of an
    open one, except in a run of conversations (think time between turns, follow-ups off
    the schedule) or a replayed trace (its own rate)."""
    if doc.get("steps"):
        return None
    load = doc.get("load") if isinstance(doc.get("load"), dict) else {}
    arrival = load.get("arrival")
    intended = None
    if not doc.get("conversation") and arrival != "trace":
        asked = load.get("offered_rate_rps") if arrival not in (None, "closed") else (
            doc.get("concurrency"))
        intended = float(asked) if isinstance(asked, int | float) and asked > 0 else None
    return build_steady(rows, arrival, intended)


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of every run (null in a stepped one), after its `load`."""
    return steady_of(inputs.doc, inputs.rows)


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """The `steady_state` block recomputed from the rows (when they are well-typed)."""
    if "steady_state" not in doc or rows is None:
        return
    block = doc["steady_state"]
    want = steady_of(doc, rows)
    if not same(block, want):
        problems.append(f"steady_state: file has {fmt(block)}, recomputed {fmt(want)} from "
                        "the rows' start_offset_ms and latencies")


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """What the CLI summary says of the verdict: one line (none without a block)."""
    block = doc.get("steady_state")
    if not isinstance(block, dict):
        return []
    window = block.get("window_s") or []
    where = (f" (plateau {window[0]:.1f}-{window[1]:.1f} s, {block.get('requests')} requests)"
             if len(window) == 2 else "")
    return [f"steady state: {block.get('verdict')}{where}: {block.get('reason')}"]
