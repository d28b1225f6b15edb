"""The benchmark's `client` block: the load generator's own health over the load.

Why a block: a load generator that falls behind adds its own delays to every figure, and
they look like the server's. So a run records its event-loop lag and CPU (`live/lagmon.py`,
`live/loadwindow.py`, in the raw `run_end` line), and the block holds them beside two
figures from the records — `achieved_concurrency` (Σ durations / wall clock: Little's law)
and `start_delay_ms` (how late requests went out after they were due) — and the verdict
`saturation.py` draws from the lag and CPU: `saturated` and its `verdict` in words.

`anvil verify` holds `saturated` and `verdict` to the block's own figures and p50 ≤ p99 ≤
max in each set of quantiles; the raw reader applies the same rules to a `run_end` line's
`client`, so a damaged one is named with its line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from msgspec import UNSET, Struct, UnsetType

from anvil_metrics.fieldtypes import Count, Figure, described, fmt, problems
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.post import saturation
from anvil_metrics.post.blockkit import BuildInputs, _Absent, num
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.rawcolumns import NULL


class LoopLag(Struct, forbid_unknown_fields=True, kw_only=True):
    """How late the load process's event loop woke from a 1 ms sleep."""

    p50: Annotated[Figure | None, described(
        "ms", "nearest-rank median wake-up lateness (the upper edge of its 10 µs bucket); "
              "null without samples")]
    p99: Annotated[Figure | None, described(
        "ms", "nearest-rank 99th percentile wake-up lateness; null without samples")]
    max: Annotated[Figure | None, described("ms", "the latest wake-up; null without "
                                                  "samples")]
    samples: Annotated[Count | UnsetType, described("", "wake-ups measured")] = UNSET
    over_5ms: Annotated[Count | UnsetType, described("", "wake-ups later than 5 ms")] = UNSET
    max_at_s: Annotated[Figure | None | UnsetType, described(
        "s", "when the latest wake-up happened, seconds into the load")] = UNSET
    stalls: Annotated[list[tuple[Figure, Figure]] | UnsetType, described(
        "", "the first 20 wake-ups later than 5 ms, each [seconds into the load, ms "
            "late]")] = UNSET


class StartDelay(Struct, forbid_unknown_fields=True):
    """Nearest-rank figures of how late each measured request was written after it was
    due."""

    p50: Annotated[float | None, described("ms", "nearest-rank median start delay")]
    p99: Annotated[float | None, described("ms", "nearest-rank 99th percentile start "
                                                 "delay")]
    max: Annotated[float | None, described("ms", "the largest start delay")]


class Client(Struct, forbid_unknown_fields=True, kw_only=True):
    """The load generator's own health over the load (module docstring)."""

    loop_lag_ms: Annotated[LoopLag | None, described(
        "ms", "how late the load process's event loop woke from a 1 ms sleep, over the load "
              "(a distributed run: the worst worker's, by p99)")]
    cpu_pct: Annotated[Figure | None, described(
        "%", "CPU time of the load process over the load's wall time, in percent of one "
             "core (distributed: the highest worker's)")]
    achieved_concurrency: Annotated[Figure | None, described(
        "", "Σ measured request durations / wall_clock_ms: the time-averaged number of "
            "requests in flight (Little's law)")]
    saturated: Annotated[bool | None, described(
        "", "true when loop lag p99 > 10 ms or CPU > 90 % of a core: the generator, not the "
            "server, may have set the figures; null when neither was measured")]
    # anvil's, beyond the spec's four
    verdict: Annotated[str | None | UnsetType, described(
        "", '"ok", "not measured" or "saturated: <why>" — what saturated says, in '
            "words")] = UNSET
    start_delay_ms: Annotated[StartDelay | None | UnsetType, described(
        "ms", "nearest-rank figures of how late each measured request was written after it "
              "was due (its user free and its ticket handed out)")] = UNSET


KEYS = Client.__struct_fields__  # the block's keys, in the order it is written


def client_block(client: Mapping[str, JsonValue] | None,
                 figures: Callable[[], tuple[float | None, JsonObject | None]]
                 ) -> JsonObject | None:
    """The block: the load generator's own figures from the raw `run_end` (loop lag, CPU,
    the saturation verdict; missing keys → null) and, from the records,
    `achieved_concurrency` and `start_delay_ms` (`figures()`; see `saturation.py`)."""
    if client is None:
        return None
    block = {key: client.get(key) for key in KEYS}
    lag = block["loop_lag_ms"]
    if isinstance(lag, dict):  # the spec's {p50, p99, max}, a missing one null
        block["loop_lag_ms"] = {"p50": None, "p99": None, "max": None, **lag}
    if block["saturated"] is None:  # figures from before the verdict existed
        sat, reasons = saturation.health_verdict(client)
        block["saturated"], block["verdict"] = sat, saturation.verdict_text(sat, reasons)
    elif block["verdict"] is None:
        block["verdict"] = saturation.verdict_text(block["saturated"], [])
    block["achieved_concurrency"], block["start_delay_ms"] = figures()
    return block


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block from the run's own figures (`inputs.client`, the raw `run_end`'s) and the
    measured records; null when the run recorded none."""
    m, wall = inputs.measured, inputs.doc["wall_clock_ms"]

    def figures() -> tuple[float | None, JsonObject | None]:
        end, delay = m.column("end_ns"), m.column("start_delay_ns")
        return (saturation.achieved_concurrency(m.column("start_ns"), end, end != NULL, wall),
                saturation.start_delay_ms(delay[delay != NULL]))

    return client_block(inputs.client, figures)


def rule_problems(client: Mapping[str, JsonValue]) -> list[str]:
    """What the block's type cannot say, of a well-typed block: p50 <= p99 <= max in each
    set of quantiles, `saturated` exactly when its own loop lag p99 and CPU cross
    `saturation`'s limits (in a distributed run they are the worst worker's, whose verdict
    decides), and a `verdict` that says the same."""
    out: list[str] = []
    p99 = _ordered(client, "loop_lag_ms", out)
    _ordered(client, "start_delay_ms", out)
    saturated = client["saturated"]
    cpu = client["cpu_pct"]
    want, _ = saturation.verdict(p99, cpu)
    if saturated is not want:
        out.append(
            f"client.saturated: file has {fmt(saturated)}, its own figures (loop lag p99 "
            f"{fmt(p99)} ms, CPU {fmt(cpu)} %) give {fmt(want)} (saturated when p99 > "
            f"{saturation.LAG_P99_LIMIT_MS:g} ms or CPU > {saturation.CPU_LIMIT_PCT:g} %)")
        return out
    verdict = client.get("verdict")
    if verdict is not None and not (verdict.startswith("saturated: ") if saturated
                                    else verdict == saturation.verdict_text(saturated, [])):
        out.append(f"client.verdict: {fmt(verdict)} does not say what saturated "
                   f"{fmt(saturated)} says ("
                   + ('"saturated: <why>"' if saturated
                      else fmt(saturation.verdict_text(saturated, []))) + ")")
    return out


def _ordered(client: Mapping[str, JsonValue], key: str, out: list[str]) -> float | None:
    """p50 <= p99 <= max of `client[key]` (null or a well-typed set); returns its p99."""
    block = client.get(key)
    if block is None:
        return None
    values = [block["p50"], block["p99"], block["max"]]
    if None not in values and not values[0] <= values[1] <= values[2]:
        out.append(f"client.{key}: p50 {fmt(values[0])} <= p99 {fmt(values[1])} <= max "
                   f"{fmt(values[2])} does not hold")
    return values[1]


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems_: list[str]) -> None:
    """The rules of a well-typed block (`rule_problems`)."""
    if doc.get("client") is not None:
        problems_ += rule_problems(doc["client"])


def raw_client_problems(client: Any) -> list[str]:
    """The problems of the block a raw `run_end` line's `client` (generator figures;
    `load_s`/`cpu_s` are not copied) becomes, or []: the raw reader asks, so that a
    damaged one is named with its line rather than found when the benchmark built from it
    fails verification."""
    if client is None:
        return []
    if not isinstance(client, dict):
        return [f"client: expected an object or null, file has {fmt(client)}"]
    block = client_block(client, lambda: (None, None))
    return problems(block, Client | None, "client") or rule_problems(block)


def _of_what(doc: Mapping[str, JsonValue]) -> str:
    """What the concurrency counts where it is not requests: an agent replay's is jobs at
    once, whose sub-agents put more requests in flight than that."""
    return " jobs (their sub-agents' requests beside them)" if isinstance(
        doc.get("jobs"), dict) else ""


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's lines on the generator's health (none without loop-lag figures)."""
    client = doc.get("client") or {}
    lag = client.get("loop_lag_ms") or {}
    lines = []
    if lag.get("max") is not None:
        lines.append(f"client: event-loop lag p50 {lag.get('p50')} ms, p99 {lag.get('p99')} "
                     f"ms, max {lag['max']:.1f} ms; CPU {num(client.get('cpu_pct'), ',.1f')} "
                     f"%; achieved concurrency {num(client.get('achieved_concurrency'), ',.1f')}"
                     f" of {doc.get('concurrency')}{_of_what(doc)}; verdict "
                     f"{client.get('verdict')}")
    if client.get("saturated"):
        lines.append("WARNING: the load generator was saturated; these figures may include "
                     "its own delays, not only the server's (use --processes N or fewer "
                     "users per process)")
    return lines
