"""The figures of `anvil-serving.public-benchmark-summary/v1`, computed from a campaign's runs.

Why: nobody promotes a model on one run. A campaign runs each (model, speculation) variant
several times; this module turns those benchmark documents (as loaded, one dict each) into
the summary's `performance[]` rows, `sampled_speculative_telemetry[]`, `retained_failures[]`,
the gates and the `decision` — pure computation: reading the campaign folder, writing the
file and the human report are the callers' jobs. The statistics are in `post/significance.py`.

Definitions (field names as in the spec's example, `../shared/spec/public-summary-v1.md`):

- a row's `ttft_p50_ms`, `effective_prefill_tok_s_p50`, `decode_tok_s_p50`, `e2e_p50_ms`
  and the added `prompt_tokens_p50` (the server-counted `usage.prompt_tokens`): the mean
  over the variant's runs of each run's `metrics.<same key>` (its nearest-rank median);
  `aggregate_output_tok_s`: the mean over runs of `metrics.throughput_tok_s`. If any run
  lacks the figure, the row's figure is null and `null_reasons` names the runs: a mean over
  the runs that happen to have it would be another definition. `runs` is how many runs.
- `decode_delta_percent`, `e2e_delta_percent`: `100 × (mean / mean − 1)` of the run values
  against the same model's speculation `"off"` variant, from full-precision means. The off
  variant itself carries no delta field (not applicable, as in the example); a model without
  an off variant carries null with the reason. Added beside each: `<d>_ci95_percent`, the
  bootstrap interval, and `<d>_mann_whitney_p`, the two-sided p-value of the two variants'
  per-run values (`post/significance.py`), and `<d>_verdict`: the same rule as `anvil
  compare`'s (`significance.effect_verdict`) with a minimum effect of `MIN_EFFECT_PERCENT`
  (2 %) of the delta: `better`/`worse` (by the figure's direction) only when the 95 %
  interval lies wholly beyond ±2 %, `equivalent` when the 90 % interval of the same draws
  (same seed) lies within it, else `inconclusive`; null without an interval. The gates keep
  their own stated thresholds.
- `sampled_speculative_telemetry[]`: one row per variant whose speculation is not `"off"`:
  `accepted_length_range` / `acceptance_rate_range` = [min, max] over its runs of the runs'
  `server.spec_decode.accepted_length` / `.acceptance_rate`, each over the runs that have it;
  `runs_sampled` counts the runs that have either, `unsampled_runs` names those lacking
  either (left out of that range, not counted as 0).
- gates, each listed in the added `gates` block with its outcome and the figures it used:
  * `<metric>_improvement_percent: T` (see `IMPROVEMENT_GATES`): the candidate against the
    incumbent; improvement = the delta for higher-is-better rates, minus the delta for
    lower-is-better times (e2e 913.7 against 954.2 ms is a 4.2 % improvement). `"pass"` when
    the whole 95 % interval of the improvement is ≥ T, `"fail"` when it is wholly < T,
    `"not_significant"` when it contains T (or no interval exists, one run a variant);
  * `no_saturated_runs: true`: `"fail"` if any run's `client.saturated` is true,
    `"not_evaluated"` if some run does not say, else `"pass"`; `false`: `"not_required"`;
  * `functional: "all_pass"`: every functional check given passed; without check results,
    `"not_evaluated"`;
  * `check_pass_rate_under_load: R`: every check class of the candidate's runs passes at
    least R of its answers under load, pooled over its runs (`summary/gates.py`, with the
    saturation and functional gates and the `checks_under_load` block).
  A gate whose inputs are missing is `"not_evaluated"` with the reason, never a pass.
- `decision`: `"promotion"` when every gate is `"pass"` or `"not_required"` (and one is
  `"pass"`), else `"no-promotion"`; null when no gate was given or required: a promotion
  nothing was asked of is no decision (`decision_reasons` says why either way).
- `performance_protocol`: `requests_per_run`, `concurrency`, `max_output_tokens` = the
  runs' `requests`, `concurrency`, `max_tokens`; `configured_input_tokens` = the one planned
  prompt size of the runs' `context_distribution`; `runs_per_model` = runs per variant; each
  null with the reason when the runs do not agree (the campaign's plan is not evidence of
  what ran). `aggregation` in words, with the placements' labels when given.
- `retained_failures[]`: one sentence per run with failed requests (counted by kind, HTTP
  statuses named), per saturated run and per partial run.

Rounding for display (`DISPLAY_DECIMALS`, `rounded`): each row figure to its own decimals
(`summaryfigures.SUMMARY_FIGURES`: times and rates to one decimal, prefill rates and prompt
tokens to whole numbers), deltas to `summaryfigures.DELTA_DECIMALS`, telemetry ranges to two
decimals, as the example rounds; the JSON keeps full precision. The row figures, the benchmark
metric each is the mean of, and the deltas are `summaryfigures`' (`ROW_METRICS`, `DELTAS`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from anvil_metrics.errors import UsageError
from anvil_metrics.post.significance import (
    CONFIDENCE,
    MIN_EFFECT_PERCENT,
    RESAMPLES,
    Interval,
    bootstrap_delta_ci,
    delta_percent,
    effect_verdict,
    equivalence_confidence,
    mann_whitney,
    mean,
)
from anvil_metrics.summary.gates import (
    GateResult,
    VariantRuns,
    functional_gate,
    pass_rate_gate,
    run_name,
    saturation_gate,
)
from anvil_metrics.summaryfigures import (
    DELTA_DECIMALS,
    IMPROVEMENT_GATES,
    KNOWN_GATES,
    PASS_RATE_GATE,
    SUMMARY_FIGURES,
    run_figure,
)

OFF = "off"
# summary row field -> the benchmark's `metrics` key it is the mean of
ROW_METRICS = tuple((f.name, f.metric) for f in SUMMARY_FIGURES)
BETTER = {f.name: f.better for f in SUMMARY_FIGURES}
OPTIONAL = frozenset(f.name for f in SUMMARY_FIGURES if f.optional)
# delta field -> the summary row field it is the change of
DELTAS = tuple((f.delta, f.name) for f in SUMMARY_FIGURES if f.delta)
TELEMETRY_DECIMALS = {"accepted_length_range": 2, "acceptance_rate_range": 2}
DISPLAY_DECIMALS = {**{f.name: f.decimals for f in SUMMARY_FIGURES},
                    **{name: DELTA_DECIMALS for name, _ in DELTAS}, **TELEMETRY_DECIMALS}
PASSING = ("pass", "not_required")


@dataclass(frozen=True, slots=True)
class Comparison:
    """One variant against a reference variant on one row field: the delta of the means,
    its bootstrap interval and the Mann–Whitney p-value of the per-run values."""

    field: str
    variant: str
    reference: str
    delta_percent: float | None
    interval: Interval
    mann_whitney_p: float | None
    reason: str | None  # why `delta_percent` is null
    verdict: str | None = None  # `significance.effect_verdict` at MIN_EFFECT_PERCENT


@dataclass(frozen=True, slots=True)
class Summary:
    """The computed members of the summary document (`to_json` gives them as the file has
    them); the facts, checks and restoration are added by the caller."""

    performance_protocol: Mapping[str, Any]
    performance: tuple[dict[str, Any], ...]
    sampled_speculative_telemetry: tuple[dict[str, Any], ...]
    retained_failures: tuple[str, ...]
    gates: tuple[GateResult, ...]
    decision: str | None
    decision_reasons: tuple[str, ...]
    statistics: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"decision": self.decision,
                "performance_protocol": dict(self.performance_protocol),
                "performance": list(self.performance),
                "sampled_speculative_telemetry": list(self.sampled_speculative_telemetry),
                "retained_failures": list(self.retained_failures),
                "gates": [g.to_json() for g in self.gates],
                "decision_reasons": list(self.decision_reasons),
                "statistics": dict(self.statistics)}


def run_values(variant: VariantRuns, metric: str) -> tuple[list[float], str | None]:
    """The variant's per-run `metrics[metric]`, or ([], why) when any run lacks it."""
    if not variant.runs:
        return [], f"{variant.id} has no runs"
    values, missing = [], []
    for i, run in enumerate(variant.runs):
        v = run_figure(run, metric)
        if not _number(v):
            missing.append(run_name(run, i))
        else:
            values.append(float(v))
    if missing:
        return [], f"{metric} is null or absent in {', '.join(missing)} of {variant.id}"
    return values, None


def compare(variant: VariantRuns, reference: VariantRuns, field: str, *, seed: int,
            resamples: int = RESAMPLES) -> Comparison:
    """`variant` against `reference` on a row field (module doc)."""
    metric = dict(ROW_METRICS)[field]
    x, why_x = run_values(variant, metric)
    r, why_r = run_values(reference, metric)
    why = why_x or why_r
    if why:
        return Comparison(field, variant.id, reference.id, None, Interval(None, None, why),
                          None, why)
    delta = delta_percent(x, r)
    if delta is None:
        why = f"the mean {field} of {reference.id} is zero"
        return Comparison(field, variant.id, reference.id, None, Interval(None, None, why),
                          None, why)
    test = mann_whitney(x, r)
    ci = bootstrap_delta_ci(x, r, seed=seed, resamples=resamples)
    eq = bootstrap_delta_ci(x, r, seed=seed, resamples=resamples,
                            confidence=equivalence_confidence(CONFIDENCE))
    pairs = [None if i.as_list() is None else tuple(i.as_list()) for i in (ci, eq)]
    verdict = effect_verdict(pairs[0], pairs[1], MIN_EFFECT_PERCENT, BETTER[field])
    return Comparison(field, variant.id, reference.id, delta, ci,
                      None if test is None else test.p_two_sided, None, verdict)


def performance_row(variant: VariantRuns, off: VariantRuns | None, *, seed: int,
                    resamples: int = RESAMPLES) -> dict[str, Any]:
    """One `performance[]` row (module doc)."""
    row: dict[str, Any] = {"model": variant.model, "speculation": variant.speculation}
    reasons: dict[str, str] = {}
    for field, metric in ROW_METRICS:
        if field in OPTIONAL and all(run_figure(r, metric) is None for r in variant.runs):
            continue  # a figure none of its runs has (no --gpus, no energy): left out
        values, why = run_values(variant, metric)
        row[field] = mean(values) if why is None else None
        if why:
            reasons[field] = why
    row["runs"] = len(variant.runs)
    if variant.speculation != OFF:
        for name, field in DELTAS:
            stem = name.removesuffix("_percent")
            if off is None:
                why = f"no speculation-off variant of {variant.model} to compare with"
                row[name] = row[f"{stem}_ci95_percent"] = row[f"{stem}_mann_whitney_p"] = None
                row[f"{stem}_verdict"] = None
                reasons[name] = why
                continue
            c = compare(variant, off, field, seed=seed, resamples=resamples)
            row[name] = c.delta_percent
            row[f"{stem}_ci95_percent"] = c.interval.as_list()
            row[f"{stem}_mann_whitney_p"] = c.mann_whitney_p
            row[f"{stem}_verdict"] = c.verdict
            if c.reason:
                reasons[name] = c.reason
            elif c.interval.reason:
                reasons[f"{stem}_ci95_percent"] = c.interval.reason
    row["null_reasons"] = reasons
    return row


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def telemetry_row(variant: VariantRuns) -> dict[str, Any]:
    """One `sampled_speculative_telemetry[]` row: min–max over runs (module doc)."""
    row: dict[str, Any] = {"model": variant.model, "speculation": variant.speculation}
    reasons: dict[str, str] = {}
    sampled: set[int] = set()
    unsampled: set[int] = set()
    for key, figure in (("accepted_length_range", "accepted_length"),
                        ("acceptance_rate_range", "acceptance_rate")):
        values = []
        for i, run in enumerate(variant.runs):
            v = ((run.get("server") or {}).get("spec_decode") or {}).get(figure)
            if _number(v):
                values.append(float(v))
                sampled.add(i)
            else:
                unsampled.add(i)
        row[key] = [min(values), max(values)] if values else None
        if not values:
            reasons[key] = (f"no run of {variant.id} has server.spec_decode.{figure}"
                            if variant.runs else f"{variant.id} has no runs")
    row["runs_sampled"] = len(sampled)
    row["runs"] = len(variant.runs)
    row["unsampled_runs"] = [run_name(variant.runs[i], i) for i in sorted(unsampled)]
    row["null_reasons"] = reasons
    return row


def performance_protocol(variants: Sequence[VariantRuns],
                         placements: Sequence[str] | None = None) -> dict[str, Any]:
    """`performance_protocol` from the runs themselves (module doc); `placements` are the
    campaign's per-run-index labels, used only for the `aggregation` words."""
    runs = [r for v in variants for r in v.runs]
    out: dict[str, Any] = {}
    reasons: dict[str, str] = {}

    def same(key: str, values: list[Any]) -> None:
        distinct = sorted({repr(v) for v in values})
        out[key] = values[0] if len(distinct) == 1 and values[0] is not None else None
        if out[key] is None:
            reasons[key] = ("no runs" if not values else
                            f"the runs do not agree: {', '.join(distinct)}")

    same("requests_per_run", [r.get("requests") for r in runs])
    same("runs_per_model", [len(v.runs) for v in variants if v.runs] or [None])
    same("concurrency", [r.get("concurrency") for r in runs])
    sizes = [list(r.get("context_distribution") or {}) for r in runs]
    same("configured_input_tokens", [int(k[0]) if len(k) == 1 else None for k in sizes])
    same("max_output_tokens", [r.get("max_tokens") for r in runs])
    words = "mean of run medians"
    if placements:
        counts = Counter(placements)
        words += " across " + " and ".join(f"{n} {label}-placement" for label, n in
                                           counts.items()) + " runs"
    out["aggregation"] = words
    out["null_reasons"] = reasons
    return out


def run_failures(variant: VariantRuns) -> list[str]:
    """`retained_failures[]` sentences for one variant's runs (module doc)."""
    out = []
    for i, run in enumerate(variant.runs):
        where = f"Run {run_name(run, i)} of {variant.id}"
        failures = run.get("failures") or []
        if failures:
            kinds: Counter[str] = Counter()
            statuses: dict[str, set[int]] = {}
            for f in failures:
                kind = str(f.get("kind") or "unknown")
                kinds[kind] += 1
                if isinstance(f.get("http_status"), int):
                    statuses.setdefault(kind, set()).add(f["http_status"])
            parts = []
            for kind, count in sorted(kinds.items()):
                codes = sorted(statuses.get(kind, ()))
                http = f" (HTTP {', '.join(map(str, codes))})" if codes else ""
                parts.append(f"{count} {kind}{http}")
            total = run.get("requests")
            of = f" of {total}" if isinstance(total, int) else ""
            out.append(f"{where}: {len(failures)}{of} requests failed: {', '.join(parts)}.")
        client = run.get("client") or {}
        if client.get("saturated") is True:
            verdict = client.get("verdict")
            out.append(f"{where}: the load generator was saturated"
                       f"{f' ({verdict})' if verdict else ''}; its latencies may include the "
                       "client's own delays.")
        if run.get("partial") is True:
            out.append(f"{where}: rebuilt from the raw records of a run that did not finish.")
    return out


def improvement_gate(gate: str, threshold: Any, candidate: VariantRuns | None,
                     incumbent: VariantRuns | None, *, seed: int,
                     resamples: int = RESAMPLES) -> GateResult:
    """An `<metric>_improvement_percent` gate: the candidate against the incumbent."""
    field, higher_better = IMPROVEMENT_GATES[gate]
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise UsageError(f"gate {gate} = {threshold!r}: the threshold must be a number "
                         "(percent)")
    if candidate is None or incumbent is None:
        missing = "candidate" if candidate is None else "incumbent"
        return GateResult(gate, threshold, "not_evaluated", {},
                          f"no {missing} was named, so there is nothing to compare")
    c = compare(candidate, incumbent, field, seed=seed, resamples=resamples)
    sign = 1.0 if higher_better else -1.0
    improvement = None if c.delta_percent is None else sign * c.delta_percent
    bounds = c.interval.as_list()
    ci = None if bounds is None else sorted(sign * b for b in bounds)
    figures = {"candidate": candidate.id, "incumbent": incumbent.id, "field": field,
               "candidate_mean": mean(run_values(candidate, dict(ROW_METRICS)[field])[0]),
               "incumbent_mean": mean(run_values(incumbent, dict(ROW_METRICS)[field])[0]),
               "improvement_percent": improvement, "improvement_ci95_percent": ci,
               "mann_whitney_p": c.mann_whitney_p, "candidate_runs": len(candidate.runs),
               "incumbent_runs": len(incumbent.runs)}
    if improvement is None:
        return GateResult(gate, threshold, "not_evaluated", figures, c.reason or "no figure")
    said = f"{candidate.id} improves {field} by {improvement:.1f} % over {incumbent.id}"
    if ci is None:
        return GateResult(gate, threshold, "not_significant", figures,
                          f"{said}, with no interval: {c.interval.reason}")
    within = f"(95 % interval {ci[0]:.1f} … {ci[1]:.1f} %)"
    if ci[0] >= threshold:
        return GateResult(gate, threshold, "pass", figures,
                          f"{said} {within}, at least {threshold} %")
    if ci[1] < threshold:
        return GateResult(gate, threshold, "fail", figures,
                          f"{said} {within}, below {threshold} %")
    return GateResult(gate, threshold, "not_significant", figures,
                      f"{said} {within}: the interval contains {threshold} %, not significant")


def _find(variants: Mapping[str, VariantRuns], role: str, ident: str | None) -> VariantRuns | None:
    if ident is None:
        return None
    if ident not in variants:
        raise UsageError(f"{role} = {ident!r} names no variant (variants: "
                         f"{', '.join(variants)})")
    return variants[ident]


def summarize(variants: Sequence[VariantRuns], *, gates: Mapping[str, Any],
              candidate: str | None = None, incumbent: str | None = None,
              baseline: str | None = None, functional: Mapping[str, bool] | None = None,
              placements: Sequence[str] | None = None, seed: int = 0,
              resamples: int = RESAMPLES) -> Summary:
    """The summary's computed members from a campaign's runs (module doc). `candidate`,
    `incumbent` and `baseline` are variant ids ("model/speculation"); `baseline` is only
    checked (deltas are always against the same model's speculation "off"); `functional`
    is check name -> passed; `placements` the campaign's per-run-index labels."""
    by_id: dict[str, VariantRuns] = {}
    for v in variants:
        if v.id in by_id:
            raise UsageError(f"variant {v.id} is given twice")
        by_id[v.id] = v
    _find(by_id, "baseline", baseline)
    cand, inc = _find(by_id, "candidate", candidate), _find(by_id, "incumbent", incumbent)
    unknown = sorted(set(gates) - set(KNOWN_GATES))
    if unknown:
        raise UsageError(f"unknown gate(s) {', '.join(unknown)} (known: "
                         f"{', '.join(KNOWN_GATES)})")
    rows = tuple(performance_row(v, by_id.get(f"{v.model}/{OFF}"), seed=seed,
                                 resamples=resamples) for v in variants)
    telemetry = tuple(telemetry_row(v) for v in variants if v.speculation != OFF)
    failures = tuple(s for v in variants for s in run_failures(v))
    results = []
    for gate, threshold in gates.items():
        if gate in IMPROVEMENT_GATES:
            results.append(improvement_gate(gate, threshold, cand, inc, seed=seed,
                                            resamples=resamples))
        elif gate == "no_saturated_runs":
            results.append(saturation_gate(threshold, variants))
        elif gate == PASS_RATE_GATE:
            results.append(pass_rate_gate(threshold, cand))
        else:
            results.append(functional_gate(threshold, functional))
    if not any(r.outcome == "pass" for r in results) and all(
            r.outcome == "not_required" for r in results):
        decision, why = None, ("no gate was given or required",)
    elif all(r.outcome in PASSING for r in results):
        decision, why = "promotion", tuple(f"{r.gate}: {r.reason}" for r in results)
    else:
        decision = "no-promotion"
        why = tuple(f"{r.gate} {r.outcome}: {r.reason}" for r in results
                    if r.outcome not in PASSING)
    statistics = {
        "delta": "100 × (mean of the variant's run values / mean of the reference's − 1)",
        "bootstrap": {"resamples": resamples, "seed": seed, "confidence": CONFIDENCE,
                      "method": "percentile; each variant's run values resampled "
                                "independently, numpy PCG64 Generator seeded per interval"},
        "mann_whitney": "two-sided; exact without ties (n_x·n_y ≤ 900), else the normal "
                        "approximation with tie and continuity corrections"}
    return Summary(performance_protocol(variants, placements), rows, telemetry, failures,
                   tuple(results), decision, why, statistics)


def rounded(row: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a row with the fields of `DISPLAY_DECIMALS` rounded for display (Python's
    `round`: half to even on an exact tie; whole numbers become ints); the rest as is."""
    def one(value: Any, places: int) -> Any:
        if isinstance(value, list):
            return [one(v, places) for v in value]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value
        return int(round(value)) if places == 0 else round(value, places)

    return {k: one(v, DISPLAY_DECIMALS[k]) if k in DISPLAY_DECIMALS else v
            for k, v in row.items()}
