"""capacityfigs: `anvil report` of a capacity search — what the page says is what the files
say, and a file the others contradict is refused.

The folder is real (`reportbuild`: anvil's own writers, no network): a capacity search of
six steps. The page must name every file it was made from with the file's SHA-256
(computed here), show the files' values in its tables (read here from the files,
formatted as the page says it formats), and hold valid PNGs, as many as it draws; a
damaged capacity.json and a step whose figures differ from the search's are refused in one
line naming the field. (A campaign's report: `test_campaignfigs.py`.)
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from reportbuild import CAPACITY, CAPACITY_LOADS, capacity_folder
from reportpage import PNG_MAGIC, check_pngs, footer_files, load, reported, row, sha_row

from anvil_metrics.cli import main as cli
from anvil_metrics.errors import UsageError
from anvil_metrics.report.build import make_report
from anvil_metrics.report.capacityfigs import load_capacity, slo_figure
from anvil_metrics.report.capacityfigs import page_text as capacity_text
from anvil_metrics.report.page import cell


@pytest.fixture(scope="module")
def capacity(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, str]:
    """(the search's folder, its report, the page's text)."""
    return reported(tmp_path_factory.mktemp("capreport"), capacity_folder)


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
                              "capacity-figures.png", "capacity-search.png", "frontier.png"])
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
                                                   "is not strict JSON (")


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
