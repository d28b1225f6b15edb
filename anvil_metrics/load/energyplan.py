"""A run's energy source (`[energy]`, `--energy`, `--energy-url`, `--energy-metric`): which
readings the telemetry child takes, how often, and whether an idle baseline comes first.

Why a plan of its own: three sources are read by one child process (`telemetry/energy.py`)
and the load process only starts it and marks the window; the scenario's keys (checked here
once, for a file and for the flags alike) say which source and where, and the plan is the
child's command line. The GPUs are the server's: the source is read wherever it is, never
from the load's loop.

- `source = "dcgm"`: each URL of `urls` is a DCGM exporter's `/metrics` (one per node);
- `source = "nvml"`: NVML on the load host (the `nvml` extra: nvidia-ml-py);
- `source = "metric"`: any Prometheus metric at `urls`, written `NAME{label="value",..}:U`
  with its unit U as the exporter's HELP line states it: `W` or `mW` (a power gauge), `J`,
  `mJ` or `uJ` (a cumulative energy counter); every series of NAME whose labels hold the
  given ones is one GPU (AMD's device-metrics-exporter: `gpu_power_usage:W`; Triton's
  `nv_energy_consumption:J`).

Given `urls` alone the source is dcgm; given `metric`, metric.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.optionvalues import Kind, seconds_of

SOURCES = ("dcgm", "nvml", "metric")
# a unit: what it measures (power: a gauge; energy: a counter) and its factor to W or J
UNITS = {"W": ("power", 1.0), "mW": ("power", 1e-3), "J": ("energy", 1.0),
         "mJ": ("energy", 1e-3), "uJ": ("energy", 1e-6)}
INTERVAL_S = 0.5  # between two readings (DCGM's exporter refreshes every 30 s by default)
_SELECTOR = re.compile(r'([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?:(W|mW|J|mJ|uJ)')
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"?([^",]*)"?\s*')
SELECTOR_ALLOWED = ('NAME{label="value",...}:UNIT, UNIT one of W, mW (power), J, mJ, uJ '
                    '(an energy counter), e.g. gpu_power_usage:W')


def _urls(text: str) -> list[str]:
    return [u.strip() for u in text.split(",") if u.strip()]


def _is_url(u: Any) -> bool:
    return isinstance(u, str) and re.fullmatch(r"https?://[^/\s]+\S*", u) is not None


URLS = Kind("http(s) URLs (one per node, comma-separated)",
            lambda v: isinstance(v, list) and bool(v) and all(map(_is_url, v)), _urls)


@dataclass(frozen=True, slots=True)
class MetricSelector:
    """`--energy-metric`: a metric's name, the labels its series must hold, its unit."""

    name: str
    labels: tuple[tuple[str, str], ...]
    unit: str

    @property
    def text(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.name}{{{inner}}}:{self.unit}" if inner else f"{self.name}:{self.unit}"

    @property
    def energy(self) -> bool:
        """True: an energy counter; False: a power gauge."""
        return UNITS[self.unit][0] == "energy"

    @property
    def factor(self) -> float:
        """A value times this is in J (a counter) or W (a gauge)."""
        return UNITS[self.unit][1]

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        # (prometheus_client's parser names a counter's samples NAME_total, as OpenMetrics)
        return name in (self.name, f"{self.name}_total") and all(
            labels.get(k) == v for k, v in self.labels)


def parse_selector(text: str) -> MetricSelector | None:
    """`NAME{a="x"}:W` as a selector; None: not one."""
    m = _SELECTOR.fullmatch(text.strip())
    if m is None:
        return None
    labels = []
    for part in filter(str.strip, (m.group(2) or "").split(",")):
        lm = _LABEL.fullmatch(part)
        if lm is None:
            return None
        labels.append((lm.group(1), lm.group(2)))
    return MetricSelector(m.group(1), tuple(labels), m.group(3))


@dataclass(frozen=True, slots=True)
class EnergyPlan:
    """What the energy child reads (`source`, `urls`, `metric`), every `interval_s`; with
    `idle_s`, a baseline that long before the load."""

    source: str
    urls: tuple[str, ...] = ()
    metric: MetricSelector | None = None
    interval_s: float = INTERVAL_S
    idle_s: float | None = None

    def to_table(self) -> dict[str, Any]:
        """The `[energy]` table that reads back into this plan."""
        out: dict[str, Any] = {"source": self.source, "interval": self.interval_s}
        if self.urls:
            out["urls"] = list(self.urls)
        if self.metric is not None:
            out["metric"] = self.metric.text
        if self.idle_s is not None:
            out["idle"] = self.idle_s
        return out


def parse_energy(v: dict[str, Any], src: str | None) -> EnergyPlan | None:
    """The `[energy]` keys checked beside one another (each alone by its row): the plan, or
    None without a source."""
    urls, text = v["energy.urls"], v["energy.metric"]
    source = v["energy.source"] or ("metric" if text else "dcgm" if urls else None)
    if source is None:
        for key in ("energy.idle",):
            if v[key] is not None:
                raise ScenarioError(key, v[key], "an energy source beside it (--energy nvml, "
                                    "--energy-url or --energy-metric)", source=src)
        return None
    metric = None
    if source == "metric" or text:
        metric = parse_selector(text or "")
        if metric is None or source != "metric":
            raise ScenarioError("energy.metric", text, SELECTOR_ALLOWED + (
                "" if source == "metric" else ", with --energy metric"), source=src)
    if source != "nvml" and not urls:
        raise ScenarioError("energy.source", source, "--energy-url URL (the exporter's "
                            "/metrics) beside it, or --energy nvml", source=src)
    nodes = [re.sub(r"^\w+://(?:[^@/]*@)?", "", u).split("/", 1)[0] for u in urls or ()]
    if len(set(nodes)) < len(nodes):  # a GPU's key is its node's and its index
        raise ScenarioError("energy.urls", ",".join(urls), "one URL per node (host:port), "
                            "each once", source=src)
    if source == "nvml" and urls:
        raise ScenarioError("energy.urls", ",".join(urls), "none with --energy nvml (NVML "
                            "is read on this host)", source=src)
    return EnergyPlan(source, tuple(urls or ()), metric, float(v["energy.interval"]),
                      seconds_of(v["energy.idle"]))
