"""`summary.md`: the summary document as a person reads it (presentation only).

Why apart from the JSON: a reader wants the performance table rounded as the spec's example
rounds it (`decide.rounded`), each delta with its 95 % interval, its verdict at the 2 %
minimum effect with that margin said (`<d>_verdict`: "significant" alone would call a −0.2 %
change a finding) and a plain "not significant" where the interval crosses zero or a gate's
threshold, and the decision with its reasons — while the JSON keeps full precision for
machines. Everything here is read from the finished document, so the report cannot say a
figure the JSON does not hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from anvil_metrics.post.significance import MIN_EFFECT_PERCENT, smallest_p
from anvil_metrics.summary.decide import DELTAS, DISPLAY_DECIMALS, OFF, rounded
from anvil_metrics.summaryfigures import IMPROVEMENT_GATES, SUMMARY_FIGURES

# the performance table's columns: the summary's figures under their labels, then the runs
COLUMNS = (*((f.name, f.label) for f in SUMMARY_FIGURES), ("runs", "runs"))
OPTIONAL = frozenset(f.name for f in SUMMARY_FIGURES if f.optional)


def columns(doc: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The table's columns: every figure's, but an optional one no row has."""
    rows = doc.get("performance") or []
    return tuple((k, t) for k, t in COLUMNS
                 if k not in OPTIONAL or any(k in r for r in rows))


# delta field -> the stem of its interval and p-value fields (`<stem>_ci95_percent` …)
DELTA_NAMES = tuple((name, name.removesuffix("_percent")) for name, _ in DELTAS)


def _num(value: Any, places: int) -> str:
    if value is None:
        return "null"
    return f"{value:,.{places}f}"


def _cell(row: Mapping[str, Any], key: str) -> str:
    value = rounded(row).get(key)
    return "null" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _value(value: Any) -> str:
    """A gate's threshold as the campaign file spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else f"{value:g}"


def _thresholds(doc: Mapping[str, Any]) -> dict[str, list[tuple[str, float]]]:
    """Row field -> [(gate, threshold in percent of the delta's sign)] of the improvement
    gates, so a delta crossing a gate's threshold can be flagged where it is shown."""
    out: dict[str, list[tuple[str, float]]] = {}
    for g in doc.get("gates") or []:
        spec = IMPROVEMENT_GATES.get(g.get("gate"))
        if spec and isinstance(g.get("threshold"), int | float):
            field, higher = spec
            out.setdefault(field, []).append(
                (g["gate"], g["threshold"] if higher else -g["threshold"]))
    return out


SIGNIFICANCE_LEVEL = 0.05


def _significance(ci: Sequence[float] | None, marks: list[tuple[str, float]],
                  runs: tuple[int, int] | None = None) -> str:
    """"significant" only when the interval excludes 0 and every gate's threshold, and the
    runs are enough for the rank test to be able to say so at all (`stats.smallest_p`)."""
    if not ci:
        return "no interval"
    low, high = ci
    notes = []
    least = smallest_p(*runs) if runs else None
    if least is not None and least > SIGNIFICANCE_LEVEL:
        notes.append(f"too few runs to tell ({runs[0]} against {runs[1]}: the smallest "
                     f"Mann–Whitney p they allow is {least:.3g})")
    if low <= 0 <= high:
        notes.append("not significant (the interval contains 0)")
    for gate, t in marks:
        if low <= t <= high:
            notes.append(f"not significant against {gate} (the interval contains {t:g} %)")
    return "; ".join(notes) or "significant"


def _verdict(row: Mapping[str, Any], stem: str) -> str:
    """The delta's verdict (`decide.compare`, at `MIN_EFFECT_PERCENT`) in words, with the
    margin; "" for a summary written before verdicts existed (no `<stem>_verdict` key)."""
    key = f"{stem}_verdict"
    if key not in row:
        return ""
    margin = f"the ±{MIN_EFFECT_PERCENT:g} % minimum effect"
    verdict = row[key]
    beyond = f"the interval lies wholly beyond {margin}"
    why = {"better": beyond, "worse": beyond, "changed": beyond,
           "equivalent": f"the 90 % interval lies within {margin}",
           "inconclusive": f"the interval straddles {margin}: more runs may settle it",
           }.get(verdict)
    return "no verdict (no interval); " if why is None else f"**{verdict}** ({why}); "


def delta_lines(doc: Mapping[str, Any]) -> list[str]:
    """One line per delta of each speculative variant: value, interval, p, verdict,
    significance."""
    fields = dict(DELTA_NAMES)
    delta_field = dict(DELTAS)
    marks = _thresholds(doc)
    out = []
    rows = doc.get("performance") or []
    off_runs = {r.get("model"): r.get("runs") for r in rows if r.get("speculation") == OFF}
    for row in rows:
        runs = (row.get("runs"), off_runs.get(row.get("model")))
        counted = runs if all(isinstance(n, int) for n in runs) else None
        for name, stem in fields.items():
            if name not in row:
                continue
            places = DISPLAY_DECIMALS[name]
            value = row[name]
            if value is None:
                why = (row.get("null_reasons") or {}).get(name, "")
                out.append(f"- {row['model']}/{row['speculation']} {name}: null ({why})")
                continue
            ci = row.get(f"{stem}_ci95_percent")
            p = row.get(f"{stem}_mann_whitney_p")
            shown_ci = ("no interval" if not ci else
                        f"95 % CI {_num(ci[0], places)} … {_num(ci[1], places)} %")
            out.append(f"- {row['model']}/{row['speculation']} {name}: "
                       f"{value:+.{places}f} % ({shown_ci}; Mann–Whitney p "
                       f"{'null' if p is None else f'{p:.3g}'}): {_verdict(row, stem)}"
                       f"{_significance(ci, marks.get(delta_field[name], []), counted)}")
    return out


def _flat(prefix: str, value: Any) -> list[str]:
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _flat(f"{prefix}{k} / ", v)]
    shown = {True: "true", False: "false", None: "not measured"}.get(value, value) \
        if isinstance(value, bool | None) else value
    return [f"- {prefix[:-3]}: {shown}"]


def _checks_sections(doc: dict[str, Any]) -> list[str]:
    """`functional` and `multimodal` as bullet lists (their shapes vary with the models)."""
    out: list[str] = []
    for key, title in (("functional", "Functional checks"), ("multimodal", "Multimodal")):
        block = doc.get(key)
        if isinstance(block, dict):
            out += ["", f"## {title}", ""]
            out += _flat("", block)
    return out


def _under_load_lines(doc: Mapping[str, Any]) -> list[str]:
    """The check classes' pass rates under load, pooled per variant (`checks_under_load`)."""
    rows = doc.get("checks_under_load") or []
    out = ["", "## Answers judged under load", ""] if rows else []
    for row in rows:
        for c in row.get("classes") or []:
            low, high = c.get("pass_rate_ci95_low"), c.get("pass_rate_ci95_high")
            rate = ("null" if c.get("pass_rate") is None else
                    f"{c['pass_rate']:.4f} (95 % Wilson {low:.4f} – {high:.4f})")
            out.append(f"- {row['model']}/{row['speculation']}, class {c['name']} "
                       f"({c['check']}): {c['passed']} of {c['judged']} passed over "
                       f"{c['runs']} runs, pass rate {rate}")
    return out


def markdown(doc: Mapping[str, Any]) -> str:
    """The report (module doc) for a summary document as `folder.summary_document`
    makes it."""
    camp = doc.get("campaign") or {}
    lines = [f"# Benchmark summary: {camp.get('name', 'campaign')}", "",
             f"Schema {doc.get('schema')}, date {doc.get('date') or 'null'}. "
             f"Decision: **{doc.get('decision') or 'none'}**.", ""]
    proto = doc.get("performance_protocol") or {}
    lines += ["## Protocol", "",
              f"{proto.get('requests_per_run')} requests per run, "
              f"{proto.get('runs_per_model')} runs per variant, concurrency "
              f"{proto.get('concurrency')}, {proto.get('configured_input_tokens')} input "
              f"tokens configured, at most {proto.get('max_output_tokens')} output tokens; "
              f"{proto.get('aggregation')}.", ""]
    lines += ["## Performance", "",
              "| model | speculation | " + " | ".join(t for _, t in columns(doc)) + " |",
              "|---|---|" + "---:|" * len(columns(doc))]
    for row in doc.get("performance") or []:
        lines.append(f"| {row['model']} | {row['speculation']} | "
                     + " | ".join(_cell(row, k) for k, _ in columns(doc)) + " |")
    lines += ["", "Deltas against the same model with speculation off (100 × (variant / off "
              "− 1)), with 95 % bootstrap intervals:", ""]
    lines += delta_lines(doc) or ["- none (no speculative variant with an off variant)"]
    lines += ["", "## Sampled speculative telemetry", ""]
    tele = doc.get("sampled_speculative_telemetry") or []
    for t in tele:
        def rng(key: str, row: Mapping[str, Any] = t) -> str:
            r = row.get(key)
            places = DISPLAY_DECIMALS[key]
            return "null" if not r else f"{_num(r[0], places)} – {_num(r[1], places)}"
        unsampled = t.get("unsampled_runs") or []
        lines.append(f"- {t['model']}/{t['speculation']}: accepted length "
                     f"{rng('accepted_length_range')}, acceptance rate "
                     f"{rng('acceptance_rate_range')} ({t.get('runs_sampled')} of "
                     f"{t.get('runs')} runs sampled"
                     + (f"; not sampled: {', '.join(unsampled)}" if unsampled else "") + ")")
    if not tele:
        lines.append("- no speculative variant")
    lines += _under_load_lines(doc)
    lines += _checks_sections(doc)
    lines += ["", "## Retained failures", ""]
    lines += [f"- {f}" for f in doc.get("retained_failures") or []] or ["- none"]
    rest = doc.get("restoration")
    if isinstance(rest, dict):
        lines += ["", "## Restoration", "", f"**{rest.get('result')}** after the last run "
                  f"(checked {rest.get('checked_at')}):", ""]
        lines += [f"- {a.get('alias')}: {a.get('result')}"
                  + (f" ({a.get('reason')})" if a.get("reason") else "")
                  for a in rest.get("aliases") or [] if isinstance(a, dict)]
    lines += ["", "## Gates", ""]
    for g in doc.get("gates") or []:
        lines.append(f"- {g['gate']} = {_value(g['threshold'])}: **{g['outcome']}**: "
                     f"{g['reason']}")
    lines += ["", "## Decision", "", f"**{doc.get('decision') or 'none'}**, because:", ""]
    lines += [f"- {r}" for r in doc.get("decision_reasons") or []]
    missing = doc.get("not_included") or {}
    if missing:
        lines += ["", "## Not included", ""]
        lines += [f"- {k}: {why}" for k, why in missing.items()]
    lines += ["", "Figures here are rounded for display; summary.json keeps full precision.",
              ""]
    return "\n".join(lines)
