"""A capacity search's pictures: each SLO's value against the load, with its limit and the
capacity found; goodput, latency and throughput against the load; the steps in the order
the search ran them.

Why checked before drawn: `capacity.json` is a summary of its steps, and `anvil verify` checks
the steps' `benchmark.json` files, not it. So the report draws only what those files back:
each step's `benchmark.json` must verify (`docscan.verify_file`), each SLO value that is a
`metrics` key (or `error_rate`) must equal what the step's document gives, bit for bit, as
must its `goodput_rps`; `meets` must follow from the values and the SLOs, and `capacity`
from the steps (the search's own `Search.capacity`). A percentile that is not a `metrics`
key (`e2e_p99_ms`) needs the step's rows, which are never loaded here: it is drawn as
capacity.json states it, and the page says so. A file not of the shape `anvil capacity`
writes, or one the steps contradict, is refused in one line.

Each step's run folder is found beside `capacity.json` by its folder name (the path
recorded may be absolute, or relative to where the search ran): a search folder can be
moved and still be drawn.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from anvil_metrics import catalog
from anvil_metrics.compare.runs import read_run
from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import read_json
from anvil_metrics.post.docscan import scan_benchmark, verify_file
from anvil_metrics.post.schema import fmt, same
from anvil_metrics.report import draw
from anvil_metrics.report.draw import COLOURS
from anvil_metrics.report.frontier import Curve, frontier_section, run_point
from anvil_metrics.report.page import Figure, Section, Table, cell
from anvil_metrics.runs.capacity import Search, Slo, meets, parse_slos, slo_value

CAPACITY_FILE = "capacity.json"
BYS = ("users", "rate")
MEETS_COLOUR, FAILS_COLOUR = "#2ca02c", "#d62728"
KEY_FIGURES = (*((name, tuple(catalog.BY_NAME[name].percentile_names()))
                 for name in ("ttft_ms", "e2e_ms", "decode_tok_s")),
               ("throughput", ("throughput_tok_s",)))


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _load_text(v: float) -> str:
    return f"{v:g}"


def _shape(doc: Any, where: str) -> tuple[Slo, ...]:
    """The SLOs, or a UsageError naming the first field not as `anvil capacity` writes it."""
    def bad(field: str, value: Any, allowed: str) -> UsageError:
        return UsageError(f"report: {where}: {field} {fmt(value)} is not allowed; expected "
                          f"{allowed} (as anvil capacity writes it)")

    if not isinstance(doc, dict):
        raise bad("the document", doc, "a JSON object")
    by = doc.get("by")
    if by not in BYS:
        raise bad("by", by, '"users" or "rate"')
    texts = doc.get("slo")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise bad("slo", texts, 'a list of SLO texts like "ttft_p95_ms<=2000"')
    try:
        slos = parse_slos(",".join(texts), flag=f"{where}: slo")
    except UsageError as e:
        raise UsageError(f"report: {e}") from None
    for key, allowed in (("capacity", "a number or null"), ("resolution", "a number > 0"),
                         ("maximum", "a number")):
        v = doc.get(key)
        if not (_number(v) or (key == "capacity" and v is None)) or (
                key == "resolution" and v <= 0):
            raise bad(key, v, allowed)
    if doc.get("stopped") is not None and not isinstance(doc.get("stopped"), str):
        raise bad("stopped", doc.get("stopped"), "a sentence or null")
    steps = doc.get("steps")
    if not isinstance(steps, list):
        raise bad("steps", steps, "a list")
    keys = {s.key for s in slos}
    for i, s in enumerate(steps):
        at = f"steps[{i}]"
        if not isinstance(s, dict):
            raise bad(at, s, "an object")
        if not _number(s.get(by)) or s[by] <= 0:
            raise bad(f"{at}.{by}", s.get(by), "a load > 0")
        for key in ("meets", "trusted"):
            if not isinstance(s.get(key), bool):
                raise bad(f"{at}.{key}", s.get(key), "true or false")
        values = s.get("values")
        if not isinstance(values, dict) or set(values) != keys or not all(
                v is None or _number(v) for v in values.values()):
            raise bad(f"{at}.values", values, f"a number or null for each of {sorted(keys)}")
        if not (s.get("goodput_rps") is None or _number(s.get("goodput_rps"))):
            raise bad(f"{at}.goodput_rps", s.get("goodput_rps"), "a number or null")
        if not isinstance(s.get("benchmark"), str) or not s["benchmark"]:
            raise bad(f"{at}.benchmark", s.get("benchmark"), "the path of its benchmark.json")
    return slos


def _check_step(i: int, s: dict[str, Any], doc: dict[str, Any], slos: tuple[Slo, ...],
                where: str, relative: str) -> None:
    """Refuse a step whose recorded figures its own benchmark.json does not give."""
    metrics = doc.get("metrics") or {}
    for slo in slos:
        if slo.key == "error_rate":
            want = slo_value(slo, doc)
        elif slo.key in metrics:
            want = metrics[slo.key]
        else:
            continue  # a row percentile not in metrics: rows are not loaded (module doc)
        if not same(s["values"][slo.key], want):
            raise UsageError(f"report: {where}: steps[{i}].values.{slo.key} is "
                             f"{fmt(s['values'][slo.key])} but {relative} gives {fmt(want)}; "
                             "the report draws only figures its steps' files back")
    if not same(s["goodput_rps"], metrics.get("goodput_rps")):
        raise UsageError(f"report: {where}: steps[{i}].goodput_rps is {fmt(s['goodput_rps'])} "
                         f"but {relative} gives {fmt(metrics.get('goodput_rps'))}")
    if s["meets"] is not meets(slos, s["values"]):
        raise UsageError(f"report: {where}: steps[{i}].meets is {fmt(s['meets'])}, but its "
                         f"values {fmt(s['values'])} say {fmt(not s['meets'])}")


def load_capacity(folder: Path) -> tuple[dict[str, Any], tuple[Slo, ...], list[str],
                                         list[dict[str, Any]]]:
    """(capacity.json, its SLOs, each step's benchmark.json relative to `folder`, each step's
    document without its rows), checked as the module doc says."""
    path = folder / CAPACITY_FILE
    where = str(path)
    doc = read_json(path, "the capacity.json of a folder anvil capacity wrote",
                    command="report")
    slos = _shape(doc, where)
    by = doc["by"]
    relatives, docs = [], []
    replay = Search(1, doc["maximum"], doc["resolution"], integer=by == "users")
    for i, s in enumerate(doc["steps"]):
        recorded = Path(s["benchmark"])
        relative = f"{recorded.parent.name}/{recorded.name}"
        bench = folder / relative
        if not bench.is_file():
            raise UsageError(f"report: {where}: steps[{i}].benchmark {s['benchmark']!r}: no "
                             f"{relative} in {folder}; give the folder anvil capacity wrote, "
                             "with its steps' run folders")
        problems = verify_file(bench)
        if problems:
            raise UsageError(f"report: {bench} does not verify ({len(problems)} problem(s), "
                             f"the first: {problems[0]}); see `anvil verify {bench}`")
        step_doc = scan_benchmark(bench).doc
        _check_step(i, s, step_doc, slos, where, relative)
        if s["trusted"]:
            replay.record(s[by], s["meets"])
        relatives.append(relative)
        docs.append(step_doc)
    want = None if doc["stopped"] else replay.capacity()
    if (doc["capacity"] is None) != (want is None) or doc["capacity"] != want:
        raise UsageError(f"report: {where}: capacity is {fmt(doc['capacity'])} but its steps "
                         f"give {fmt(want)} (the largest load meeting every SLO below the "
                         "smallest that did not)")
    return doc, slos, relatives, docs


# -- the figures -----------------------------------------------------------------------------


def _mark_capacity(ax: Any, doc: dict[str, Any]) -> None:
    if doc["capacity"] is not None:
        ax.axvline(doc["capacity"], color=COLOURS["capacity"], linestyle="--", linewidth=1.2,
                   label=f"capacity {_load_text(doc['capacity'])} {doc['by']}")
    else:  # the whole reason is in the page's text and table; here its first clause
        why = (f"stopped: {doc['stopped'].split(':')[0]}" if doc["stopped"]
               else "no load met every SLO")
        ax.text(0.5, 0.98, textwrap.shorten(why, 70), fontsize=7, ha="center", va="top",
                transform=ax.transAxes, color=FAILS_COLOUR)


def _by_load(doc: dict[str, Any], y: list[float | None], ok: list[bool]
             ) -> tuple[Any, Any, Any, Any]:
    """(loads, values, ok, trusted), sorted by load."""
    by = doc["by"]
    loads = np.array([float(s[by]) for s in doc["steps"]])
    order = np.argsort(loads, kind="stable")
    values = np.array([np.nan if v is None else float(v) for v in y])
    trusted = np.array([s["trusted"] for s in doc["steps"]], dtype=bool)
    return loads[order], values[order], np.array(ok, dtype=bool)[order], trusted[order]


def _points(ax: Any, doc: dict[str, Any], y: list[float | None], label: str,
            ok: list[bool], said: tuple[str, str]) -> None:
    """The values against the load: a grey line, green/red dots as `ok` says, a ring round
    a step the search did not trust."""
    x, v, good, trusted = _by_load(doc, y, ok)
    ax.plot(x, v, "-", color="#999999", linewidth=1, label=label)
    for mask, colour, text in ((good, MEETS_COLOUR, said[0]), (~good, FAILS_COLOUR, said[1])):
        if mask.any():
            ax.plot(x[mask], v[mask], "o", color=colour, label=text)
    if (~trusted).any():
        ax.plot(x[~trusted], v[~trusted], "o", markersize=12, markerfacecolor="none",
                color="#222222", label="not trusted (search stopped)")


def _overall(doc: dict[str, Any]) -> tuple[list[bool], tuple[str, str]]:
    return [s["meets"] for s in doc["steps"]], ("meets every SLO", "fails an SLO")


def slo_figure(doc: dict[str, Any], slos: tuple[Slo, ...]) -> Figure:
    ncols = min(2, len(slos))
    nrows = math.ceil(len(slos) / ncols)
    fig, axes = draw.new((10.0, 3.6 * nrows), ncols=ncols, nrows=nrows)
    for k, slo in enumerate(slos):
        ax = axes[k // ncols][k % ncols]
        if not doc["steps"]:
            draw.no_data(ax, "no step ran")
            continue
        values = [s["values"][slo.key] for s in doc["steps"]]
        _points(ax, doc, values, slo.key, [meets((slo,), {slo.key: v}) for v in values],
                ("meets this SLO", "fails this SLO"))
        ax.axhline(slo.limit, color=COLOURS["slo"], linestyle=":", label=f"SLO {slo.text()}")
        _mark_capacity(ax, doc)
        ax.set_xlabel(doc["by"])
        ax.set_ylabel(slo.key)
        ax.set_title(slo.text())
        ax.legend(fontsize=7, loc="best")
    for k in range(len(slos), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    return draw.finish(fig, "capacity-slo.png", "Each SLO's value against the load",
                       "One point per step (capacity.json steps[].values), green where the "
                       "step met this SLO, red where it did not; the dotted line is the "
                       "SLO's limit, the dashed one the capacity found (the largest load "
                       "meeting every SLO below the smallest that did not).", (CAPACITY_FILE,))


def goodput_figure(doc: dict[str, Any]) -> Figure:
    fig, axes = draw.new()
    ax = axes[0][0]
    good = [s["goodput_rps"] for s in doc["steps"]]
    if not any(v is not None for v in good):
        draw.no_data(ax, "no step has goodput_rps (the steps ran without goodput criteria)")
    else:
        _points(ax, doc, good, "goodput_rps", *_overall(doc))
        _mark_capacity(ax, doc)
        ax.set_xlabel(doc["by"])
        ax.set_ylabel("goodput (requests/s meeting every criterion)")
        ax.legend(fontsize=7)
    return draw.finish(fig, "capacity-goodput.png", "Goodput against the load",
                       "Each step's goodput_rps (capacity.json steps[], equal to its "
                       "benchmark.json metrics.goodput_rps).", (CAPACITY_FILE,))


def key_figure(doc: dict[str, Any], docs: list[dict[str, Any]],
               relatives: list[str]) -> Figure:
    fig, axes = draw.new(draw.TALL, ncols=2, nrows=2)
    for k, (name, keys) in enumerate(KEY_FIGURES):
        ax = axes[k // 2][k % 2]
        if not docs:
            draw.no_data(ax, "no step ran")
            continue
        for key, style in zip(keys, ("o-", "s--"), strict=False):
            y = [(d.get("metrics") or {}).get(key) for d in docs]
            x, v, _, _ = _by_load(doc, y, _overall(doc)[0])
            ax.plot(x, v, style, color=COLOURS[name], label=key)
        _mark_capacity(ax, doc)
        ax.set_xlabel(doc["by"])
        f = catalog.BY_NAME.get(name)
        ax.set_ylabel(f.long_label if f else "output throughput (tok/s)")
        ax.legend(fontsize=7)
    return draw.finish(fig, "capacity-figures.png", "Latency and throughput against the load",
                       "Each step's benchmark.json metrics (time to first token, end to end, "
                       "decode rate: nearest-rank p50 and p95; output throughput).", relatives)


def order_figure(doc: dict[str, Any]) -> Figure:
    fig, axes = draw.new((10.0, 3.0))
    ax = axes[0][0]
    steps = doc["steps"]
    if not steps:
        draw.no_data(ax, "no step ran")
    else:
        n = np.arange(1, len(steps) + 1)
        loads = np.array([float(s[doc["by"]]) for s in steps])
        ok = np.array([s["meets"] for s in steps], dtype=bool)
        ax.plot(n, loads, "-", color="#999999", linewidth=1)
        ax.plot(n[ok], loads[ok], "o", color=MEETS_COLOUR, label="meets")
        ax.plot(n[~ok], loads[~ok], "o", color=FAILS_COLOUR, label="fails")
        if doc["capacity"] is not None:
            ax.axhline(doc["capacity"], color=COLOURS["capacity"], linestyle="--",
                       label=f"capacity {_load_text(doc['capacity'])}")
        ax.axhline(doc["maximum"], color="#7f7f7f", linestyle=":", label="--max")
        ax.set_xticks(n)
        ax.set_xlabel("step (in the order the search ran it)")
        ax.set_ylabel(doc["by"])
        ax.legend(fontsize=7)
    return draw.finish(fig, "capacity-search.png", "The search: doubling, then bisecting",
                       "The load of each step in the order run (capacity.json steps[]).",
                       (CAPACITY_FILE,))


def steps_table(doc: dict[str, Any], slos: tuple[Slo, ...], relatives: list[str],
                note: str) -> Table:
    rows, classes = [], []
    for i, (s, rel) in enumerate(zip(doc["steps"], relatives, strict=True)):
        rows.append((str(i + 1), _load_text(s[doc["by"]]),
                     *(cell(s["values"][slo.key]) for slo in slos), cell(s["goodput_rps"]),
                     cell(s["trusted"]), rel, "meets" if s["meets"] else "fails"))
        classes.append("pass" if s["meets"] else "fail")
    return Table("Steps, in the order the search ran them",
                 ("step", doc["by"], *(s.text() for s in slos), "goodput_rps", "trusted",
                  "benchmark", "result"), tuple(rows), note=note,
                 classes=tuple(classes))


def page_text(doc: dict[str, Any], slos: tuple[Slo, ...], relatives: list[str],
              docs: list[dict[str, Any]]) -> tuple[list[str], Table, Table]:
    """(the lines under the title, the search's table, the steps' table)."""
    by = doc["by"]
    first = docs[0] if docs else {}
    found = (f"capacity {_load_text(doc['capacity'])} {by}" if doc["capacity"] is not None
             else f"no capacity: {doc['stopped'] or 'no load met every SLO'}")
    lines = [f"{first.get('model') or 'unknown model'} at {first.get('base_url') or '?'} "
             f"(engine {first.get('engine') or 'unknown'})",
             f"search by {by} for {', '.join(doc['slo'])}: {found}; {len(doc['steps'])} "
             f"steps, resolution {_load_text(doc['resolution'])}, maximum "
             f"{_load_text(doc['maximum'])}"]
    rowless = [s.key for s in slos if s.key != "error_rate"
               and any(s.key not in (d.get("metrics") or {}) for d in docs)]
    result = Table("The search (capacity.json)", ("by", "SLOs", "resolution", "maximum",
                                                   "stopped", "capacity"),
                   ((by, ", ".join(doc["slo"]), _load_text(doc["resolution"]),
                     _load_text(doc["maximum"]), doc["stopped"] or "-",
                     cell(doc["capacity"])),),
                   classes=("pass" if doc["capacity"] is not None else "fail",))
    note = ("values as capacity.json records them; each equals its step's benchmark.json"
            if not rowless else
            f"{', '.join(rowless)}: as capacity.json records them (a percentile of the "
            "steps' rows, not in their metrics; the rows are not re-read here); every other "
            "value equals its step's benchmark.json")
    return lines, result, steps_table(doc, slos, relatives, note)


def capacity_curve(folder: Path, doc: dict[str, Any], relatives: list[str]) -> Curve:
    """The search's steps as one curve of the frontier, each from its own run and rows."""
    return Curve(f"capacity search ({doc['by']})", tuple(
        run_point(r.doc, r.rows, f"{doc['by']} {_load_text(s[doc['by']])}", s[doc["by"]])
        for s, r in zip(doc["steps"], (read_run(folder / rel) for rel in relatives),
                        strict=True)))


def capacity_page(folder: Path) -> tuple[str, list[str], list[Section], list[str]]:
    """(title, lines under it, sections, source files) of a capacity search's report."""
    doc, slos, relatives, docs = load_capacity(folder)
    lines, result, steps = page_text(doc, slos, relatives, docs)
    sections = [Section("Capacity", tables=(result,),
                        figures=(slo_figure(doc, slos), goodput_figure(doc))),
                Section("The steps", tables=(steps,),
                        figures=(key_figure(doc, docs, relatives), order_figure(doc))),
                frontier_section([capacity_curve(folder, doc, relatives)], relatives)]
    return (f"anvil capacity {folder.name}", lines, sections,
            [CAPACITY_FILE, *dict.fromkeys(relatives)])
