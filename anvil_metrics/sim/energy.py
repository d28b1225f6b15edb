"""The simulator's GPUs and their energy: `anvil sim --gpus N --power-model idle=W,per_token=J`
adds a DCGM exporter's gauges to ``GET /metrics``, and ``GET /anvil/energy`` tells the truth.

Why: anvil's energy figures (joules per token, above idle) are checked end to end against a
server whose energy is an exact function of what it has done, read the way a real node is
read (`--energy-url` at a dcgm-exporter's `/metrics`). On a real node the exporter is its
own process and port; here it is the simulator's own `/metrics` (beside its vLLM or SGLang
series, which the energy reader ignores), so one process knows both the tokens and the
joules, and `--energy-url http://HOST:PORT/metrics` reads it as it reads an exporter.

The truth, at a moment t (the simulator's `time.monotonic_ns()`, CLOCK_MONOTONIC: the same
clock as the load process's `perf_counter_ns` on one Linux host):

    energy_j(t) = N × idle_W × (t − t0) + per_token_J × output_tokens(t)

- t0: the simulator's start; `output_tokens(t)`: the generated tokens of the requests
  answered in full by t (a stream's when its last chunk is written; a cancelled one's never:
  `ledger.Ledger.generation_tokens`), so a window's joules are its seconds at idle and its
  answered requests' output tokens;
- each of the N GPUs holds energy_j / N; its counter `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`
  in mJ (a float: exact, where the real exporter prints whole mJ), its gauge
  `DCGM_FI_DEV_POWER_USAGE` in W: the mean power since the previous `/metrics` answer
  (idle_W at the first), labelled as dcgm-exporter labels them (`gpu`, `UUID`, `device`,
  `modelName`, `Hostname`);
- ``GET /anvil/energy``: `{"t_ns", "t0_ns", "gpus", "idle_w", "per_token_j",
  "output_tokens", "energy_j"}` now, the same function (a test recomputes any window).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

DCGM_MODEL = "NVIDIA H100 80GB HBM3"  # what the simulated GPUs say they are
HOSTNAME = "anvil-sim"
_MODEL = re.compile(r"idle=([0-9.eE+-]+),per_token=([0-9.eE+-]+)")


@dataclass(frozen=True, slots=True)
class PowerModel:
    """`--power-model idle=W,per_token=J`: watts per GPU at idle, joules per output token
    (over all the GPUs)."""

    idle_w: float
    per_token_j: float


def parse_power_model(text: str) -> PowerModel:
    """`idle=W,per_token=J`, both finite numbers >= 0; ValueError otherwise (argparse's
    one line)."""
    m = _MODEL.fullmatch(text.replace(" ", ""))
    try:
        model = PowerModel(float(m.group(1)), float(m.group(2))) if m else None
    except ValueError:
        model = None
    if model is None or not all(0 <= x < float("inf") for x in (model.idle_w,
                                                                 model.per_token_j)):
        raise ValueError(f"{text!r}: expected idle=WATTS,per_token=JOULES, both >= 0, "
                         "e.g. idle=100,per_token=0.5")
    return model


class SimGpus:
    """N simulated GPUs: their energy now, as a function of the tokens answered."""

    def __init__(self, gpus: int, model: PowerModel, t0_ns: int) -> None:
        self.gpus, self.model, self.t0_ns = gpus, model, t0_ns
        self._last: tuple[int, float] | None = None  # the previous /metrics answer's (t, J)

    def energy_j(self, t_ns: int, output_tokens: int) -> float:
        """All N GPUs' joules since t0 (the module docstring's function)."""
        m = self.model
        return (self.gpus * m.idle_w * (t_ns - self.t0_ns) / 1e9
                + m.per_token_j * output_tokens)

    def truth(self, output_tokens: int) -> dict[str, float | int]:
        """``GET /anvil/energy``: the function's inputs and value now."""
        t_ns = time.monotonic_ns()
        return {"t_ns": t_ns, "t0_ns": self.t0_ns, "gpus": self.gpus,
                "idle_w": self.model.idle_w, "per_token_j": self.model.per_token_j,
                "output_tokens": output_tokens,
                "energy_j": self.energy_j(t_ns, output_tokens)}

    def exposition(self, output_tokens: int) -> str:
        """The two DCGM families, one series per GPU, as dcgm-exporter writes them."""
        t_ns = time.monotonic_ns()
        total = self.energy_j(t_ns, output_tokens)
        last, self._last = self._last, (t_ns, total)
        dt_s = (t_ns - last[0]) / 1e9 if last is not None else 0.0
        power = ((total - last[1]) / dt_s / self.gpus if last is not None and dt_s > 0
                 else self.model.idle_w)
        lines = ["# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
                 "# TYPE DCGM_FI_DEV_POWER_USAGE gauge"]
        lines += [f"DCGM_FI_DEV_POWER_USAGE{{{self._labels(i)}}} {power!r}"
                  for i in range(self.gpus)]
        lines += ["# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption "
                  "since boot (in mJ).", "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"]
        per_gpu_mj = total / self.gpus * 1000.0
        lines += [f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{self._labels(i)}}} {per_gpu_mj!r}"
                  for i in range(self.gpus)]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _labels(i: int) -> str:
        return (f'gpu="{i}",UUID="GPU-00000000-0000-4000-8000-{i:012d}",device="nvidia{i}",'
                f'modelName="{DCGM_MODEL}",Hostname="{HOSTNAME}"')
