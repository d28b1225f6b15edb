"""The `energy` block: the joules the server's GPUs spent over the measured window, per
output token and per request, from `energy.jsonl` beside the run.

    "energy": {"source": "dcgm", "gpu_count": 8, "window_s": 60.1, "energy_j": 41230.0,
               "coverage": 1.0, "mean_power_w": 686.0, "peak_power_w": 702.0,
               "j_per_output_token": 0.412, "output_tokens_per_j": 2.43, ...}

Why a block computed from a file (as the `server` block is from `server_metrics.jsonl`):
the readers are a child process (`telemetry/`), and `anvil verify` recomputes every figure
from the same file with the same functions (`telemetry/energywindow.py` defines joules,
counters, power integration, resets and coverage), so a figure is either the file's
arithmetic or null with its reason in `null_reasons`. Never a wrong number:

- `energy_j`: Σ over GPUs of each one's joules over the part of the window it covers (all
  of it at `coverage` 1); `coverage` < 1 is a stated partial figure;
- `mean_power_w` = energy_j ÷ window_s, and the per-token, per-request and per-joule
  figures, only at coverage 1 (energy and tokens over the same window; the window's
  edges are the samples marked `first` and `last`, taken just before the first measured
  request and just after the last finished); else null;
- tokens and requests: Σ output_tokens and the count of the rows (the measured completed
  requests, as `metrics.output_tokens`); a failed request's partial output spent energy
  but is not counted;
- `peak_power_w`: the largest Σ power_w of one sample in the window reading every GPU;
- idle (`--energy-idle`): `idle_start` → `idle_end` computed alike; its power at coverage 1
  only; `above_idle_j` = energy_j − idle power × window_s, and per output token.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.jsonio import JsonValue
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent, num
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing
from anvil_metrics.telemetry.energyfile import ENERGY_FILE
from anvil_metrics.telemetry.energywindow import (
    EnergyFile,
    GpuWindow,
    gpu_keys,
    gpu_windows,
    marked,
    peak_power_w,
    read_energy_file,
)


class EnergyGpu(Struct, forbid_unknown_fields=True, kw_only=True):
    """One GPU over the measured window."""

    key: Annotated[str, described("", "the GPU, unique over the run: its node and index")]
    name: Annotated[str | None, described("", "its model name, where the source gives it")]
    uuid: Annotated[str | None, described("", "its UUID, where the source gives it")]
    method: Annotated[Literal["counter", "power"] | None, described(
        "", "counter: its cumulative energy differenced (exact); power: its power readings "
            "integrated (trapezoids); null: fewer than two readings of either")]
    energy_j: Annotated[Figure | None, described(
        "J", "its joules over the part of the window it covers; null: no method")]
    coverage: Annotated[float, described(
        "ratio", "the share of the window its counted readings span", ge=0, le=1)]
    counter_resets: Annotated[Count, described(
        "", "times its counter decreased (a reset): that stretch is not counted")]


class EnergyIdle(Struct, forbid_unknown_fields=True, kw_only=True):
    """The idle baseline read before the load (--energy-idle)."""

    window_s: Annotated[Figure, described("s", "idle_start → idle_end")]
    energy_j: Annotated[Figure | None, described("J", "Σ over GPUs over the idle window")]
    coverage: Annotated[float, described("ratio", "as the block's, over the idle window",
                                         ge=0, le=1)]
    power_w: Annotated[Figure | None, described(
        "W", "energy_j ÷ window_s; null unless coverage is 1")]


class Energy(Struct, forbid_unknown_fields=True, kw_only=True):
    """The GPUs' energy over the measured window (module docstring)."""

    source: Annotated[Literal["dcgm", "nvml", "metric"] | None, described(
        "", "the reader (energy.jsonl's first line); null: the file has none")]
    where: Annotated[list[str], described("", "the URLs read, or [\"nvml\"]")]
    interval_s: Annotated[Figure | None, described("s", "the time between two readings")]
    gpu_count: Annotated[Count, described("", "GPUs any successful reading showed")]
    gpus: Annotated[list[EnergyGpu], described("", "each GPU's figures")]
    window_s: Annotated[Figure | None, described(
        "s", "the measured window: the samples marked first → last; null: a mark is missing")]
    samples: Annotated[Count, described("", "successful readings in the window (its edges "
                                            "included)")]
    failed_samples: Annotated[Count, described("", "readings in the window that failed")]
    energy_j: Annotated[Figure | None, described(
        "J", "Σ of the GPUs' energy_j: the whole window's at coverage 1, else the covered "
             "part's")]
    coverage: Annotated[Annotated[float, Meta(ge=0, le=1)] | None, described(
        "ratio", "Σ covered time ÷ (gpu_count × window_s): 1 when every GPU was read at or "
                 "across both edges with nothing uncovered")]
    mean_power_w: Annotated[Figure | None, described("W", "energy_j ÷ window_s at coverage 1")]
    peak_power_w: Annotated[Figure | None, described(
        "W", "the largest Σ power_w of one reading in the window that has every GPU's")]
    output_tokens: Annotated[Count, described("tok", "Σ output_tokens of the rows")]
    requests: Annotated[Count, described("", "the rows: measured completed requests")]
    j_per_output_token: Annotated[Figure | None, described(
        "J/tok", "energy_j ÷ output_tokens, at coverage 1")]
    j_per_request: Annotated[Figure | None, described(
        "J/req", "energy_j ÷ requests, at coverage 1")]
    output_tokens_per_j: Annotated[Figure | None, described(
        "tok/J", "output_tokens ÷ energy_j, at coverage 1")]
    idle: Annotated[EnergyIdle | None, described(
        "", "the idle baseline (--energy-idle); null without one")]
    above_idle_j: Annotated[float | None, described(
        "J", "energy_j − idle.power_w × window_s (negative: the load drew less than idle)")]
    above_idle_j_per_output_token: Annotated[float | None, described(
        "J/tok", "above_idle_j ÷ output_tokens")]
    null_reasons: Annotated[dict[str, str], described("", "why each null figure is null")]


def energy_block(got: EnergyFile | None, output_tokens: int, requests: int,
                 off_reason: str | None = None) -> dict[str, Any]:
    """The block (module docstring) of the file read (None: none, `off_reason` says why)
    and the rows' Σ output_tokens and count."""
    reasons: dict[str, str] = {}
    out: dict[str, Any] = {k: None for k in Energy.__struct_fields__}
    out.update(where=[], gpu_count=0, gpus=[], samples=0, failed_samples=0,
               output_tokens=output_tokens, requests=requests)
    if got is None:
        reasons["energy"] = off_reason or f"no {ENERGY_FILE} beside the raw file"
        return _finish(out, reasons)
    if got.source is not None:
        out.update(source=got.source.source, where=list(got.source.where),
                   interval_s=got.source.interval_s)
    if got.bad_lines:
        reasons["file"] = (f"{got.bad_lines} line(s) of {ENERGY_FILE} could not be read, "
                           f"the first: {got.first_bad}")
    keys = gpu_keys(got.samples)
    out["gpu_count"] = len(keys)
    first, last = marked(got.samples, "first"), marked(got.samples, "last")
    if got.source is None or first is None or last is None or last.t_ns <= first.t_ns:
        reasons["energy"] = ("no source line in the file" if got.source is None else
                             "no reading marked first and last (the measured window's "
                             "edges): energy cannot be counted over it")
        return _finish(out, reasons)
    a, b, interval_s = first.t_ns, last.t_ns, got.source.interval_s
    inside = [s for s in got.samples if a <= s.t_ns <= b]
    failed = [s for s in inside if not s.ok]
    out.update(window_s=(b - a) / 1e9, samples=len(inside) - len(failed),
               failed_samples=len(failed))
    if failed:
        reasons["readings"] = (f"{len(failed)} of {len(inside)} readings in the window failed; "
                               f"the first: {failed[0].error}")
    gpus = gpu_windows(got.samples, a, b, interval_s)
    _window(out, gpus, b - a, reasons)
    out["peak_power_w"] = peak_power_w(got.samples, keys, a, b)
    if out["peak_power_w"] is None:
        reasons["peak_power_w"] = "no reading in the window has every GPU's power"
    _per_token(out, reasons)
    _idle(out, got, keys, reasons)
    return _finish(out, reasons)


def _window(out: dict[str, Any], gpus: list[GpuWindow], window_ns: int,
            reasons: dict[str, str]) -> None:
    out["gpus"] = [{"key": g.key, "name": g.name, "uuid": g.uuid, "method": g.method,
                    "energy_j": g.energy_j, "coverage": g.covered_ns / window_ns,
                    "counter_resets": g.counter_resets} for g in gpus]
    if not gpus:
        reasons["energy"] = "no successful reading showed a GPU"
        return
    if any(g.energy_j is None for g in gpus):
        reasons["energy"] = ("a GPU has fewer than two energy or power readings: "
                             + ", ".join(g.key for g in gpus if g.energy_j is None))
        return
    out["energy_j"] = sum(g.energy_j for g in gpus if g.energy_j is not None)
    covered = sum(g.covered_ns for g in gpus)
    out["coverage"] = covered / (len(gpus) * window_ns)
    resets = sum(g.counter_resets for g in gpus)
    if covered < len(gpus) * window_ns:
        short = [f"{g.key} {g.covered_ns / window_ns:.1%}" for g in gpus
                 if g.covered_ns < window_ns]
        reasons["coverage"] = (f"the readings cover {out['coverage']:.1%} of the window "
                               f"(short: {', '.join(short)}"
                               + (f"; {resets} counter reset(s) not counted" if resets else "")
                               + "): energy_j is the covered part's, per-token and power "
                               "figures are null")
    else:
        out["mean_power_w"] = out["energy_j"] / out["window_s"]


def _per_token(out: dict[str, Any], reasons: dict[str, str]) -> None:
    if out["mean_power_w"] is None:  # coverage below 1, or no energy: said above
        return
    j, tokens, requests = out["energy_j"], out["output_tokens"], out["requests"]
    if tokens:
        out["j_per_output_token"] = j / tokens
    else:
        reasons["j_per_output_token"] = "no output tokens in the window"
    if requests:
        out["j_per_request"] = j / requests
    else:
        reasons["j_per_request"] = "no completed measured request"
    if j > 0:
        out["output_tokens_per_j"] = tokens / j
    else:
        reasons["output_tokens_per_j"] = "no energy counted in the window"


def _idle(out: dict[str, Any], got: EnergyFile, keys: list[str],
          reasons: dict[str, str]) -> None:
    start, end = marked(got.samples, "idle_start"), marked(got.samples, "idle_end")
    if start is None or end is None or end.t_ns <= start.t_ns or got.source is None:
        reasons["idle"] = reasons["above_idle_j"] = (
            "no idle baseline was read (--energy-idle)" if start is None and end is None
            else "the idle baseline lacks its idle_start or idle_end mark")
        return
    a, b = start.t_ns, end.t_ns
    gpus = gpu_windows(got.samples, a, b, got.source.interval_s)
    idle: dict[str, Any] = {"window_s": (b - a) / 1e9, "energy_j": None, "coverage": 0.0,
                            "power_w": None}
    out["idle"] = idle
    if {g.key for g in gpus} != set(keys) or any(g.energy_j is None for g in gpus):
        reasons["above_idle_j"] = "the idle baseline lacks a GPU's readings"
        return
    idle["energy_j"] = sum(g.energy_j for g in gpus if g.energy_j is not None)
    covered = sum(g.covered_ns for g in gpus)
    idle["coverage"] = covered / (len(gpus) * (b - a))
    if covered < len(gpus) * (b - a):
        reasons["above_idle_j"] = (f"the idle readings cover {idle['coverage']:.1%} of the "
                                   "idle window: no idle power")
        return
    idle["power_w"] = idle["energy_j"] / idle["window_s"]
    if out["mean_power_w"] is None:
        reasons["above_idle_j"] = "the window's energy is partial or missing"
        return
    out["above_idle_j"] = out["energy_j"] - idle["power_w"] * out["window_s"]
    if out["output_tokens"]:
        out["above_idle_j_per_output_token"] = out["above_idle_j"] / out["output_tokens"]


def _finish(out: dict[str, Any], reasons: dict[str, str]) -> dict[str, Any]:
    figures = ("energy_j", "coverage", "mean_power_w", "peak_power_w", "j_per_output_token",
               "j_per_request", "output_tokens_per_j", "above_idle_j",
               "above_idle_j_per_output_token")
    shared = reasons.get("energy") or reasons.get("coverage")
    for key in figures:
        if out[key] is None and key not in reasons and shared is not None:
            reasons[key] = shared
    if out["above_idle_j_per_output_token"] is None and "above_idle_j" in reasons:
        reasons["above_idle_j_per_output_token"] = reasons["above_idle_j"]
    out["null_reasons"] = dict(sorted(reasons.items()))
    return out


# --- build, verify, the CLI's lines -----------------------------------------------------------


def _tokens(rows: RowColumns) -> tuple[int, int]:
    return sum(rows.counts["output_tokens"].tolist()), len(rows)


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run with `energy.jsonl` beside its raw file, or whose header names an
    energy source (`params.energy`), else ABSENT."""
    path = Path(inputs.raw.path).with_name(ENERGY_FILE) if inputs.raw.path else None
    got = read_energy_file(path) if path is not None else None
    if got is None and not isinstance(inputs.params.get("energy"), dict):
        return ABSENT
    return energy_block(got, *_tokens(inputs.rows))


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """The tokens and requests recomputed from the rows, and each per-token figure from
    the block's own energy (the joules themselves: `check_energy_file`, from the file)."""
    block = doc.get("energy")
    if not isinstance(block, dict) or rows is None:
        return
    tokens, requests = _tokens(rows)
    want = dict(block, output_tokens=tokens, requests=requests)
    _per_token(want, {})
    keys = ("output_tokens", "requests", "j_per_output_token", "j_per_request",
            "output_tokens_per_j")
    if block.get("mean_power_w") is None:
        keys = keys[:2]
    problems += differing("energy", block, want, keys)


def check_energy_file(doc: Mapping[str, Any], rows: RowColumns | None, path: Path,
                      problems: list[str], notes: list[str] | None = None) -> None:
    """Recompute the whole block from `path` (the `energy.jsonl` beside the benchmark) and
    the rows; a document whose file is gone cannot be: `notes` says so (not a problem)."""
    block = doc.get("energy")
    if not isinstance(block, dict) or rows is None:
        return
    got = read_energy_file(path)
    if got is None:
        if notes is not None and block.get("source") is not None:
            notes.append(f"energy: no {ENERGY_FILE} beside the file: its joules were not "
                         "recomputed (its per-token figures were, from the rows)")
        return
    want = energy_block(got, *_tokens(rows), (block.get("null_reasons") or {}).get("energy"))
    problems += differing("energy", block, want, Energy.__struct_fields__, ENERGY_FILE
                          + " and the rows")


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's lines: GPUs, joules, coverage, power, per token, above idle; else why not."""
    e = doc.get("energy")
    if not isinstance(e, dict):
        return []
    reasons = e.get("null_reasons") or {}
    head = f"energy: {e['gpu_count']} GPUs ({e['source'] or 'no source'})"
    if e["energy_j"] is None:
        return [f"{head}: {reasons.get('energy', 'no energy counted')}"]
    line = (f"{head}, {num(e['energy_j'], ',.0f')} J over {num(e['window_s'], '.1f')} s "
            f"(coverage {e['coverage']:.1%}); mean {num(e['mean_power_w'], ',.0f')} W, peak "
            f"{num(e['peak_power_w'], ',.0f')} W; {num(e['j_per_output_token'], '.4g')} "
            f"J/output token, {num(e['output_tokens_per_j'], '.3g')} tok/J")
    if e["idle"] is not None:
        line += (f"; idle {num(e['idle']['power_w'], ',.0f')} W, above idle "
                 f"{num(e['above_idle_j_per_output_token'], '.4g')} J/token")
    lines = [line]
    if any(isinstance(g, dict) and g.get("method") == "power" for g in e.get("gpus") or ()):
        lines.append(f"energy: power integrated over {e.get('samples')} readings "
                     f"{num(e.get('interval_s'), 'g')} s apart, not an energy counter: an "
                     "estimate, as good as the readings are dense beside the window (a "
                     "counter, DCGM's total energy or NVML's, is exact)")
    lines += [f"energy: {reasons[k]}" for k in ("coverage", "readings", "file") if k in reasons]
    return lines
