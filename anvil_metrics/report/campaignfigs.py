"""A campaign's pictures: the variants side by side on each performance figure, the deltas
and the gates' improvements with their intervals, and the decision with its reasons.

Why from the summary that verifies, or none: a campaign's figures are what a model is
promoted on, and `anvil verify summary.json` recomputes every one from the campaign's runs.
So a `summary.json` beside `campaign.json` is drawn only when it equals what
`summary.verify.verify_summary` recomputes from the runs (the same call `anvil verify` makes,
with the bootstrap seed the file records); a stale one is refused with one line saying to
re-run `anvil summarize`. Without one, the summary is computed in memory exactly as
`anvil summarize` would write it (`summary.folder.summary_document`), and the page says so.

The runs drawn as dots are the ones the summary kept (`summary.folder.read_campaign_folder`:
finished, and their `benchmark.json` verifies), read without their rows. The error bars
of a bar are the percentile bootstrap interval of the mean of the run medians
(`post.significance.bootstrap_mean_ci`, seeded as the summary's own intervals are); the
deltas' and gates' intervals are the summary's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anvil_metrics import summaryfigures
from anvil_metrics.campaign.checkplan import checks_file
from anvil_metrics.compare.runs import read_run
from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import read_json
from anvil_metrics.post.docscan import verify_file
from anvil_metrics.post.significance import RESAMPLES, bootstrap_mean_ci
from anvil_metrics.report import draw
from anvil_metrics.report.draw import PALETTE
from anvil_metrics.report.frontier import Curve, frontier_section, run_load, run_point
from anvil_metrics.report.page import Figure, Section, Table
from anvil_metrics.summary.decide import (
    DELTAS,
    DISPLAY_DECIMALS,
    IMPROVEMENT_GATES,
    OFF,
    OPTIONAL,
    PASSING,
    ROW_METRICS,
)
from anvil_metrics.summary.folder import (
    BENCHMARK_FILE,
    CAMPAIGN_FILE,
    CAMPAIGN_RECORD,
    SCHEMA,
    CampaignFolder,
    read_campaign_folder,
    summary_document,
)
from anvil_metrics.summary.verify import is_summary, read_small_json, verify_summary

SUMMARY_FILE = "summary.json"
EXTRA = "Checks, telemetry and what is left out"
# each summary figure's panel title: its long label (`summaryfigures.SUMMARY_FIGURES`)
LABELS = {f.name: f.long_label for f in summaryfigures.SUMMARY_FIGURES}


@dataclass(frozen=True, slots=True)
class CampaignData:
    """The summary drawn (`from_file`: read from summary.json, else computed in memory), the
    folder as read, and per variant id the kept runs' benchmark.json (relative) in order."""

    folder: Path
    summary: dict[str, Any]
    from_file: bool
    read: CampaignFolder
    run_files: dict[str, list[str]]
    check_files: list[str]


def display(field: str, value: Any) -> str:
    """A summary figure as the tables show it: the summary's display decimals, else two."""
    if value is None:
        return "null"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,.{DISPLAY_DECIMALS.get(field, 2)}f}"


def load_campaign(folder: Path, verify: Callable[[Path], list[str]] = verify_file
                  ) -> CampaignData:
    """Read and check the campaign folder (module doc); `verify` judges each run's file."""
    judged: dict[Path, list[str]] = {}

    def checked(path: Path) -> list[str]:  # each run verified once, for both reads
        if path not in judged:
            judged[path] = verify(path)
        return judged[path]

    try:
        read = read_campaign_folder(folder, verify=checked)
    except UsageError as e:
        raise UsageError(f"report: {str(e).removeprefix('summarize: ')}") from None
    path = folder / SUMMARY_FILE
    if path.exists():
        doc = read_small_json(path)
        if not is_summary(doc):
            raise UsageError(f"report: {path} is not a {SCHEMA} document; re-run "
                             f"`anvil summarize {folder}` to write it")
        problems = verify_summary(doc, path, verify=checked).problems
        if problems:
            raise UsageError(f"report: {path} differs from what its campaign's runs give "
                             f"({len(problems)} difference(s), the first: {problems[0]}); "
                             f"re-run `anvil summarize {folder}`")
    else:
        doc = summary_document(read)
    record = read_json(folder / CAMPAIGN_FILE, CAMPAIGN_RECORD, command="report")
    run_files: dict[str, list[str]] = {}
    for v in read.variants:  # the runs read_campaign_folder kept, in its order
        kept = [r for r in record["runs"] if r["variant"] == v.id and r["state"] == "done"
                and (folder / r["folder"] / BENCHMARK_FILE).is_file()
                and not checked(folder / r["folder"] / BENCHMARK_FILE)]
        kept.sort(key=lambda r: r["run_index"])
        run_files[v.id] = [f"{r['folder']}/{BENCHMARK_FILE}" for r in kept]
        assert len(kept) == len(v.runs), v.id
    checks = [] if read.campaign.checks is None else [
        str(checks_file(Path("."), v.model, v.speculation)) for v in read.variants
        if checks_file(folder, v.model, v.speculation).is_file()]
    return CampaignData(folder, doc, path.exists(), read, run_files, checks)


def _bootstrap(doc: dict[str, Any]) -> tuple[int, int]:
    boot = (doc.get("statistics") or {}).get("bootstrap") or {}
    return int(boot.get("seed", 0)), int(boot.get("resamples", RESAMPLES))


def _role(d: CampaignData, vid: str) -> str:
    c = d.read.campaign
    roles = [r for r, who in (("candidate", c.candidate), ("incumbent", c.incumbent),
                              ("baseline", c.baseline)) if who == vid]
    shown = vid.replace("/", "\n", 1)
    return f"{shown}\n({', '.join(roles)})" if roles else shown


# -- the figures -----------------------------------------------------------------------------


def variants_figure(d: CampaignData) -> Figure:
    seed, resamples = _bootstrap(d.summary)
    rows = d.summary["performance"]
    shown = [(field, metric) for field, metric in ROW_METRICS
             if field not in OPTIONAL or any(field in r for r in rows)]
    nrows = -(-len(shown) // 3)
    fig, axes = draw.new((10.0, 3.5 * nrows), ncols=3, nrows=nrows)
    for k, (field, metric) in enumerate(shown):
        ax = axes[k // 3][k % 3]
        for i, (row, v) in enumerate(zip(rows, d.read.variants, strict=True)):
            colour = _colour(d, row)
            runs = [summaryfigures.run_figure(r, metric) for r in v.runs]
            values = [float(x) for x in runs if isinstance(x, int | float)]
            if row.get(field) is None:
                ax.text(i, 0, "null", ha="center", va="bottom", fontsize=7)
            else:
                ci = (bootstrap_mean_ci(values, seed=seed, resamples=resamples)
                      if len(values) == len(runs) else None)
                err = None if ci is None else [[row[field] - ci[0]], [ci[1] - row[field]]]
                ax.bar(i, row[field], width=0.6, color=colour, alpha=0.45, yerr=err,
                       capsize=4, ecolor="#222222")
            if values:
                offsets = np.linspace(-0.18, 0.18, len(values)) if len(values) > 1 else [0.0]
                ax.plot(i + np.asarray(offsets), values, "o", color=colour, markersize=4,
                        markeredgecolor="#222222", markeredgewidth=0.5)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([_role(d, v.id) for v in d.read.variants], fontsize=7)
        ax.set_title(LABELS[field], fontsize=9)
    return draw.finish(fig, "campaign-variants.png", "The variants side by side",
                       "Bars: the summary's performance rows (the mean of the runs' medians); "
                       "error bars: the 95 % percentile bootstrap interval of that mean "
                       f"({resamples} resamples, seed {seed}); dots: each run's own median "
                       "(its benchmark.json metrics).",
                       (SUMMARY_FILE if d.from_file else CAMPAIGN_FILE,
                        *(f for files in d.run_files.values() for f in files)))


def _colour(d: CampaignData, row: dict[str, Any]) -> str:
    """The variant's colour in every figure (its place among the variants)."""
    ids = [v.id for v in d.read.variants]
    return PALETTE[ids.index(f"{row['model']}/{row['speculation']}") % len(PALETTE)]


def _interval(ax: Any, x: float, value: float, ci: list[float] | None, colour: str) -> None:
    err = None if ci is None else [[value - ci[0]], [ci[1] - value]]
    ax.errorbar([x], [value], yerr=err, fmt="o", color=colour, capsize=5)


def deltas_figure(d: CampaignData) -> Figure:
    fig, axes = draw.new((10.0, 4.2), ncols=3)
    rows = [r for r in d.summary["performance"] if r["speculation"] != OFF]
    for ax, (name, _) in zip(axes[0][:2], DELTAS, strict=True):
        stem = name.removesuffix("_percent")
        shown = [r for r in rows if r.get(name) is not None]
        if not shown:
            draw.no_data(ax, f"no {name}: no variant with speculation on has an off variant"
                         if not rows else f"every {name} is null (see null_reasons)")
            continue
        for i, r in enumerate(shown):
            _interval(ax, i, r[name], r.get(f"{stem}_ci95_percent"), _colour(d, r))
        ax.axhline(0, color="#222222", linewidth=0.8)
        ax.set_xticks(range(len(shown)))
        ax.set_xticklabels([f"{r['model']}\n{r['speculation']} vs {OFF}" for r in shown],
                           fontsize=7)
        ax.set_xlim(-0.6, len(shown) - 0.4)
        ax.set_ylabel("%")
        ax.set_title(name, fontsize=9)
    ax = axes[0][2]
    gates = [g for g in d.summary.get("gates") or [] if g["gate"] in IMPROVEMENT_GATES
             and g["figures"].get("improvement_percent") is not None]
    if not gates:
        draw.no_data(ax, "no improvement gate with a figure")
    else:
        for i, g in enumerate(gates):
            f = g["figures"]
            colour = "#1a7f37" if g["outcome"] in PASSING else "#c62828"
            _interval(ax, i, f["improvement_percent"], f.get("improvement_ci95_percent"),
                      colour)
            ax.hlines(g["threshold"], i - 0.35, i + 0.35, color="#d62728", linestyle="--",
                      label="gate threshold" if i == 0 else None)
            ax.annotate(g["outcome"], (i, f["improvement_percent"]), xytext=(8, 0),
                        textcoords="offset points", fontsize=8, color=colour, va="center")
        ax.axhline(0, color="#222222", linewidth=0.8)
        ax.set_xticks(range(len(gates)))
        ax.set_xticklabels([g["gate"].removesuffix("_improvement_percent") for g in gates],
                           fontsize=7)
        ax.set_xlim(-0.6, len(gates) - 0.4)
        ax.set_ylabel("candidate's improvement over the incumbent (%)")
        ax.set_title("improvement gates (the others: see the Gates table)", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    return draw.finish(fig, "campaign-deltas.png", "Deltas and gates, with their 95 % intervals",
                       "Left: each speculation-on variant against the same model's off "
                       "variant (performance[].*_delta_percent and *_ci95_percent). Right: "
                       "each improvement gate's figure (gates[].figures), its interval and "
                       "its threshold (dashed); green when it passed.",
                       (SUMMARY_FILE if d.from_file else CAMPAIGN_FILE,))


# -- the tables ------------------------------------------------------------------------------


def gate_value(g: dict[str, Any]) -> str:
    f = g.get("figures") or {}
    if "improvement_percent" in f:
        ci = f.get("improvement_ci95_percent")
        within = "" if ci is None else f" (95 % interval {ci[0]:.1f} … {ci[1]:.1f} %)"
        return f"{f['improvement_percent']:.1f} %{within}"
    if "saturated_runs" in f:
        return f"{len(f['saturated_runs'])} of {f['runs']} runs saturated"
    if "checks" in f:
        return f"{f['checks'] - len(f['failed'])} of {f['checks']} checks passed"
    return "-"


def _p(value: float | None) -> str:
    return "null" if value is None else f"{value:.3g}"


def flatten(block: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A nested block as (dotted path, value) rows."""
    if isinstance(block, dict):
        return [r for k, v in block.items() for r in flatten(v, f"{prefix}.{k}" if prefix
                                                              else str(k))]
    if isinstance(block, list):
        return [(prefix, ", ".join(str(x) for x in block))]
    return [(prefix, "null" if block is None else str(block).lower()
             if isinstance(block, bool) else str(block))]


def _verdict_class(text: str) -> str:
    return "pass" if text == "pass" else "fail" if text == "fail" else ""


def tables(d: CampaignData) -> dict[str, tuple[Table, ...]]:
    """The page's tables by section ("Decision", "Performance", "Checks, …")."""
    s = d.summary
    c = s.get("campaign") or {}
    gates = s.get("gates") or []
    decision = Table("Decision", ("campaign", "candidate", "incumbent", "decision"),
                     ((str(c.get("name")), str(c.get("candidate")), str(c.get("incumbent")),
                       s["decision"] or "none"),),
                     classes=("pass" if s["decision"] == "promotion" else
                              "fail" if s["decision"] else "",))
    reasons = Table("Its reasons", ("reason",), tuple((r,) for r in s["decision_reasons"]))
    gate_table = Table("Gates", ("gate", "threshold", "value", "reason", "outcome"),
                       tuple((g["gate"], flatten(g["threshold"])[0][1], gate_value(g), g["reason"],
                              g["outcome"]) for g in gates),
                       classes=tuple("pass" if g["outcome"] in PASSING else "fail"
                                     for g in gates))
    fields = [f for f, _ in ROW_METRICS
              if f not in OPTIONAL or any(f in r for r in s["performance"])]
    perf = Table("Performance (mean of run medians)", ("variant", "runs", *fields),
                 tuple((f"{r['model']}/{r['speculation']}", str(r.get("runs")),
                        *(display(f, r.get(f)) for f in fields)) for r in s["performance"]))
    delta_rows = []
    for r in s["performance"]:
        if r["speculation"] == OFF:
            continue
        cells = [f"{r['model']}/{r['speculation']}"]
        for name, _ in DELTAS:
            stem = name.removesuffix("_percent")
            ci = r.get(f"{stem}_ci95_percent")
            cells += [display(name, r.get(name)),
                      "null" if ci is None else f"{ci[0]:.1f} … {ci[1]:.1f}",
                      _p(r.get(f"{stem}_mann_whitney_p"))]
        delta_rows.append(tuple(cells))
    deltas = Table("Deltas against the same model's speculation off (%)",
                   ("variant", *(h for name, _ in DELTAS for h in (
                       name, "95 % interval", "Mann–Whitney p"))), tuple(delta_rows))
    proto = s.get("performance_protocol") or {}
    why = proto.get("null_reasons") or {}
    protocol = Table("Protocol", ("field", "value"), tuple(
        (k, flatten(v)[0][1] + (f" ({why[k]})" if k in why else ""))
        for k, v in proto.items() if k != "null_reasons"))
    out = {"Decision": (decision, reasons, gate_table),
           "Performance": (perf, deltas, protocol)}
    extra: list[Table] = []
    telemetry = s.get("sampled_speculative_telemetry") or []
    if telemetry:
        extra.append(Table("Sampled speculative telemetry", (
            "variant", "accepted length", "acceptance rate", "runs sampled"), tuple(
            (f"{t['model']}/{t['speculation']}",
             *("null" if t.get(k) is None else " … ".join(display(k, x) for x in t[k])
               for k in ("accepted_length_range", "acceptance_rate_range")),
             f"{t.get('runs_sampled')} of {t.get('runs')}") for t in telemetry)))
    for block in ("functional", "multimodal"):
        if isinstance(s.get(block), dict):
            rows = flatten(s[block])
            extra.append(Table(f"{block.capitalize()} checks ({block})", ("check", "result"),
                               tuple(rows), classes=tuple(_verdict_class(v) for _, v in rows)))
    if s.get("retained_failures"):
        extra.append(Table("Retained failures", ("sentence",),
                           tuple((x,) for x in s["retained_failures"])))
    if s.get("not_included"):
        extra.append(Table("Not included", ("block", "why"),
                           tuple((k, str(v)) for k, v in s["not_included"].items())))
    if extra:
        out[EXTRA] = tuple(extra)
    return out


def page_text(d: CampaignData) -> tuple[str, list[str], list[str]]:
    """(title, lines under it, source files)."""
    s = d.summary
    c = s.get("campaign") or {}
    said = (f"from {SUMMARY_FILE}, which recomputes from the runs (as anvil verify checks)"
            if d.from_file else f"{SUMMARY_FILE} absent: the summary was computed in memory, "
            "as `anvil summarize` would write it")
    lines = [f"campaign {c.get('name')}: {c.get('summarized_runs')} of "
             f"{c.get('planned_runs')} runs summarized, {len(s['performance'])} variants; "
             f"date {s.get('date')}", f"decision: {s['decision'] or 'none'}; {said}"]
    sources = [CAMPAIGN_FILE, *([SUMMARY_FILE] if d.from_file else []),
               *(f for files in d.run_files.values() for f in files), *d.check_files]
    return f"anvil campaign {c.get('name') or d.folder.name}", lines, sources


def campaign_curves(d: CampaignData) -> list[Curve]:
    """One curve of the frontier per variant: each of its runs a point, from its own file."""
    curves = []
    for vid, files in d.run_files.items():
        runs = [read_run(d.folder / f) for f in files]
        curves.append(Curve(vid, tuple(
            run_point(r.doc, r.rows, f"run {i + 1}", run_load(r.doc))
            for i, r in enumerate(runs))))
    return curves


def campaign_page(folder: Path, verify: Callable[[Path], list[str]] = verify_file
                  ) -> tuple[str, list[str], list[Section], list[str]]:
    """(title, lines under it, sections, source files) of a campaign's report."""
    d = load_campaign(folder, verify)
    title, lines, sources = page_text(d)
    by = tables(d)
    sections = [Section("Decision", tables=by["Decision"]),
                Section("Performance", tables=by["Performance"],
                        figures=(variants_figure(d), deltas_figure(d)))]
    sections.append(frontier_section(campaign_curves(d), [
        f for files in d.run_files.values() for f in files]))
    if EXTRA in by:
        sections.append(Section(EXTRA, tables=by[EXTRA]))
    return title, lines, sections, sources
