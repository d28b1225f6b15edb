"""The tests' builder of `energy.jsonl` files: typed lines (`telemetry/energyfile.py`), as
the energy readers write them, of GPUs whose power is a chosen function of time, so each
figure's truth is known in closed form."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from anvil_metrics.telemetry.energyfile import (
    ENERGY_FILE,
    EnergySample,
    EnergySource,
    GpuReading,
)

SOURCE = EnergySource(source="dcgm", where=["http://127.0.0.1:9400/metrics"], metric=None,
                      interval_s=0.5)
NAME = "NVIDIA H100 80GB HBM3"
S = 1_000_000_000  # ns per second


def gpus(n: int, t_ns: int, watts: Callable[[float], float],
         joules: Callable[[float], float] | None, *, power: bool = True) -> list[GpuReading]:
    """`n` GPUs read at `t_ns` (seconds t = t_ns / 1e9): each draws `watts(t)` and its
    counter reads `joules(t)` (None: no counter); `power` False: no power reading."""
    t = t_ns / S
    return [GpuReading(key=f"127.0.0.1:9400/{i}", name=NAME, uuid=f"GPU-{i:08x}",
                       energy_j=None if joules is None else joules(t),
                       power_w=watts(t) if power else None) for i in range(n)]


def series(n: int, times_ns: Iterable[int], marks: dict[int, str],
           watts: Callable[[float], float], joules: Callable[[float], float] | None, *,
           power: bool = True) -> list[EnergySample]:
    """A sample at each of `times_ns` (seq in order), `marks` naming the marked times."""
    return [EnergySample(seq=i, t_ns=t, mark=marks.get(t), ok=True, error=None,  # type: ignore[arg-type]
                         gpus=gpus(n, t, watts, joules, power=power))
            for i, t in enumerate(sorted(times_ns))]


def failed(seq: int, t_ns: int, mark: str | None = None) -> EnergySample:
    """A reading that timed out."""
    return EnergySample(seq=seq, t_ns=t_ns, mark=mark, ok=False,  # type: ignore[arg-type]
                        error="timed out after 1.0 s", gpus=[])


def write_energy(folder: Path, samples: Iterable[EnergySample],
                 source: EnergySource | None = SOURCE) -> Path:
    """`folder/energy.jsonl`: the source line, then the samples."""
    path = folder / ENERGY_FILE
    lines = ([source] if source is not None else []) + list(samples)
    path.write_bytes(b"".join(msgspec.json.encode(x) + b"\n" for x in lines))
    return path
