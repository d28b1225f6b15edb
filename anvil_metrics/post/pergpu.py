"""Per GPU and per dollar: the run's own throughput over its GPUs, and what a million tokens
cost at a GPU-hour price.

Why: a serving configuration is bought by the GPU-hour, so the figure it is promoted on is
per GPU (InferenceX's and vLLM's sweep plots draw output tok/s per GPU against tok/s per
user). The figures divide the run's own figures over its measured window (`wall_clock_ms`,
a step's own window in `steps[]`) by `gpus` (--gpus, the scenario's meta.gpus), never a
separate clock, so they agree with `throughput_tok_s` to the last bit:

- `output_tok_s_per_gpu = throughput_tok_s / gpus`;
- `requests_s_per_gpu = completed / (wall_clock_ms / 1000) / gpus`;
- with --gpu-hour-price (meta.gpu_hour_price), `usd_per_m_output_tokens = price × gpus ×
  (wall_clock_ms / 3600000) / output_tokens × 1e6`, and `usd_per_m_input_tokens` the same
  over `prompt_tokens`. Input and output do not share the GPU-hours: each figure charges
  all of them to its own tokens, as the common "cost per million tokens" does (a price
  list's two numbers are not a split of one bill). Null without a price or tokens.

They are `metrics` keys (`catalog.PER_GPU_AGGREGATES`: one definition each, conditional)
of the run and of each step, set here; the `per_gpu` block states their inputs (gpus,
price, window, GPU-hours, cost). Absent without gpus. Tok/s per user is the rows' own
(`stats.per_user`), never throughput ÷ concurrency. `anvil verify` recomputes all of it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Annotated, Any

from msgspec import Struct

from anvil_metrics.catalog import PER_GPU_AGGREGATES
from anvil_metrics.fieldtypes import Count, Figure, described, num
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import fmt, same

KEYS = tuple(a.name for a in PER_GPU_AGGREGATES)
MS_PER_HOUR = 3_600_000


class PerGpu(Struct, forbid_unknown_fields=True, kw_only=True):
    """The inputs of the per-GPU and per-dollar figures (module docstring)."""

    gpus: Annotated[Count, described("", "the GPUs serving the run (--gpus, meta.gpus)")]
    gpu_hour_price_usd: Annotated[Figure | None, described(
        "USD", "the price of one GPU-hour (--gpu-hour-price, meta.gpu_hour_price); null: "
               "not given")]
    window_s: Annotated[Figure | None, described(
        "s", "the measured window the figures are over: wall_clock_ms / 1000")]
    gpu_hours: Annotated[Figure | None, described(
        "h", "gpus × wall_clock_ms / 3600000: the GPU-hours the window held")]
    cost_usd: Annotated[Figure | None, described(
        "USD", "gpu_hour_price_usd × gpu_hours, charged whole to the output tokens "
               "(usd_per_m_output_tokens) and, on its own, to the prompt tokens "
               "(usd_per_m_input_tokens); null without a price")]


def _div(a: float | int | None, b: float | int | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def figures(metrics: Mapping[str, Any], completed: int, wall_ms: float | None, gpus: int,
            price: float | None) -> dict[str, float | None]:
    """The per-GPU keys of one `metrics` block (the run's or a step's) over its window."""
    hours = _div(wall_ms, MS_PER_HOUR)
    cost = None if price is None or hours is None else price * gpus * hours
    per_m = {k: None if cost is None else _per_million(cost, metrics.get(tok))
             for k, tok in (("usd_per_m_output_tokens", "output_tokens"),
                            ("usd_per_m_input_tokens", "prompt_tokens"))}
    return {"output_tok_s_per_gpu": _div(metrics.get("throughput_tok_s"), gpus),
            "requests_s_per_gpu": _div(_div(completed, _div(wall_ms, 1000)), gpus), **per_m}


def _per_million(cost: float, tokens: Any) -> float | None:
    return cost / tokens * 1e6 if isinstance(tokens, int) and tokens > 0 else None


def block(gpus: int, price: float | None, wall_ms: float | None) -> JsonObject:
    """The `per_gpu` block: the figures' inputs."""
    hours = _div(wall_ms, MS_PER_HOUR)
    gpu_hours = None if hours is None else gpus * hours
    return {"gpus": gpus, "gpu_hour_price_usd": price,
            "window_s": _div(wall_ms, 1000), "gpu_hours": gpu_hours,
            "cost_usd": None if price is None or gpu_hours is None else price * gpu_hours}


def _steps(doc: Mapping[str, Any]) -> list[MutableMapping[str, Any]]:
    steps = doc.get("steps")
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _step_window_ms(step: Mapping[str, Any]) -> float | None:
    started, ended = step.get("started_s"), step.get("ended_s")
    if not isinstance(started, float) or not isinstance(ended, float):
        return None
    return (ended - started) * 1000


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run given gpus, else ABSENT; it sets the per-GPU keys of `metrics` and
    of each step's `metrics` (after `steps` in `BLOCKS`)."""
    gpus, price = inputs.params.get("gpus"), inputs.params.get("gpu_hour_price_usd")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        return ABSENT
    price = float(price) if isinstance(price, (int, float)) else None
    doc = inputs.doc
    doc["metrics"].update(figures(doc["metrics"], doc["completed"], doc["wall_clock_ms"],
                                  gpus, price))
    for step in _steps(doc):
        step["metrics"].update(figures(step["metrics"], step["completed"],
                                       _step_window_ms(step), gpus, price))
    return block(gpus, price, doc["wall_clock_ms"])


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """The block and every per-GPU key, recomputed from the document's own figures."""
    got = doc.get("per_gpu")
    places = [("metrics", doc.get("metrics"), doc.get("completed"), doc.get("wall_clock_ms"))]
    places += [(f"steps[{i}].metrics", s.get("metrics"), s.get("completed"),
                _step_window_ms(s)) for i, s in enumerate(_steps(doc))]
    if not isinstance(got, dict):
        for where, metrics, _, _ in places:
            for key in sorted(set(KEYS) & set(metrics or {})):
                problems.append(f"{where}.{key}: set, but the file has no per_gpu block")
        return
    gpus, price = got.get("gpus"), got.get("gpu_hour_price_usd")
    if type(gpus) is not int or gpus < 1 or not (price is None or type(price) is float):
        return  # the block's type check names it
    want = block(gpus, price, doc.get("wall_clock_ms"))
    for key, value in want.items():
        if not same(got.get(key), value):
            problems.append(f"per_gpu.{key}: file has {fmt(got.get(key))}, recomputed "
                            f"{fmt(value)}")
    for where, metrics, completed, wall in places:
        if not isinstance(metrics, dict) or type(completed) is not int:
            continue
        for key, value in figures(metrics, completed, wall, gpus, price).items():
            if not same(metrics.get(key), value):
                problems.append(f"{where}.{key}: file has {fmt(metrics.get(key))}, recomputed "
                                f"{fmt(value)} from its window, tokens, gpus and price")


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """The CLI's line: per GPU, per user and per million tokens."""
    got, m = doc.get("per_gpu"), doc.get("metrics") or {}
    if not isinstance(got, dict):
        return []
    cost = ""
    if got.get("gpu_hour_price_usd") is not None:
        cost = (f"; ${num(m.get('usd_per_m_output_tokens'), ',.3f')}/M output, "
                f"${num(m.get('usd_per_m_input_tokens'), ',.3f')}/M input tokens at "
                f"${num(got['gpu_hour_price_usd'], ',.2f')}/GPU-h")
    return [f"per GPU ({got['gpus']}): {num(m.get('output_tok_s_per_gpu'), ',.1f')} output "
            f"tok/s, {num(m.get('requests_s_per_gpu'), ',.3f')} req/s; per user: "
            f"{num(m.get('decode_tok_s_p50'), ',.1f')} tok/s p50, "
            f"{num(m.get('decode_tok_s_weighted'), ',.1f')} weighted by time{cost}"]
