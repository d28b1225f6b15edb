"""Joules per GPU over a window of `energy.jsonl`'s samples, and the share of it they cover.

Why its own module: the `energy` block (`post/energyblock.py`) and `anvil verify` both
compute the same figures from the same file, and every source (DCGM, NVML, a named
metric) writes the same lines (`energyfile.py`), so one computation reads them all. It
knows nothing of requests: the block divides by the rows' tokens.

Definitions (a window [a, b] is the `t_ns` of two marked samples: `first` → `last`, the
measured window; `idle_start` → `idle_end`, the idle baseline):

- a GPU's readings: its entries in the successful samples (`ok`), in time order; a GPU
  is every `key` any successful sample shows, so one missing from later samples
  (disappeared) counts with the part it covered;
- counter (the GPU has `energy_j` in two readings or more; exact): the sum, over pairs of
  consecutive readings, of the counter's increase. A pair whose counter decreased (a
  reset: the GPU or its exporter restarted) adds nothing and covers nothing: that
  stretch's energy is unknown, the coverage says so and `counter_resets` counts it;
- power (else, `power_w` in two readings or more): trapezoidal integration of the
  readings; a pair further apart than `MAX_GAP_INTERVALS` × the source's interval adds
  nothing and covers nothing (too long to interpolate);
- a pair that straddles an edge of the window is cut at the edge, the value there
  interpolated linearly between the pair (the counter's increase pro rata to time; the
  power at the edge), if the pair is no further apart than the gap above; the marked
  samples are readings at the edges themselves, so this happens only when a GPU is
  missing from a marked sample or the marked reading failed;
- `covered_ns`: the time inside the window the GPU's counted pairs span; `coverage` =
  covered ÷ the window, per GPU, and overall Σ covered ÷ (GPUs × window). It is 1 exactly
  (integer nanoseconds: no tolerance) when every GPU was read at or across both edges with
  nothing uncovered between; the block gives per-token and power figures only then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from anvil_metrics.telemetry.energyfile import EnergyLine, EnergySample, EnergySource

MAX_GAP_INTERVALS = 3.0  # a power pair, or an edge's pair, further apart is not interpolated
Method = Literal["counter", "power"]

_DECODER = msgspec.json.Decoder(EnergyLine)


@dataclass(frozen=True, slots=True)
class EnergyFile:
    """`energy.jsonl` read: its source line (None without one), its samples in file order,
    and the first line that could not be read beside how many (a torn last line is not
    counted: the run may have died mid-write)."""

    source: EnergySource | None
    samples: tuple[EnergySample, ...]
    bad_lines: int
    first_bad: str | None


@dataclass(frozen=True, slots=True)
class GpuWindow:
    """One GPU over one window: its joules over the part covered (None: no method: neither
    two counter readings nor two power readings), how it was measured, the covered time
    and the counter resets met."""

    key: str
    name: str | None
    uuid: str | None
    method: Method | None
    energy_j: float | None
    covered_ns: int
    counter_resets: int


def read_energy_file(path: Path) -> EnergyFile | None:
    """The file's lines, typed (`energyfile.EnergyLine`); None when there is no file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    source, samples, bad, first_bad = None, [], 0, None
    lines = data.splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            got = _DECODER.decode(line)
        except msgspec.DecodeError as e:
            if n == len(lines) and not data.endswith(b"\n"):
                continue  # torn while written
            bad += 1
            first_bad = first_bad or f"line {n}: {e}"
            continue
        if isinstance(got, EnergySource):
            source = source or got
        else:
            samples.append(got)
    return EnergyFile(source, tuple(samples), bad, first_bad)


def marked(samples: Iterable[EnergySample], mark: str) -> EnergySample | None:
    """The first sample carrying `mark`, or None."""
    return next((s for s in samples if s.mark == mark), None)


def gpu_keys(samples: Iterable[EnergySample]) -> list[str]:
    """Every GPU any successful sample shows, in order of first appearance."""
    seen: dict[str, None] = {}
    for s in samples:
        if s.ok:
            for g in s.gpus:
                seen.setdefault(g.key, None)
    return list(seen)


def gpu_windows(samples: tuple[EnergySample, ...], a_ns: int, b_ns: int,
                interval_s: float) -> list[GpuWindow]:
    """Each GPU of the file (`gpu_keys`) over [a_ns, b_ns] (module docstring)."""
    max_gap_ns = MAX_GAP_INTERVALS * interval_s * 1e9
    ordered = sorted((s for s in samples if s.ok), key=lambda s: s.t_ns)
    out = []
    for key in gpu_keys(ordered):
        readings = [(s.t_ns, g) for s in ordered for g in s.gpus if g.key == key]
        counter = [(t, g.energy_j) for t, g in readings if g.energy_j is not None]
        power = [(t, g.power_w) for t, g in readings if g.power_w is not None]
        name = next((g.name for _, g in reversed(readings) if g.name), None)
        uuid = next((g.uuid for _, g in reversed(readings) if g.uuid), None)
        if len(counter) >= 2:
            joules, covered, resets = _counter(counter, a_ns, b_ns, max_gap_ns)
            out.append(GpuWindow(key, name, uuid, "counter", joules, covered, resets))
        elif len(power) >= 2:
            joules, covered = _power(power, a_ns, b_ns, max_gap_ns)
            out.append(GpuWindow(key, name, uuid, "power", joules, covered, 0))
        else:
            out.append(GpuWindow(key, name, uuid, None, None, 0, 0))
    return out


def _counter(points: list[tuple[int, float]], a: int, b: int, max_gap_ns: float
             ) -> tuple[float, int, int]:
    joules, covered, resets = 0.0, 0, 0
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        lo, hi = max(t0, a), min(t1, b)
        if hi <= lo:
            continue
        if v1 < v0:
            resets += 1
            continue
        inside = lo == t0 and hi == t1
        if not inside and t1 - t0 > max_gap_ns:
            continue
        joules += (v1 - v0) if inside else (v1 - v0) * (hi - lo) / (t1 - t0)
        covered += hi - lo
    return joules, covered, resets


def _power(points: list[tuple[int, float]], a: int, b: int, max_gap_ns: float
           ) -> tuple[float, int]:
    joules, covered = 0.0, 0
    for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False):
        lo, hi = max(t0, a), min(t1, b)
        if hi <= lo or t1 - t0 > max_gap_ns:
            continue
        slope = (p1 - p0) / (t1 - t0)
        p_lo, p_hi = p0 + slope * (lo - t0), p0 + slope * (hi - t0)
        joules += (p_lo + p_hi) / 2 * (hi - lo) / 1e9
        covered += hi - lo
    return joules, covered


def peak_power_w(samples: tuple[EnergySample, ...], keys: list[str], a_ns: int, b_ns: int
                 ) -> float | None:
    """The largest Σ power_w of one successful sample in [a_ns, b_ns] that has a power
    reading of every GPU in `keys`; None when no sample has."""
    best = None
    for s in samples:
        if not s.ok or not a_ns <= s.t_ns <= b_ns:
            continue
        watts = {g.key: g.power_w for g in s.gpus if g.power_w is not None}
        if keys and all(k in watts for k in keys):
            total = sum(watts[k] for k in keys)
            best = total if best is None else max(best, total)
    return best
