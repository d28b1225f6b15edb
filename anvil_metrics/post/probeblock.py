"""The `probe` block: how much the load delayed an unrelated request (`--probe-rate`).

Why a block of its own, from its own file: the probes (`live/probe.py`) are not the run's
requests — outside its budget, its concurrency and its records — so they are never rows;
their lines are in `probe.jsonl` beside the raw file, and this block is all the document
says of them. Its question: a tiny request (one output token, a prompt no cache holds)
arriving now, how long until its first output, idle and under this load?

    "probe": {
      "rate_rps": 2.0, "idle_planned": 10,      # the plan (probe.jsonl's first line)
      "sent": 70, "answered": 70, "failed": 0,  # every probe, idle and under load
      "idle": {"sent": 10, "answered": 10, "ttft_p50_ms": 20.4, "ttft_p99_ms": 20.9},
      "load": {"sent": 60, "answered": 60, "ttft_p50_ms": 61.0, "ttft_p99_ms": 180.2},
      "delay_p50_ms": 40.6, "delay_p99_ms": 159.3,   # load minus idle
      "steps": [{"step": 0, "sent": 20, ...}, ...]   # per step of a sweep; null without
    }

Definitions: a probe's TTFT is `first_output_ns - start_ns` (the same clock, the sending
process's); answered: it has a first output and no failure; percentiles are nearest-rank
over the answered probes of the group (null without any); a delay is the group's
percentile minus the idle one's (null where either is). `anvil verify` recomputes the whole
block from `probe.jsonl` (`check_probe_file`); without the file it says so in a note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import Struct

from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent, num
from anvil_metrics.post.schema import differing
from anvil_metrics.post.stats import nearest_rank_columns

PROBE_FILE = "probe.jsonl"  # live/probe.py writes it


def _ms(text: str) -> Any:
    return Annotated[float | None, described("ms", text)]


class ProbeGroup(Struct, forbid_unknown_fields=True):
    """The probes of one phase or step."""

    sent: Annotated[Count, described("", "probes sent")]
    answered: Annotated[Count, described("", "probes with a first output and no failure")]
    ttft_p50_ms: _ms("nearest-rank p50 of the answered probes' TTFT; null without any")
    ttft_p99_ms: _ms("nearest-rank p99 of the answered probes' TTFT; null without any")


class ProbeStep(ProbeGroup, forbid_unknown_fields=True):
    """The probes sent during one step of a sweep."""

    step: Annotated[Count, described("", "the step's index (steps[])")]
    delay_p50_ms: _ms("ttft_p50_ms minus idle's; null where either is")


class Probe(Struct, forbid_unknown_fields=True):
    """The head-of-line probe (module docstring)."""

    rate_rps: Annotated[Figure, described("req/s", "probes per second under load (Poisson)")]
    idle_planned: Annotated[Count, described("", "probes planned before the load")]
    sent: Annotated[Count, described("", "probes sent, idle and under load")]
    answered: Annotated[Count, described("", "probes answered (a first output, no failure)")]
    failed: Annotated[Count, described("", "probes sent and not answered")]
    idle: Annotated[ProbeGroup, described("", "the probes before the load: the baseline")]
    load: Annotated[ProbeGroup, described("", "the probes sent while the load ran")]
    delay_p50_ms: _ms("load.ttft_p50_ms minus idle.ttft_p50_ms; null where either is")
    delay_p99_ms: _ms("load.ttft_p99_ms minus idle.ttft_p99_ms; null where either is")
    steps: Annotated[list[ProbeStep] | None, described(
        "", "the load's probes by the sweep step in force when sent; null without steps")]


def read_probe_file(path: Path) -> list[dict[str, Any]] | None:
    """The file's lines (a line cut by a killed run is left out); None without the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    lines = []
    for text in raw.splitlines():
        try:
            line = msgspec.json.decode(text)
        except msgspec.DecodeError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines


def _group(probes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ttft = np.array([(p["first_output_ns"] - p["start_ns"]) / 1e6 for p in probes
                     if p.get("failure") is None and p.get("first_output_ns") is not None],
                    dtype=np.float64)
    p50, p99 = nearest_rank_columns(ttft, (50, 99))
    return {"sent": len(probes), "answered": len(ttft), "ttft_p50_ms": p50, "ttft_p99_ms": p99}


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def probe_block(lines: Sequence[Mapping[str, Any]]) -> JsonObject | None:
    """The block from `probe.jsonl`'s lines; None without its plan line."""
    plan = next((x for x in lines if x.get("type") == "plan"), None)
    if plan is None:
        return None
    probes = [x for x in lines if x.get("type") == "probe"]
    idle = _group([p for p in probes if p.get("phase") == "idle"])
    under = [p for p in probes if p.get("phase") == "load"]
    load = _group(under)
    answered = idle["answered"] + load["answered"]
    stepped = sorted({p["step"] for p in under if isinstance(p.get("step"), int)})
    steps = [{"step": i, **(g := _group([p for p in under if p.get("step") == i])),
              "delay_p50_ms": _minus(g["ttft_p50_ms"], idle["ttft_p50_ms"])} for i in stepped]
    return {"rate_rps": plan["rate_rps"], "idle_planned": plan["idle"], "sent": len(probes),
            "answered": answered, "failed": len(probes) - answered, "idle": idle,
            "load": load, "delay_p50_ms": _minus(load["ttft_p50_ms"], idle["ttft_p50_ms"]),
            "delay_p99_ms": _minus(load["ttft_p99_ms"], idle["ttft_p99_ms"]),
            "steps": steps or None}


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run with `probe.jsonl` beside its raw file, else ABSENT."""
    if not inputs.raw.path:
        return ABSENT
    lines = read_probe_file(Path(inputs.raw.path).with_name(PROBE_FILE))
    block = probe_block(lines) if lines is not None else None
    return ABSENT if block is None else block


def check_probe_file(doc: Mapping[str, Any], path: Path, problems: list[str],
                     notes: list[str] | None = None) -> None:
    """Recompute the whole block from `path` (the `probe.jsonl` beside the benchmark); a
    document whose file is gone cannot be: `notes` says so (not a problem)."""
    block = doc.get("probe")
    if not isinstance(block, dict):
        return
    lines = read_probe_file(path)
    want = probe_block(lines) if lines is not None else None
    if want is None:
        if notes is not None:
            notes.append(f"probe: no {PROBE_FILE} beside the file: not recomputed")
        return
    problems += differing("probe", block, want, Probe.__struct_fields__, PROBE_FILE)


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's line: the probes' TTFT idle and under load, and the delay."""
    b = doc.get("probe")
    if not isinstance(b, dict):
        return []
    idle, load = b.get("idle") or {}, b.get("load") or {}
    return [f"probe ({b.get('rate_rps')}/s, {b.get('answered')}/{b.get('sent')} answered): "
            f"TTFT p50 {num(idle.get('ttft_p50_ms'), '.1f')} ms idle, "
            f"{num(load.get('ttft_p50_ms'), '.1f')} ms under load (p99 "
            f"{num(load.get('ttft_p99_ms'), '.1f')}): the load delayed it "
            f"{num(b.get('delay_p50_ms'), '.1f')} ms (p99 {num(b.get('delay_p99_ms'), '.1f')})"]
