"""The lines `anvil compare` prints: the runs, then one line per figure with each run's value
and each later run's change from the first, its interval and its verdict, the figures grouped
by verdict (worse, better, changed, inconclusive, equivalent, then those with no interval: a
figure with several later runs goes where its gravest verdict puts it).

Kept apart from `runs.py` so the comparison is computed once and told twice (text here, the
report's page in `report/comparefigs.py`), and only the CLI prints.
"""

from __future__ import annotations

from typing import Any

from anvil_metrics import catalog
from anvil_metrics.compare.runs import PERCENTILE_FIGURES
from anvil_metrics.post.significance import VERDICTS
from anvil_metrics.summaryfigures import unit_and_better

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_FIELD_OF = {name: (field, p) for name, field, p in PERCENTILE_FIGURES}


def figure_label(name: str) -> str:
    """A figure's label with its unit: "TTFT p50 (ms)", "throughput (tok/s)"."""
    if name in _FIELD_OF:
        field, p = _FIELD_OF[name]
        f = catalog.BY_NAME[field]
        return f"{f.label or f.name} p{p} ({f.unit})" if f.unit else f"{f.label} p{p}"
    unit, _ = unit_and_better(name)
    return f"{name.removesuffix('_tok_s').removesuffix('_rps')} ({unit})"


# figures well below 1 (dollars per million tokens, joules per token): significant digits
SMALL_UNITS = frozenset({"USD/Mtok", "J/tok"})


def _num(v: float | None, unit: str = "") -> str:
    if v is not None and unit in SMALL_UNITS:
        return f"{v:.4g}"
    return "null" if v is None else f"{v:,.1f}"


GROUP_WORDS = {
    "worse": "worse: beyond noise and beyond the minimum effect",
    "better": "better: beyond noise and beyond the minimum effect",
    "changed": "changed (a figure with no better direction), beyond the minimum effect",
    "inconclusive": "inconclusive: an interval straddles the minimum effect",
    "equivalent": "equivalent: the 90 % interval lies within ±the minimum effect",
    None: "no interval (one value a run): not judged",
}


def _settled(v: dict[str, Any]) -> str:
    s = v["settle"]
    if not s:
        return ""
    have = "/".join(f"{n:,}" for n in s["values_n"])
    need = ("no estimate" if s["values_to_settle"] is None else
            "~" + "/".join(f"{n:,}" for n in s["values_to_settle"]) + " would settle it")
    return f" (n {have}; {need})"


def _versus(v: dict[str, Any] | None) -> str:
    if v is None or v["delta"] is None:
        return "n/a"
    pct = "" if v["delta_pct"] is None else f" {v['delta_pct']:+.1f} %"
    if v["ci"] is None:
        return f"{v['delta']:+,.1f}{pct} (no interval)"
    ci = f" [{v['ci'][0]:+,.1f}, {v['ci'][1]:+,.1f}]"
    noise = " *" if v["beyond_noise"] else ""
    return f"{v['delta']:+,.1f}{pct}{ci}{noise} {v['verdict']}{_settled(v)}"


def _margin(f: dict[str, Any]) -> str:
    m = f.get("margin")
    if not m:
        return ""
    floor = f"≥{m['floor']:g}" if m.get("floor") else ""
    return f"±{m['value']:g} {m['unit']}{floor}"


def verdict_group(figure: dict[str, Any]) -> str | None:
    """The group a figure is shown in: its gravest verdict over the later runs (`VERDICTS`'
    order), None when no run has one."""
    got = {v.get("verdict") for v in figure["vs_baseline"][1:] if v}
    return next((x for x in VERDICTS if x in got), None)


def compare_lines(result: dict[str, Any]) -> list[str]:
    """The text of a comparison (`compare.runs.compare_runs`'s document)."""
    runs = result["runs"]
    lines = []
    for letter, r in zip(LETTERS, runs, strict=False):
        lines.append(f"{letter}  {r['path']}: {r['run_id']}, model {r['model']}, concurrency "
                     f"{r['concurrency']}, {r['requests']} requests ({r['failed']} failed), "
                     f"steady state {r['steady_state'] or 'not judged'}"
                     + ("  [baseline]" if letter == "A" else ""))
    others = LETTERS[1:len(runs)]
    width = 2 + max([len("figure")] + [len(figure_label(f["name"])) for f in result["figures"]])
    head = f"{'figure':<{width}}{'margin':>10}" + "".join(f"{x:>12}"
                                                          for x in LETTERS[:len(runs)])
    lines.append(head + "".join(f"   change {x} (Δ, Δ%, {100 * result['confidence']:g} % "
                                f"interval of Δ, verdict)" for x in others))
    for group in (*VERDICTS, None):
        members = [f for f in result["figures"] if verdict_group(f) == group]
        if not members:
            continue
        lines.append(f"-- {GROUP_WORDS[group]}")
        for f in members:
            row = f"{figure_label(f['name']):<{width}}{_margin(f):>10}" + "".join(
                f"{_num(v, f['unit']):>12}" for v in f["values"])
            row += "".join(f"   {_versus(v)}" for v in f["vs_baseline"][1:])
            lines.append(row)
    lines.append(f"* beyond noise: the interval of the change excludes 0 "
                 f"({result['resamples']:,} bootstrap resamples of each run's rows, at most "
                 f"{result['max_values']:,} values a run: the noise within a run, not between "
                 "runs; repeat runs in a campaign for that). better/worse: the interval lies "
                 "wholly beyond ±the margin (--min-effect; ≥1: a time's is at least 1 ms, the "
                 "generator's own precision); equivalent: the "
                 f"{100 * result['equivalence_confidence']:g} % interval lies within it; "
                 "inconclusive: neither, with each run's values (n) and the estimate "
                 "n × (half-width / distance to the margin)² that would settle it")
    for letter, r in zip(LETTERS, runs, strict=False):
        if r["steady_state"] in ("drifting", "no_plateau"):
            lines.append(f"WARNING: run {letter}'s steady state is {r['steady_state']}: its "
                         "percentiles mix loads or times that differ (see its steady_state "
                         "block); compare steady runs")
    return lines
