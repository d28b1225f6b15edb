"""The energy reader: a child process that reads the GPUs' energy and power and writes
`energy.jsonl` (`energyfile.py`), one flushed line per reading.

Why a child, as the server-metrics sampler (`scrape.py`, whose loop and marks it reuses): an
exporter may hang or answer garbage, and NVML calls block; none of it may touch the load's
event loop or its stamps. The load process writes `first` / `last` (and `idle_start` /
`idle_end` around an idle baseline) to its stdin and is answered `done <seq>` once that
reading is written (`sampler.py`).

    python -m anvil_metrics.telemetry.energy OUT --source dcgm --url URL [--url URL]
        [--metric 'NAME{label="v"}:W'] --interval-s S --timeout-s T

The three readers (each: the GPUs it sees now, or OSError/ValueError with one line):

- dcgm: each URL's `/metrics` (dcgm-exporter), per GPU (its `gpu` label) the counter
  `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ since boot, converted to J as read: a reset
  shows as a decrease, written as read) and the gauge `DCGM_FI_DEV_POWER_USAGE` (W), a
  DCGM blank ("not supported") as none; a GPU with neither is left out; name and UUID
  from `modelName` and `UUID`;
- nvml: `nvmlDeviceGetTotalEnergyConsumption` (mJ) and `nvmlDeviceGetPowerUsage` (mW) of
  every device NVML counts; a device whose handle fails (lost) is left out, a call a device
  does not support is null;
- metric: every series of the selector's name holding its labels, one GPU each (its key:
  the node and the series' other labels), a power unit as power, an energy unit as the
  counter, converted to W or J.

A GPU's key is unique over the run: the node (the URL's host:port) and its index, so eight
GPUs on each of two nodes are sixteen. The nodes are read at once (a thread each); a URL
that fails fails the reading (`ok` false, its error names the URL): a reading is all
nodes' or none.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import msgspec

from anvil_metrics.load.energyplan import EnergyPlan, MetricSelector, parse_selector
from anvil_metrics.telemetry.energyfile import MARKS, EnergySample, EnergySource, GpuReading
from anvil_metrics.telemetry.scrape import Sampler, run_child, scrape_samples
from anvil_metrics.urls import strip_credentials

# one reading's bound: an exporter answers in milliseconds, and the window's edges wait for
# their readings (at most two: one under way, then the mark's)
READ_TIMEOUT_S = 1.0
DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since boot (a counter)
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"  # W (a gauge)
# DCGM's "blank" values (dcgm_structs.h: no value, not found, not supported, not permitted)
# are printed as numbers (9223372036854775794 for a field a GPU does not support): not
# readings. An int64 field's blanks start at DCGM_INT64_BLANK, a double's at DCGM_FP64_BLANK
DCGM_BLANK = {DCGM_ENERGY: float(0x7FFFFFFFFFFFFFF0), DCGM_POWER: 140737488355328.0}
NAME_LABELS = ("modelName", "card_model", "gpu_model", "model")
UUID_LABELS = ("UUID", "uuid", "gpu_uuid")
Samples = list[tuple[str, dict[str, str], float]]
Reader = Callable[[], list[GpuReading]]


def node_of(url: str) -> str:
    """The node a URL reads: its host:port."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def _first(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    return next((labels[n] for n in names if labels.get(n)), None)


def dcgm_gpus(samples: Samples, node: str) -> list[GpuReading]:
    """A dcgm-exporter reply's GPUs: energy (J) and power (W) per `gpu` label."""
    gpus: dict[str, dict[str, Any]] = {}
    for name, labels, value in samples:
        # (prometheus_client's parser names a counter's sample NAME_total, as OpenMetrics)
        name = name.removesuffix("_total")
        if name not in (DCGM_ENERGY, DCGM_POWER) or "gpu" not in labels:
            continue
        if labels.get("GPU_I_ID") or value >= DCGM_BLANK[name]:  # a MIG instance's series
            continue  # (the device's is the GPU's), or DCGM's "no value"
        g = gpus.setdefault(labels["gpu"], {"name": _first(labels, NAME_LABELS),
                                            "uuid": _first(labels, UUID_LABELS)})
        if name == DCGM_ENERGY:
            g["energy_j"] = value / 1000.0
        else:
            g["power_w"] = value
    if not gpus:
        raise ValueError(f"no {DCGM_ENERGY} nor {DCGM_POWER} per GPU in the reply")
    return [GpuReading(key=f"{node}/{gpu}", name=g["name"], uuid=g["uuid"],
                       energy_j=g.get("energy_j"), power_w=g.get("power_w"))
            for gpu, g in sorted(gpus.items(), key=lambda kv: _index(kv[0]))]


def _index(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def metric_gpus(samples: Samples, node: str, selector: MetricSelector) -> list[GpuReading]:
    """The selector's series, one GPU each."""
    given = dict(selector.labels)
    out = []
    for name, labels, value in samples:
        if not selector.matches(name, labels):
            continue
        rest = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in given)
        v, j = value * selector.factor, selector.energy
        out.append(GpuReading(key=f"{node}/{rest}", name=_first(labels, NAME_LABELS),
                              uuid=_first(labels, UUID_LABELS),
                              energy_j=v if j else None, power_w=None if j else v))
    if not out:
        raise ValueError(f"no series {selector.text} in the reply")
    return out


def url_reader(plan: EnergyPlan, timeout_s: float, fetch: Any = scrape_samples) -> Reader:
    """A reading of every URL of `plan` (dcgm or metric): the nodes at once (a thread
    each, so one sample is one moment), their GPUs in the URLs' order."""
    def one(url: str) -> list[GpuReading]:
        try:
            samples = fetch(url, timeout_s)
            node = node_of(url)
            return (metric_gpus(samples, node, plan.metric) if plan.metric is not None
                    else dcgm_gpus(samples, node))
        except (OSError, ValueError) as e:
            raise type(e)(f"{url}: {e}") from None

    pool = ThreadPoolExecutor(len(plan.urls)) if len(plan.urls) > 1 else None

    def read() -> list[GpuReading]:
        parts = pool.map(one, plan.urls) if pool is not None else map(one, plan.urls)
        return [g for part in parts for g in part]  # the first URL that failed raises
    return read


def nvml_problem(nvml: Any = None) -> str | None:
    """Why `--energy nvml` cannot read this host (one line, with the fix), or None."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return ("--energy nvml: nvidia-ml-py is not installed; install it with "
                    "pip install 'anvil-metrics[nvml]' (or pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
    except Exception as e:  # noqa: BLE001 - NVMLError and its many subclasses, OSError
        return (f"--energy nvml: NVML did not start ({e}): this host has no NVIDIA driver "
                "or GPU; read a DCGM exporter with --energy-url instead")
    if count < 1:
        return "--energy nvml: NVML sees no GPU on this host; use --energy-url instead"
    return None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def nvml_reader(nvml: Any) -> Reader:
    """A reading of every device NVML counts (`nvmlInit` already called)."""
    def call(fn: Any, handle: Any, scale: float) -> float | None:
        try:
            return fn(handle) / scale
        except nvml.NVMLError:  # not supported by this device
            return None

    def read() -> list[GpuReading]:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                name, uuid = _text(nvml.nvmlDeviceGetName(h)), _text(nvml.nvmlDeviceGetUUID(h))
            except nvml.NVMLError:  # lost, or gone: missing from this reading
                continue
            out.append(GpuReading(
                key=f"nvml/{i}", name=name, uuid=uuid,
                energy_j=call(nvml.nvmlDeviceGetTotalEnergyConsumption, h, 1000.0),
                power_w=call(nvml.nvmlDeviceGetPowerUsage, h, 1000.0)))
        if not out:
            raise OSError("NVML shows no GPU")
        return out
    return read


class EnergySampler(Sampler):
    """The sampler's loop and marks (`Sampler.run`), each reading one `EnergySample`."""

    marks = MARKS

    def __init__(self, read: Reader, out: BinaryIO, interval_s: float) -> None:
        super().__init__("", out, interval_s, 0.0)
        self.read = read
        self.encoder = msgspec.json.Encoder()

    def sample(self, mark: str | None) -> int:
        t_ns = time.perf_counter_ns()
        try:
            gpus, error = self.read(), None
        except Exception as e:  # noqa: BLE001 - a reader's failure is the line's error
            gpus, error = [], " ".join(f"{e}".split())[:300] or type(e).__name__
        line = EnergySample(seq=self.seq, t_ns=t_ns, mark=mark, ok=error is None,
                            error=error, gpus=gpus)
        self.out.write(self.encoder.encode(line) + b"\n")
        self.out.flush()
        self.seq += 1
        return self.seq - 1


def child_args(plan: EnergyPlan, out: str, timeout_s: float) -> list[str]:
    """The child's command line for `plan` (its URLs carry no credentials)."""
    argv = [sys.executable, "-m", "anvil_metrics.telemetry.energy", out, "--source",
            plan.source, "--interval-s", repr(plan.interval_s), "--timeout-s", repr(timeout_s)]
    for url in plan.urls:
        argv += ["--url", strip_credentials(url)]
    if plan.metric is not None:
        argv += ["--metric", plan.metric.text]
    return argv


def _reader(plan: EnergyPlan, timeout_s: float) -> Reader:
    if plan.source != "nvml":
        return url_reader(plan, timeout_s)
    problem = nvml_problem()
    if problem is not None:
        def fail() -> list[GpuReading]:
            raise OSError(problem)
        return fail
    import pynvml

    return nvml_reader(pynvml)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m anvil_metrics.telemetry.energy",
                                 description="read the GPUs' energy (anvil's energy child)")
    ap.add_argument("out")
    ap.add_argument("--source", choices=("dcgm", "nvml", "metric"), required=True)
    ap.add_argument("--url", action="append", default=[])
    ap.add_argument("--metric")
    ap.add_argument("--interval-s", type=float, default=0.5)
    ap.add_argument("--timeout-s", type=float, default=READ_TIMEOUT_S)
    ap.add_argument("--max-s", type=float, default=7 * 24 * 3600.0)
    a = ap.parse_args(argv)
    plan = EnergyPlan(a.source, tuple(a.url), parse_selector(a.metric) if a.metric else None,
                      a.interval_s)
    head = EnergySource(source=plan.source, where=list(plan.urls) or ["nvml"],
                        metric=plan.metric.text if plan.metric else None,
                        interval_s=plan.interval_s)
    return run_child(a.out, msgspec.json.encode(head),
                     lambda out: EnergySampler(_reader(plan, a.timeout_s), out,
                                               plan.interval_s), a.max_s)


if __name__ == "__main__":
    raise SystemExit(main())
