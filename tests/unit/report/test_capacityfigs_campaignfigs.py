"""`anvil report` of a capacity search and of a campaign: what the page says is what the
files say, and a file the others contradict is refused.

The folders are real (`reportbuild`: anvil's own writers, no network): a capacity search of
six steps and a campaign of two variants, three runs each, with its summary. Each page must
name every file it was made from with the file's SHA-256 (computed here), show the files'
values in its tables (read here from the files, formatted as the page says it formats), and
hold valid PNGs, as many as it draws; a damaged capacity.json, a step whose figures differ
from the search's, and a stale or foreign summary.json are refused in one line naming the
field. The example campaign of the spec (tests/summarybuild.py's folder: four variants,
five runs each, checks files) shows the functional and multimodal blocks as tables.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from reportbuild import CAPACITY, CAPACITY_LOADS, campaign_folder, capacity_folder
from summarybuild import (
    DATA,
    SUMMARY_NAME,
    accept_all,
    all_entries,
    example_docs,
    write_folder,
)

from anvil_metrics.cli import main as cli
from anvil_metrics.errors import UsageError
from anvil_metrics.report.build import make_report
from anvil_metrics.report.campaignfigs import load_campaign, page_text, tables
from anvil_metrics.report.capacityfigs import load_capacity, slo_figure
from anvil_metrics.report.capacityfigs import page_text as capacity_text
from anvil_metrics.report.page import cell
from anvil_metrics.summary.decide import DISPLAY_DECIMALS, ROW_METRICS
from anvil_metrics.summary.stats import bootstrap_mean_ci

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def sha_row(folder: Path, relative: str) -> str:
    """The footer's row for one source file, from the file itself."""
    data = (folder / relative).read_bytes()
    return (f"<tr><td>{html.escape(relative)}</td><td>{len(data)}</td>"
            f'<td class="src">{hashlib.sha256(data).hexdigest()}</td></tr>')


def footer_files(page: str) -> list[str]:
    footer = page[page.index("<footer>"):]
    return re.findall(r"<tr><td>([^<]+)</td><td>\d+</td>", footer)


def row(*cells: str, last_class: str = "") -> str:
    out = "".join(f"<td>{html.escape(c)}</td>" for c in cells[:-1])
    last = html.escape(cells[-1])
    out += f'<td class="{last_class}">{last}</td>' if last_class else f"<td>{last}</td>"
    return f"<tr>{out}</tr>"


def check_pngs(report: Any, page: str, names: list[str]) -> None:
    """The PNGs beside the page are these, valid, and the very ones inlined in it."""
    assert [p.name for p in report.png_paths] == names
    inlined = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)">', page)
    assert len(inlined) == len(names)
    for path, data in zip(report.png_paths, inlined, strict=True):
        png = path.read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 2000, path
        assert base64.b64decode(data) == png, path


# --- a capacity search ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def capacity(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, str]:
    """(the search's folder, its report, the page's text)."""
    root = tmp_path_factory.mktemp("capreport")
    folder = capacity_folder(root)
    report = make_report(folder, root / "out")
    return folder, report, report.html_path.read_text()


def test_capacity_page_names_its_files_and_their_sha256(capacity) -> None:
    folder, report, page = capacity
    doc = load(folder / "capacity.json")
    steps = [f"{Path(s['benchmark']).parent.name}/benchmark.json" for s in doc["steps"]]
    assert footer_files(page) == ["capacity.json", *steps]
    for relative in footer_files(page):
        assert sha_row(folder, relative) in page, relative
    assert report.kind == "capacity" and report.html_path.parent == folder.parent / "out"


def test_capacity_tables_hold_the_files_values(capacity) -> None:
    folder, _, page = capacity
    doc = load(folder / "capacity.json")
    assert [s["users"] for s in doc["steps"]] == CAPACITY_LOADS and doc["capacity"] == CAPACITY
    assert row("users", ", ".join(doc["slo"]), "1", "16", "-", str(CAPACITY),
               last_class="pass") in page
    for i, s in enumerate(doc["steps"]):
        bench = folder / Path(s["benchmark"]).parent.name / "benchmark.json"
        metrics = load(bench)["metrics"]
        # the search's figures are its steps' own
        assert s["values"]["ttft_p95_ms"] == metrics["ttft_p95_ms"]
        assert s["goodput_rps"] == metrics["goodput_rps"]
        want = row(str(i + 1), str(s["users"]), cell(s["values"]["ttft_p95_ms"]),
                   cell(s["values"]["error_rate"]), cell(s["goodput_rps"]),
                   cell(s["trusted"]), f"{bench.parent.name}/benchmark.json",
                   "meets" if s["meets"] else "fails",
                   last_class="pass" if s["meets"] else "fail")
        assert want in page, want
    assert f"capacity {CAPACITY} users; 6 steps" in page


def test_capacity_figures_are_valid_pngs(capacity) -> None:
    _, report, page = capacity
    check_pngs(report, page, ["capacity-slo.png", "capacity-goodput.png",
                              "capacity-figures.png", "capacity-search.png"])
    assert "[capacity-figures.png from benchmark-step004/benchmark.json, " in page


def _edit(folder: Path, tmp: Path, change) -> Path:
    copy = tmp / "copy"
    shutil.copytree(folder, copy)
    doc = load(copy / "capacity.json")
    change(doc, copy)
    (copy / "capacity.json").write_bytes(orjson.dumps(doc))
    return copy


def _bump(doc: dict, copy: Path) -> None:
    v = doc["steps"][0]["values"]["ttft_p95_ms"]
    doc["steps"][0]["values"]["ttft_p95_ms"] = float(np.nextafter(v, np.inf))


def _damage_step(doc: dict, copy: Path) -> None:
    bench = copy / "benchmark-step008" / "benchmark.json"
    run = load(bench)
    run["metrics"]["e2e_p50_ms"] += 1.0
    bench.write_bytes(orjson.dumps(run, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


@pytest.mark.parametrize(("change", "said"), [
    (lambda d, c: d.update(by="load"), 'by "load" is not allowed; expected "users" or "rate"'),
    (lambda d, c: d["steps"][1].update(meets="yes"), 'steps[1].meets "yes" is not allowed; '
     "expected true or false"),
    (lambda d, c: d["steps"][2]["values"].pop("error_rate"), "steps[2].values {"),
    (lambda d, c: d.update(slo=["ttft_p95 <= fast"]), "slo 'ttft_p95 <= fast' is not allowed"),
    (lambda d, c: d.update(capacity=10), "capacity is 10 but its steps give 9"),
    (lambda d, c: d["steps"][3].update(meets=True), "steps[3].meets is true, but its values"),
    (_bump, "steps[0].values.ttft_p95_ms is 69.00000000000001 but "
     "benchmark-step004/benchmark.json gives 69.0"),
    (lambda d, c: d["steps"][5].update(benchmark="/elsewhere/benchmark-step099/benchmark.json"),
     "steps[5].benchmark '/elsewhere/benchmark-step099/benchmark.json': no "
     "benchmark-step099/benchmark.json in"),
    (_damage_step, "benchmark-step008/benchmark.json does not verify"),
])
def test_a_capacity_json_its_steps_do_not_back_is_refused(capacity, tmp_path: Path, change,
                                                          said: str) -> None:
    copy = _edit(capacity[0], tmp_path, change)
    with pytest.raises(UsageError) as e:
        make_report(copy, tmp_path / "out")
    assert said in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("report: ")
    assert not (tmp_path / "out").exists()


def test_a_broken_capacity_json_is_one_line_exit_2(capacity, tmp_path: Path, capsys) -> None:
    copy = _edit(capacity[0], tmp_path, lambda d, c: None)
    (copy / "capacity.json").write_text('{"by": "users", ')
    assert cli.main(["report", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"anvil: report: {copy / 'capacity.json'} "
                                                   "cannot be read as JSON")


def test_a_search_that_stopped_says_why(capacity, tmp_path: Path) -> None:
    """The last step not trusted: no capacity, the reason on the page and in the figure."""
    why = "the step at users 9 is not trusted: the load generator was saturated"

    def stop(doc: dict, copy: Path) -> None:
        doc["steps"][-1]["trusted"] = False
        doc.update(stopped=why, capacity=None)

    copy = _edit(capacity[0], tmp_path, stop)
    doc, slos, relatives, docs = load_capacity(copy)
    lines, result, steps = capacity_text(doc, slos, relatives, docs)
    assert lines[1].endswith(f"no capacity: {why}; 6 steps, resolution 1, maximum 16")
    assert result.rows == (("users", "ttft_p95_ms<=150, error_rate<=0.05", "1", "16", why,
                            "null"),) and result.classes == ("fail",)
    assert [r[-3] for r in steps.rows] == ["yes"] * 5 + ["no"]
    assert slo_figure(doc, slos).png.startswith(PNG_MAGIC)


# --- a campaign -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, str]:
    root = tmp_path_factory.mktemp("campreport")
    folder = campaign_folder(root)
    report = make_report(folder, root / "out")
    return folder, report, report.html_path.read_text()


def display(field: str, v: Any) -> str:
    return "null" if v is None else f"{v:,.{DISPLAY_DECIMALS.get(field, 2)}f}"


def test_campaign_page_names_its_files_and_their_sha256(campaign) -> None:
    folder, report, page = campaign
    runs = load(folder / "campaign.json")["runs"]
    by_variant = [f"{r['folder']}/benchmark.json" for v in ("m/off", "m/on")
                  for r in sorted(runs, key=lambda r: r["run_index"]) if r["variant"] == v]
    assert footer_files(page) == ["campaign.json", "summary.json", *by_variant]
    for relative in footer_files(page):
        assert sha_row(folder, relative) in page, relative
    assert "from summary.json, which recomputes from the runs" in page


def test_campaign_tables_hold_the_summarys_values(campaign) -> None:
    folder, _, page = campaign
    doc = load(folder / "summary.json")
    assert doc["decision"] == "promotion"
    assert row("report-test", "m/on", "m/off", "promotion", last_class="pass") in page
    for g in doc["gates"]:
        assert g["outcome"] == "pass"
        assert f'<td>{html.escape(g["reason"])}</td><td class="pass">pass</td>' in page
    improvement = doc["gates"][0]["figures"]
    low, high = improvement["improvement_ci95_percent"]
    assert (f"<td>{improvement['improvement_percent']:.1f} % (95 % interval {low:.1f} … "
            f"{high:.1f} %)</td>") in page
    for r in doc["performance"]:
        fields = [f for f, _ in ROW_METRICS]
        assert row(f"{r['model']}/{r['speculation']}", str(r["runs"]),
                   *(display(f, r[f]) for f in fields)) in page
    for reason in doc["decision_reasons"]:
        assert f"<tr><td>{html.escape(reason)}</td></tr>" in page


def test_campaign_figures_are_valid_pngs(campaign) -> None:
    _, report, page = campaign
    check_pngs(report, page, ["campaign-variants.png", "campaign-deltas.png"])


def test_without_summary_json_it_is_computed_and_said(campaign, tmp_path: Path) -> None:
    folder = campaign[0]
    copy = tmp_path / "c"
    shutil.copytree(folder, copy)
    (copy / "summary.json").unlink()
    from_file, in_memory = load_campaign(folder), load_campaign(copy)
    assert from_file.from_file and not in_memory.from_file
    _, lines, sources = page_text(in_memory)
    assert lines[1].endswith("summary.json absent: the summary was computed in memory, as "
                             "`anvil summarize` would write it")
    assert "summary.json" not in sources and len(sources) == 7
    # the same figures as from the file
    assert tables(in_memory) == tables(from_file)


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: d["performance"][1].update(
        e2e_p50_ms=float(np.nextafter(d["performance"][1]["e2e_p50_ms"], np.inf))),
     "(1 difference(s), the first: performance[1].e2e_p50_ms: file has "),
    (lambda d: d.update(schema="something-else/v1"), "is not a anvil-serving.public-benchmark-"
     "summary/v1 document; re-run `anvil summarize "),
])
def test_a_stale_summary_is_refused(campaign, tmp_path: Path, change, said: str) -> None:
    copy = tmp_path / "c"
    shutil.copytree(campaign[0], copy)
    doc = load(copy / "summary.json")
    change(doc)
    (copy / "summary.json").write_bytes(orjson.dumps(doc))
    with pytest.raises(UsageError) as e:
        make_report(copy, tmp_path / "out")
    text = str(e.value)
    assert said in text and "\n" not in text and text.startswith("report: ")
    assert text.endswith(f"re-run `anvil summarize {copy}`") or "to write it" in text


def test_the_example_campaign_shows_checks_and_telemetry(tmp_path: Path) -> None:
    """The spec example's folder (runs constructed to give its rows; their files are not
    real runs, so every one is accepted): functional and multimodal blocks as tables with
    pass classes, telemetry ranges, the checks files among the sources."""
    example = orjson.loads((DATA / SUMMARY_NAME).read_bytes())
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    d = load_campaign(folder, verify=accept_all)
    title, lines, sources = page_text(d)
    assert title == "anvil campaign qwen-fp8-vs-nvfp4"
    assert "summary.json absent" in lines[1]
    assert sources[-4:] == [f"checks/{v.replace('/', '+')}.json" for v in (
        "official-fp8/off", "official-fp8/mtp3", "inferact-nvfp4/off", "inferact-nvfp4/mtp3")]
    assert all((folder / s).is_file() for s in sources) and len(sources) == 1 + 20 + 4
    by_title = {t.title: t for group in tables(d).values() for t in group}
    functional = by_title["Functional checks (functional)"]
    rows = dict(zip((r[0] for r in functional.rows), functional.classes, strict=True))
    assert rows["both_models.coding"] == "pass" and rows["both_models.tools"] == ""
    assert dict(functional.rows)["both_models.tools"] == example["functional"]["both_models"][
        "tools"]
    assert dict(by_title["Multimodal checks (multimodal)"].rows)["official_fp8.result"] == "pass"
    telemetry = {r[0]: r for r in by_title["Sampled speculative telemetry"].rows}
    low, high = example["sampled_speculative_telemetry"][0]["accepted_length_range"]
    assert telemetry["official-fp8/mtp3"][1] == f"{low:.2f} … {high:.2f}"
    gates = {r[0]: (r[-1], c) for r, c in zip(by_title["Gates"].rows,
                                              by_title["Gates"].classes, strict=True)}
    assert gates["e2e_p50_improvement_percent"] == ("fail", "fail")
    assert gates["functional"] == ("pass", "pass")


def test_bootstrap_mean_interval_by_hand() -> None:
    # two runs 1 and 3: a resampled mean is 1, 2 or 3 (1/4, 1/2, 1/4), so with 10,000
    # resamples the 2.5th and 97.5th percentiles are 1 and 3
    assert bootstrap_mean_ci([1.0, 3.0], seed=0) == (1.0, 3.0)
    assert bootstrap_mean_ci([5.0, 5.0, 5.0], seed=3) == (5.0, 5.0)
    assert bootstrap_mean_ci([5.0], seed=0) is None
    values = [10.0, 11.0, 12.5, 9.0, 10.5]
    low, high = bootstrap_mean_ci(values, seed=7)
    assert low < float(np.mean(values)) < high and (low, high) == bootstrap_mean_ci(values,
                                                                                     seed=7)
    assert 9.0 <= low and high <= 12.5
