"""The public summary's `functional` and `multimodal` blocks, from the campaign's checks.

Why its own module: `folder.py` reads files and `decide.py` computes the performance
figures; turning `anvil-serving.checks/v1` documents (one per variant, `campaign/checkplan.py`)
into the example's blocks is a third, separate rule set, kept pure here.

The example reports checks per *model*, while a campaign checks each *variant* (model ×
speculation). A model's value is its worst variant's — a check passes for a model only if
it passed with speculation on and off: results order pass < fail < error (error wins: it
could not be decided), counts take the fewest passed, leakage is true if any variant leaked.
Seconds (near-limit retrieval, images) are the mean over the model's variants.

Models are keyed as the example keys them (`model_key`: "official-fp8" -> "official_fp8").
When every model has the same functional values they are given once, under `both_models`
(two models) or `all_models` (more), as in the example; else under each model's name.
`quality` and `near_limit_retrieval` are always per model. A suite a campaign did not run
is absent, never filled in; the functional gate reads the candidate variant's own suites.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from anvil_metrics.checks.registry import FUNCTIONAL_SUITES

_RANK = {"pass": 0, "fail": 1, "error": 2}
# the example's functional fields, in its order: suite -> how its value is written
_COUNTED = ("tools",)  # "passed/total"
_LEAKAGE_FIELD = "thinking_disabled_reasoning_leakage"


@dataclass(frozen=True, slots=True)
class VariantChecks:
    """One variant's checks document (None: the campaign has none for it)."""

    model: str
    speculation: str
    doc: Mapping[str, Any] | None

    @property
    def id(self) -> str:
        return f"{self.model}/{self.speculation}"


def _suite(doc: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    checks = doc.get("checks") if doc else None
    value = checks.get(name) if isinstance(checks, Mapping) else None
    return value if isinstance(value, Mapping) and value.get("result") in _RANK else None


def _worst(results: Sequence[str]) -> str:
    return max(results, key=_RANK.__getitem__)


def _count(rows: Sequence[Mapping[str, Any]]) -> str:
    worst = min(rows, key=lambda r: (r.get("passed", 0), -r.get("total", 0)))
    return f"{worst.get('passed')}/{worst.get('total')}"


def _retrieval_field(rows: Sequence[Mapping[str, Any]]) -> str:
    sizes = {r.get("requested_context_tokens") for r in rows}
    size = sizes.pop() if len(sizes) == 1 else None
    # thousands, as the example writes 131,072 tokens: "retrieval_131k"
    return f"retrieval_{round(size / 1000)}k" if isinstance(size, int) and size >= 1000 \
        else "retrieval"


def _leakage(rows: Sequence[Mapping[str, Any]]) -> bool | None:
    values = [r.get(_LEAKAGE_FIELD) for r in rows]
    if any(v is True for v in values):
        return True
    return False if values and all(v is False for v in values) else None


def model_functional(variants: Sequence[VariantChecks]) -> dict[str, Any]:
    """One model's functional values in the example's order (its variants combined)."""
    out: dict[str, Any] = {}
    for name in FUNCTIONAL_SUITES:
        if name in ("quality", "near_limit"):
            continue
        rows = [r for v in variants if (r := _suite(v.doc, name)) is not None]
        if len(rows) != len(variants) or not rows:
            continue  # not run for every variant: not reported for the model
        if name in _COUNTED:
            out[name] = _count(rows)
        elif name == "reasoning_leakage":
            out[_LEAKAGE_FIELD] = _leakage(rows)
        elif name == "retrieval":
            out[_retrieval_field(rows)] = _worst([r["result"] for r in rows])
        else:
            out[name] = _worst([r["result"] for r in rows])
    return out


def model_key(model: str) -> str:
    """A model label as the example's keys write it: "official-fp8" -> "official_fp8" (it
    also names fields such as "official_fp8_elapsed_seconds")."""
    return model.replace("-", "_").replace(".", "_")


def _by_model(checks: Sequence[VariantChecks]) -> dict[str, list[VariantChecks]]:
    models: dict[str, list[VariantChecks]] = {}
    for v in checks:
        models.setdefault(model_key(v.model), []).append(v)
    return models


def _quality(variants: Sequence[VariantChecks]) -> dict[str, str] | None:
    rows = [r for v in variants if (r := _suite(v.doc, "quality")) is not None]
    if not rows or len(rows) != len(variants):
        return None
    parts: dict[str, str] = {}
    for part in rows[0].get("parts") or {}:
        counted = [r["parts"][part] for r in rows if part in (r.get("parts") or {})]
        if len(counted) == len(rows):
            parts[part] = _count(counted)
    return parts or None


def _seconds(values: Sequence[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return round(fmean(numbers), 1) if numbers and len(numbers) == len(values) else None


def functional_block(checks: Sequence[VariantChecks]) -> dict[str, Any] | None:
    """The summary's `functional` block; None when no variant has any functional result."""
    models = _by_model(checks)
    per_model = {m: model_functional(vs) for m, vs in models.items()}
    block: dict[str, Any] = {}
    values = list(per_model.values())
    if values and all(v == values[0] for v in values) and len(values) > 1 and values[0]:
        block["both_models" if len(values) == 2 else "all_models"] = values[0]
    else:
        block.update({m: v for m, v in per_model.items() if v})
    quality = {m: q for m, vs in models.items() if (q := _quality(vs)) is not None}
    if quality:
        block["quality"] = quality
    near: dict[str, Any] = {}
    for m, vs in models.items():
        rows = [r for v in vs if (r := _suite(v.doc, "near_limit")) is not None]
        if not rows or len(rows) != len(vs):
            continue
        requested = {r.get("requested_context_tokens") for r in rows}
        if len(requested) == 1 and "requested_context_tokens" not in near:
            near["requested_context_tokens"] = requested.pop()
        near[f"{m}_elapsed_seconds"] = _seconds([r.get("request_elapsed_s", r.get("elapsed_s"))
                                                 for r in rows])
        near[m] = _worst([r["result"] for r in rows])
    if near:
        block["near_limit_retrieval"] = near
    return block or None


def multimodal_block(checks: Sequence[VariantChecks]) -> dict[str, Any] | None:
    """The summary's `multimodal` block; None when no variant ran the multimodal suite."""
    rows = [(v, r) for v in checks if (r := _suite(v.doc, "multimodal")) is not None]
    if not rows:
        return None
    transports = {(v.doc or {}).get("options", {}).get("transport") for v, _ in rows}
    block: dict[str, Any] = {
        "transport": transports.pop() if len(transports) == 1 else None,
        "mtp_enabled": any(v.speculation != "off" for v, _ in rows),
    }
    for m in _by_model([v for v, _ in rows]):
        mine = [r for v, r in rows if model_key(v.model) == m]
        block[m] = {"general_image_seconds": _seconds([r.get("general_image_seconds")
                                                       for r in mine]),
                    "ocr_seconds": _seconds([r.get("ocr_seconds") for r in mine]),
                    "result": _worst([r["result"] for r in mine])}
    lists = [r.get("not_tested") for _, r in rows if isinstance(r.get("not_tested"), list)]
    block["not_tested"] = sorted({x for lst in lists for x in lst}, key=lists[0].index) \
        if lists and all(set(lst) == set(lists[0]) for lst in lists) else \
        sorted({x for lst in lists for x in lst})
    return block


def gate_results(checks: Sequence[VariantChecks], candidate: str) -> dict[str, bool] | None:
    """The candidate variant's functional suites: name -> passed; None without its checks."""
    mine = next((v for v in checks if v.id == candidate), None)
    if mine is None or mine.doc is None:
        return None
    out = {name: r["result"] == "pass" for name in FUNCTIONAL_SUITES
           if (r := _suite(mine.doc, name)) is not None}
    return out or None


def check_words(checks: Sequence[VariantChecks]) -> list[str]:
    """Retained failures in words: suites that errored or needed retries, per variant."""
    words = []
    for v in checks:
        if v.doc is None:
            continue
        for name, r in (v.doc.get("checks") or {}).items():
            if not isinstance(r, Mapping):
                continue
            if r.get("result") == "error":
                why = r.get("error") or next((c.get("error") for c in r.get("cases") or ()
                                              if isinstance(c, Mapping) and c.get("error")),
                                             None)
                words.append(f"Checks of {v.id}: suite {name} could not be completed"
                             f"{f': {why}' if why else ''}.")
            retried = sum(len(c.get("retries") or ()) for c in r.get("cases") or ()
                          if isinstance(c, Mapping))
            if retried:
                words.append(f"Checks of {v.id}: suite {name} needed {retried} retried "
                             "request(s) (503/429 answers), each listed in its checks file.")
    return words
