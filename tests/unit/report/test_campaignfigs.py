"""campaignfigs: `anvil report` of a campaign — what the page says is what the files say,
and a summary the runs contradict is refused.

The folder is real (`reportbuild`: anvil's own writers, no network): a campaign of two
variants, three runs each, with its summary. The page must name every file it was made
from with the file's SHA-256 (computed here), show the summary's values in its tables, and
hold valid PNGs; a stale or foreign summary.json is refused in one line naming the field.
The example campaign of the spec (tests/summarybuild.py's folder: four variants, five runs
each, checks files) shows the functional and multimodal blocks as tables.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import summarybuild as sb
from reportbuild import campaign_folder
from reportpage import check_pngs, footer_files, load, reported, row, sha_row

from anvil_metrics.errors import UsageError
from anvil_metrics.report.build import make_report
from anvil_metrics.report.campaignfigs import load_campaign, page_text, tables
from anvil_metrics.summary.decide import DISPLAY_DECIMALS, ROW_METRICS


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, str]:
    return reported(tmp_path_factory.mktemp("campreport"), campaign_folder)


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
        fields = [f for f, _ in ROW_METRICS if f in r]  # the optional ones: none has them
        assert row(f"{r['model']}/{r['speculation']}", str(r["runs"]),
                   *(display(f, r[f]) for f in fields)) in page
    for reason in doc["decision_reasons"]:
        assert f"<tr><td>{html.escape(reason)}</td></tr>" in page


def test_campaign_figures_are_valid_pngs(campaign) -> None:
    _, report, page = campaign
    check_pngs(report, page, ["campaign-variants.png", "campaign-deltas.png", "frontier.png"])


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
    example = orjson.loads((sb.DATA / sb.SUMMARY_NAME).read_bytes())
    folder = sb.write_folder(tmp_path / "c", sb.example_docs(example), sb.all_entries())
    d = load_campaign(folder, verify=sb.accept_all)
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
