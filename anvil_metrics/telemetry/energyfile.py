"""The energy samples file, `energy.jsonl`: what the energy readers write beside a run and
the `energy` block is computed from.

Why one typed definition first: three sources (a DCGM exporter's `/metrics`, NVML on the
load host, any Prometheus metric by name) are read by a child process (never the load's
loop, as `scrape.py` is), and one computation (`energy` block: joules over the measured
window, per GPU, with its coverage) must read all three alike, and `anvil verify` must
read the file again. So every source writes the same lines:

    {"type": "energy_source", "source": "dcgm", "where": ["http://10.0.0.5:9400/metrics"],
     "metric": null, "interval_s": 0.5}
    {"type": "energy_sample", "seq": 0, "t_ns": ..., "mark": "first", "ok": true,
     "error": null, "gpus": [{"key": "10.0.0.5:9400/0", "name": "NVIDIA H100 80GB HBM3",
                              "uuid": "GPU-...", "energy_j": 123456.789, "power_w": 312.5}]}

- `t_ns`: `perf_counter_ns()` of the reading on the load host's clock (the run's time
  line, as `server_metrics.jsonl`'s `t_ns`);
- `mark`: "first" / "last" (just before the first measured request, just after the last:
  the measured window, as the server sampler's marks), "idle_start" / "idle_end" (the
  `--energy-idle` baseline before the load), else null;
- per GPU (`key`: unique over the run: the source's node and the GPU's index): `energy_j`,
  a cumulative counter in joules (DCGM's `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` is mJ,
  NVML's `nvmlDeviceGetTotalEnergyConsumption` mJ: converted when read), null where the
  source has none; `power_w`, the instantaneous power in watts, null where none;
- `ok` false with `error` (one line): the reading failed (timed out, refused, no such
  metric); its `gpus` is empty. A GPU missing from a later sample has disappeared.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Struct

from anvil_metrics.fieldtypes import Count, Stamp, described

ENERGY_FILE = "energy.jsonl"
SOURCES = ("dcgm", "nvml", "metric")
MARKS = ("first", "last", "idle_start", "idle_end")


class EnergySource(Struct, forbid_unknown_fields=True, kw_only=True, tag="energy_source",
                   tag_field="type"):
    """The file's first line: where the readings come from."""

    source: Annotated[Literal["dcgm", "nvml", "metric"], described(
        "", "dcgm: a DCGM exporter's /metrics (--energy-url); nvml: NVML on the load host "
            "(--energy nvml); metric: a Prometheus metric by name (--energy-metric)")]
    where: Annotated[list[str], described(
        "", "the URLs read (credentials stripped), or [\"nvml\"]")]
    metric: Annotated[str | None, described(
        "", "--energy-metric's NAME{label=value} and its unit (W or J); null otherwise")]
    interval_s: Annotated[float, described("s", "the time between two readings", gt=0)]


class GpuReading(Struct, forbid_unknown_fields=True, kw_only=True):
    """One GPU's reading in one sample."""

    key: Annotated[str, described("", "the GPU, unique over the run: its node and index")]
    name: Annotated[str | None, described("", "the GPU's model name, where told")]
    uuid: Annotated[str | None, described("", "the GPU's UUID, where told")]
    energy_j: Annotated[float | None, described(
        "J", "the cumulative energy counter, converted to joules; null: none")]
    power_w: Annotated[float | None, described("W", "the power now; null: none")]


class EnergySample(Struct, forbid_unknown_fields=True, kw_only=True, tag="energy_sample",
                   tag_field="type"):
    """One reading of every GPU the source shows."""

    seq: Annotated[Count, described("", "the sample's number, from 0")]
    t_ns: Annotated[Stamp, described("ns", "perf_counter_ns of the reading (the run's "
                                           "clock)")]
    mark: Annotated[Literal["first", "last", "idle_start", "idle_end"] | None, described(
        "", "the measured window's edges, the idle baseline's; null: a periodic reading")]
    ok: Annotated[bool, described("", "false: the reading failed (error says why)")]
    error: Annotated[str | None, described("", "why the reading failed, one line")]
    gpus: Annotated[list[GpuReading], described("", "every GPU read; empty when not ok")]


EnergyLine = EnergySource | EnergySample
