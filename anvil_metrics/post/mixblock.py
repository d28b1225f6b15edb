"""A request mix's `mix` block: each class's and each model's share and figures.

Why a block of its own: a run of short chat turns and long summaries, or of one base
model and its LoRA adapters, answers "how did each fare?", which the run-wide `metrics`
cannot: they pool every class. So each class and each model gets its share beside the
share it was planned to have, and its own latencies.

    "mix": {
      "plan": {...},                    # the [[request_class]] / [models] tables and the
                                        # seed of the draws, as checked (load/mix.py)
      "classes": [{"name": "chat", "expected_share": 0.75, "requests": 1497,
                   "share": 0.7485, "ttft_p50_ms": …, "ttft_p95_ms": …,
                   "e2e_p50_ms": …, "e2e_p95_ms": …, "prompt_tokens_mean": …,
                   "output_tokens_mean": …}, …],      # [] without classes
                                        # a check class's also: "check": "json",
                                        # "verdicts": {judged, passed, pass_rate,
                                        # pass_rate_ci95_low, pass_rate_ci95_high}
      "models": [{"name": "lora-a", …same keys}, …]   # [] without models
    }

Definitions: a group's rows are the completed requests whose `class_index` (or
`model_index`) is its position; `requests` counts them; `share` is that count over the
completed rows that have a class (a model), null when none has; `expected_share` is the
plan's probability (`Mix.class_shares`, `model_shares`); percentiles are nearest-rank
(`stats`); a mean is over the group's rows that have the value, null when none has. A
check class's `judged` are its rows with a verdict (`check_passed`), `passed` those that
passed, `pass_rate` passed / judged (null when none), with its 95 % Wilson score interval
(`stats.wilson_interval`).
`anvil verify` recomputes the whole block from the rows and the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
from msgspec import Struct

from anvil_metrics.errors import ScenarioError
from anvil_metrics.fieldtypes import Count, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.load.mix import Mix, mix_from_table
from anvil_metrics.post.blockkit import (
    ABSENT,
    E2E_P50,
    E2E_P95,
    TTFT_P50,
    TTFT_P95,
    BuildInputs,
    _Absent,
    latencies,
    mean_of,
    num,
)
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing, fmt, set_without_block
from anvil_metrics.post.stats import pass_rate

_COLUMNS = {"classes": "class_index", "models": "model_index"}


class PassRate(Struct, forbid_unknown_fields=True):
    """A check class's verdicts over some of its rows (all of them, or a step's)."""

    judged: Annotated[Count, described("", "its rows with a verdict (check_passed not null)")]
    passed: Annotated[Count, described("", "those whose answer passed the suite's judge")]
    pass_rate: Annotated[float | None, described(
        "", "passed / judged; null when none was judged")]
    pass_rate_ci95_low: Annotated[float | None, described(
        "", "the pass rate's 95 % Wilson score interval, its lower end")]
    pass_rate_ci95_high: Annotated[float | None, described(
        "", "the pass rate's 95 % Wilson score interval, its upper end")]


class MixGroup(Struct, forbid_unknown_fields=True):
    """One request class's (or model's) share and figures."""

    name: Annotated[str, described("", "the class's (model's) name")]
    expected_share: Annotated[float, described(
        "", "its planned probability for one request: weight / Σ weights for a class; for a "
            "model, its assignment's probability, a class's own model counted in that "
            "class's share")]
    requests: Annotated[Count, described("", "completed requests of it")]
    share: Annotated[float | None, described(
        "", "requests / the completed requests that have a class (a model); null when none "
            "has")]
    ttft_p50_ms: TTFT_P50
    ttft_p95_ms: TTFT_P95
    e2e_p50_ms: E2E_P50
    e2e_p95_ms: E2E_P95
    prompt_tokens_mean: Annotated[float | None, described(
        "tok", "mean prompt_tokens of its rows that have it")]
    output_tokens_mean: Annotated[float | None, described("tok",
                                                          "mean output_tokens of its rows")]
    # a plan with media (`load/media.py`) only: every group has these, other plans none
    request_bytes_mean: Annotated[float | None, described(
        "B", "mean request_bytes of its rows that have it (a plan with media only)")] = None
    media_images: Annotated[Count | None, described(
        "", "Σ media_images of its rows; null when none has it (a plan with media only)")
    ] = None
    media_audio_clips: Annotated[Count | None, described(
        "", "Σ media_audio_clips of its rows; null when none has it (a plan with media "
            "only)")] = None
    media_image_tokens_mean: Annotated[float | None, described(
        "tok", "mean media_image_tokens (the server's) of its rows that have it (a plan with "
               "media only)")] = None
    media_audio_tokens_mean: Annotated[float | None, described(
        "tok", "mean media_audio_tokens (the server's) of its rows that have it (a plan "
               "with media only)")] = None
    check: Annotated[str | None, described(
        "", "the check suite the class asks (a check class only)")] = None
    verdicts: Annotated[PassRate | None, described(
        "", "its answers' verdicts and pass rate (a check class only)")] = None


class MixBlock(Struct, forbid_unknown_fields=True):
    """A request mix's classes and models (module docstring)."""

    plan: Annotated[dict[str, Any], described(
        "", "the [[request_class]] tables (as request_class), the [models] table and the "
            "draws' seed (the scenario's context_seed), as checked (load/mix.py)")]
    classes: Annotated[list[MixGroup], described(
        "", "one block per request class, in the plan's order; [] without classes")]
    models: Annotated[list[MixGroup], described(
        "", "one block per model a request may name ([models]' names, then the classes' "
            "own); [] without models")]


def _media(mine: RowColumns) -> JsonObject:
    """A group's media figures (a plan with media)."""
    def total(name: str) -> int | None:
        v = mine.values(name)
        v = v[~np.isnan(v)]
        return int(v.sum()) if len(v) else None

    return {"request_bytes_mean": mean_of(mine.values("request_bytes")),
            "media_images": total("media_images"),
            "media_audio_clips": total("media_audio_clips"),
            "media_image_tokens_mean": mean_of(mine.values("media_image_tokens")),
            "media_audio_tokens_mean": mean_of(mine.values("media_audio_tokens"))}


def _groups(rows: RowColumns, column: str, names: tuple[str, ...],
            expected: tuple[float, ...], media: bool = False,
            checks: tuple[str | None, ...] = ()) -> list[JsonObject]:
    present = rows.present[column]
    index = rows.counts[column]
    total = int(present.sum())
    out = []
    for i, (name, share) in enumerate(zip(names, expected, strict=True)):
        mine = rows.select(present & (index == i))
        out.append({"name": name, "expected_share": share, "requests": len(mine),
                    "share": len(mine) / total if total else None, **latencies(mine),
                    "prompt_tokens_mean": mean_of(mine.values("prompt_tokens")),
                    "output_tokens_mean": mean_of(mine.values("output_tokens")),
                    **(_media(mine) if media else {})})
        if checks and checks[i] is not None:
            out[-1].update(check=checks[i], verdicts=pass_rate(mine))
    return out


def build_mix(table: Mapping[str, JsonValue], rows: RowColumns) -> JsonObject:
    """The block (module docstring) of a run whose `params.mix` is `table`, from its rows."""
    mix = mix_from_table(table, "params.mix")
    media = any(c.media is not None for c in mix.classes)
    return {"plan": mix.to_table(),
            "classes": _groups(rows, "class_index", tuple(c.name for c in mix.classes),
                               mix.class_shares(), media, tuple(c.check for c in mix.classes))
            if mix.classes else [],
            "models": _groups(rows, "model_index", mix.model_names, mix.model_shares(),
                              media)}


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run with a mix (`params.mix`), else ABSENT."""
    table = inputs.params.get("mix")
    return build_mix(table, inputs.rows) if isinstance(table, dict) else ABSENT


def _plan(block: Mapping[str, JsonValue], problems: list[str]) -> Mix | None:
    try:
        return mix_from_table(block["plan"], "mix.plan")
    except ScenarioError as e:
        problems.append(f"mix.plan: {e}")
        return None


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """The block recomputed from the rows (when they are well-typed), and rows that name a
    class or model only in a run that has a mix."""
    block = doc.get("mix")
    if block is None:
        problems += set_without_block(rows, _COLUMNS.values(), "mix")
        return
    mix = _plan(block, problems)
    if mix is None or rows is None:
        return
    for key, column in _COLUMNS.items():
        if column in rows.absent:
            problems.append(f"request_timings[]: a run with a mix has {column} in every row")
            return
        size = len(mix.classes) if key == "classes" else len(mix.model_names)
        if (rows.counts[column][rows.present[column]] >= size).any():
            problems.append(f"request_timings[].{column}: a position past the plan's "
                            f"{size} {key}")
            return
    want = build_mix(block["plan"], rows)
    for key in ("classes", "models"):
        got = block[key]
        if len(got) != len(want[key]):
            problems.append(f"mix.{key}: expected {len(want[key])} entries, file has "
                            f"{fmt(got)}")
            continue
        for i, (g, w) in enumerate(zip(got, want[key], strict=True)):
            problems += differing(f"mix.{key}[{i}]", g, w, w)


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's lines for the `mix` block (none without one): a row per class and model."""
    b = doc.get("mix")
    if not isinstance(b, dict):
        return []
    lines = []
    for key, title in (("classes", "class"), ("models", "model")):
        groups = b.get(key) or []
        if not groups:
            continue
        lines.append(f"{title:<16}{'requests':>10}{'share':>8}{'planned':>9}{'ttft p50':>11}"
                     f"{'ttft p95':>11}{'e2e p50':>11}  (ms)")
        for g in groups:
            lines.append(f"{str(g.get('name'))[:15]:<16}{g.get('requests'):>10}"
                         f"{num(g.get('share'), '.3f'):>8}"
                         f"{num(g.get('expected_share'), '.3f'):>9}"
                         f"{num(g.get('ttft_p50_ms'), ',.1f'):>11}"
                         f"{num(g.get('ttft_p95_ms'), ',.1f'):>11}"
                         f"{num(g.get('e2e_p50_ms'), ',.1f'):>11}" + _passed(g))
    for g in b.get("classes") or []:
        if g.get("media_images") or g.get("media_audio_clips"):
            lines.append(f"media {g.get('name')}: {g.get('media_images') or 0} images, "
                         f"{g.get('media_audio_clips') or 0} audio clips; request bytes mean "
                         f"{num(g.get('request_bytes_mean'), ',.0f')}; media tokens mean "
                         f"{num(g.get('media_image_tokens_mean'), ',.1f')} image, "
                         f"{num(g.get('media_audio_tokens_mean'), ',.1f')} audio")
    return lines


def _passed(g: Mapping[str, Any]) -> str:
    """A check class's pass rate and its interval, after its latencies ("" for others)."""
    v = g.get("verdicts")
    if not isinstance(v, dict):
        return ""
    return (f"  {g.get('check')}: passed {v.get('passed')}/{v.get('judged')} = "
            f"{num(v.get('pass_rate'), '.3f')} [{num(v.get('pass_rate_ci95_low'), '.3f')}, "
            f"{num(v.get('pass_rate_ci95_high'), '.3f')}]")


def check_classes(table: Any) -> dict[int, str]:
    """A mix's check classes (`params.mix`, or the block's plan): position -> name; none
    for a table that is not a mix (its own check says so)."""
    if not isinstance(table, Mapping):
        return {}
    try:
        mix = mix_from_table(table)
    except ScenarioError:
        return {}
    return {i: c.name for i, c in enumerate(mix.classes) if c.check is not None}


def class_pass_rates(rows: RowColumns, checks: Mapping[int, str]) -> JsonObject:
    """Each check class's `PassRate` over `rows`, by class name."""
    present, index = rows.present["class_index"], rows.counts["class_index"]
    return {name: pass_rate(rows.select(present & (index == i))) for i, name in checks.items()}
