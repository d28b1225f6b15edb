"""The gates decided on a campaign's runs alone, without comparing two variants, and the
types every gate shares: a variant's runs and a gate's result.

Why apart from `decide.py`: that module compares variants (the rows' deltas, the
improvement gates) and folds every gate into the decision; a gate that reads the runs
themselves (was the client saturated, did the functional checks pass, did the check classes
pass under load) needs none of that, and each such gate added there would push the
decision's module past its size.

The pass rate under load (`check_pass_rate_under_load`, issue 51): a check class is a
`[[request_class]]` with `check = "json"` (…), its answers judged by the suite inside the
measured load; each run's `mix.classes[i].verdicts` counts them. A variant's
`checks_under_load` row pools each check class over the variant's runs: `judged` and
`passed` are the sums over the runs that have the class, `pass_rate` = Σ passed / Σ judged
(not a mean of the runs' rates: a run that judged more answers weighs more, as the same
answers in one longer run would), with its 95 % Wilson score interval
(`post.stats.wilson_interval`). The gate compares that interval with its value, as the
improvement gates compare theirs: `"pass"` when every check class's interval lies wholly at
or above it (its lower end ≥ value: a conservative gate, so that ten passed answers of ten
do not prove 0.99), `"fail"` when some class's lies wholly below it, else `"not_significant"`
(send more requests, or ask less); `"not_evaluated"` (never a pass, not a failure either) when
the candidate's runs have no check class or one judged nothing. A value of 1 can never pass:
no finite count of answers proves a rate of exactly 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from anvil_metrics.errors import UsageError
from anvil_metrics.post.stats import wilson_interval
from anvil_metrics.summaryfigures import PASS_RATE_GATE


@dataclass(frozen=True, slots=True)
class VariantRuns:
    """One variant of a campaign and its runs (benchmark/v1 documents, as loaded)."""

    model: str
    speculation: str
    runs: Sequence[Mapping[str, Any]]

    @property
    def id(self) -> str:
        return f"{self.model}/{self.speculation}"


@dataclass(frozen=True, slots=True)
class GateResult:
    """A gate's outcome (`"pass"`, `"fail"`, `"not_significant"`, `"not_evaluated"`,
    `"not_required"`), the figures it used and a sentence saying why."""

    gate: str
    threshold: Any
    outcome: str
    figures: Mapping[str, Any]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"gate": self.gate, "threshold": self.threshold, "outcome": self.outcome,
                "figures": dict(self.figures), "reason": self.reason}


def run_name(run: Mapping[str, Any], index: int) -> str:
    """How a run is named in reasons and sentences: its `run_id`, else its position."""
    rid = run.get("run_id")
    return rid if isinstance(rid, str) and rid else f"run {index + 1}"


def saturation_gate(threshold: Any, variants: Sequence[VariantRuns]) -> GateResult:
    """`no_saturated_runs`: no run of any variant had a saturated load generator."""
    gate = "no_saturated_runs"
    if not isinstance(threshold, bool):
        raise UsageError(f"gate {gate} = {threshold!r}: must be true or false")
    if not threshold:
        return GateResult(gate, threshold, "not_required", {}, "not asked for")
    saturated, unknown, total = [], [], 0
    for v in variants:
        for i, run in enumerate(v.runs):
            total += 1
            flag = (run.get("client") or {}).get("saturated")
            if flag is True:
                saturated.append(f"{run_name(run, i)} of {v.id}")
            elif flag is not False:
                unknown.append(f"{run_name(run, i)} of {v.id}")
    figures = {"runs": total, "saturated_runs": saturated, "runs_without_verdict": unknown}
    if saturated:
        return GateResult(gate, threshold, "fail", figures,
                          f"the load generator was saturated in {', '.join(saturated)}")
    if unknown or not total:
        why = (f"no saturation verdict in {', '.join(unknown)}" if unknown else "no runs")
        return GateResult(gate, threshold, "not_evaluated", figures, why)
    return GateResult(gate, threshold, "pass", figures,
                      f"none of the {total} runs saturated the load generator")


def functional_gate(threshold: Any, results: Mapping[str, bool] | None) -> GateResult:
    """`functional = "all_pass"`: every functional check given passed."""
    gate = "functional"
    if threshold != "all_pass":
        raise UsageError(f'gate functional = {threshold!r}: the only value is "all_pass"')
    if not results:
        return GateResult(gate, threshold, "not_evaluated", {},
                          "no functional check results were given")
    failed = sorted(k for k, ok in results.items() if ok is not True)
    figures = {"checks": len(results), "failed": failed}
    if failed:
        return GateResult(gate, threshold, "fail", figures,
                          f"{len(failed)} of {len(results)} checks failed: {', '.join(failed)}")
    return GateResult(gate, threshold, "pass", figures, f"all {len(results)} checks passed")




def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def pooled_check_classes(variant: VariantRuns) -> list[dict[str, Any]]:
    """Each check class of the variant's runs, pooled over them (module doc), in the order
    the runs first name them; [] when no run has a check class."""
    pooled: dict[str, dict[str, Any]] = {}
    for run in variant.runs:
        mix = run.get("mix")
        for c in (mix.get("classes") or []) if isinstance(mix, Mapping) else []:
            if not isinstance(c, Mapping) or not c.get("check"):
                continue
            v = c.get("verdicts") if isinstance(c.get("verdicts"), Mapping) else {}
            p = pooled.setdefault(str(c.get("name")), {"name": str(c.get("name")),
                                                       "check": c["check"], "runs": 0,
                                                       "judged": 0, "passed": 0})
            p["runs"] += 1
            p["judged"] += _count(v.get("judged"))
            p["passed"] += _count(v.get("passed"))
    for p in pooled.values():
        ci = wilson_interval(p["passed"], p["judged"])
        p["pass_rate"] = p["passed"] / p["judged"] if p["judged"] else None
        p["pass_rate_ci95_low"], p["pass_rate_ci95_high"] = ci or (None, None)
    return list(pooled.values())


def checks_under_load(variants: Sequence[VariantRuns]) -> list[dict[str, Any]] | None:
    """The summary's `checks_under_load` block: one row per variant whose runs have a check
    class; None (the block left out) when no variant's have."""
    rows = [{"model": v.model, "speculation": v.speculation, "runs": len(v.runs),
             "classes": classes}
            for v in variants for classes in (pooled_check_classes(v),) if classes]
    return rows or None


def pass_rate_gate(threshold: Any, candidate: VariantRuns | None) -> GateResult:
    """`check_pass_rate_under_load = R`: every check class of the candidate passes at least
    R of its answers under load, by its pooled Wilson interval (module doc)."""
    gate = PASS_RATE_GATE
    if (isinstance(threshold, bool) or not isinstance(threshold, int | float)
            or not 0 <= threshold <= 1):
        raise UsageError(f"gate {gate} = {threshold!r}: must be a pass rate between 0 and 1, "
                         "e.g. 0.99")
    if candidate is None:
        return GateResult(gate, threshold, "not_evaluated", {},
                          "no candidate was named, so there is nothing to judge")
    classes = pooled_check_classes(candidate)
    figures = {"candidate": candidate.id, "candidate_runs": len(candidate.runs),
               "check_classes": classes}
    if not classes:
        return GateResult(gate, threshold, "not_evaluated", figures,
                          f"no run of {candidate.id} has a check class ([[request_class]] "
                          "check = ...): nothing was judged under load")

    def said(c: Mapping[str, Any]) -> str:
        return (f"{c['name']} ({c['check']}) passed {c['passed']} of {c['judged']} "
                f"(95 % interval {c['pass_rate_ci95_low']:.4f} … "
                f"{c['pass_rate_ci95_high']:.4f})")

    unjudged = [c["name"] for c in classes if not c["judged"]]
    judged = [c for c in classes if c["judged"]]
    below = [c for c in judged if c["pass_rate_ci95_high"] < threshold]
    if below:
        return GateResult(gate, threshold, "fail", figures,
                          f"{'; '.join(map(said, below))}: below {threshold:g}")
    if unjudged:
        return GateResult(gate, threshold, "not_evaluated", figures,
                          f"no answer of {', '.join(unjudged)} was judged in the runs of "
                          f"{candidate.id}")
    unsure = [c for c in judged if c["pass_rate_ci95_low"] < threshold]
    if unsure:
        return GateResult(gate, threshold, "not_significant", figures,
                          f"{'; '.join(map(said, unsure))}: the interval contains "
                          f"{threshold:g}, not significant")
    return GateResult(gate, threshold, "pass", figures,
                      f"{'; '.join(map(said, judged))}: at least {threshold:g}")
