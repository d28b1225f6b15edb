"""`anvil summarize`'s reading and writing, on campaign folders built by hand.

Why by hand: the folder is a contract (`campaign.json` + one run folder per run), and every
case that matters — runs pending, failed, not verifying, before_run failures, redone runs,
a variant with nothing left, a campaign whose scenario moved — is a few lines of JSON. The
runs are the spec example's constructed runs (`test_summary.runs_for`: run medians that
average to the example's rows), so the document's figures are checked against the example
itself. The benchmark files are not valid documents (their metrics were edited), so these
tests give `read_campaign_folder` a verifier that accepts them, except where verifying is
the point: there the real `verify_file` meets the seed benchmark file, which verifies, and
an edited copy, which does not.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from summarybuild import (
    BENCHMARK,
    CAMPAIGN_FILE,
    DATA,
    SEED,
    SUMMARY_NAME,
    VARIANTS,
    accept_all,
    all_entries,
    entry,
    example_docs,
    write_folder,
)

from anvil_metrics.cli import main as cli
from anvil_metrics.errors import UsageError
from anvil_metrics.summary.decide import rounded
from anvil_metrics.summary.folder import (
    output_paths,
    read_campaign_folder,
    summary_document,
    write_summary,
)
from anvil_metrics.summary.markdown import markdown


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    """The spec's example (test_summary checks the vendored copy against the shared one)."""
    return orjson.loads((DATA / SUMMARY_NAME).read_bytes())














def test_the_example_document_from_a_folder(tmp_path: Path, example: dict[str, Any]) -> None:
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    # the example's members in the example's order (restoration is not measured: left
    # out, with its reason), anvil's added blocks after them
    shared = [k for k in example if k != "restoration"]
    assert list(doc)[:len(shared)] == shared
    assert list(doc)[len(shared):] == ["gates", "decision_reasons", "statistics",
                                       "not_included", "campaign"]
    for key in ("hardware", "runtime", "models", "common_configuration",
                "speculative_configuration"):
        assert doc[key] == example[key], key
    assert doc["schema"] == example["schema"]
    for got, want in zip(doc["performance"], example["performance"], strict=True):
        shown = rounded(got)
        assert {k: shown[k] for k in want} == want
    proto = {k: v for k, v in doc["performance_protocol"].items() if k != "null_reasons"}
    # the same words, with the counts in digits (summary.performance_protocol's choice)
    assert proto == {**example["performance_protocol"], "aggregation": "mean of run medians "
                     "across 3 first-placement and 2 swapped-placement runs"}
    # the functional and multimodal blocks, made from the four variants' checks files
    assert doc["functional"] == example["functional"]
    assert doc["multimodal"] == example["multimodal"]
    outcomes = {g["gate"]: g["outcome"] for g in doc["gates"]}
    assert outcomes["functional"] == "pass"
    assert doc["decision"] == example["decision"] == "no-promotion"
    assert set(doc["not_included"]) == {"restoration", "checks_under_load"}  # no check class
    assert doc["retained_failures"] == []
    assert doc["campaign"]["planned_runs"] == doc["campaign"]["summarized_runs"] == 20


def test_runs_left_out_are_said_in_words(tmp_path: Path, example: dict[str, Any]) -> None:
    entries = all_entries()
    entries[1] = entry(2, "official-fp8/mtp3", 1, "failed", attempts=2,
                       failure="the server closed the connection")
    entries[2] = entry(3, "inferact-nvfp4/off", 1, "pending")
    entries[4]["before_run"] = {"command": "./swap.sh", "exit_status": 3, "timed_out": False,
                                "output_tail": "swapping\nno GPU 1\n", "seconds": 1.25}
    entries[6]["before_run"] = {"command": "./slow.sh", "exit_status": None, "timed_out": True,
                                "output_tail": "", "seconds": 60.0}
    entries[5]["state"] = "done"  # marked done, but its folder is gone (deleted below)
    folder = write_folder(tmp_path / "c", example_docs(example), entries,
                          redone=[{"folder": "07-inferact-nvfp4-off-run2",
                                   "reason": "interrupted (SIGKILL)"}])
    shutil.rmtree(folder / entries[5]["folder"])
    cf = read_campaign_folder(folder, verify=accept_all)
    doc = summary_document(cf)
    failures = doc["retained_failures"]
    assert failures == [
        "Run 2 (official-fp8/mtp3, run 1, folder 02-official-fp8-mtp3-run1) failed after 2 "
        "attempt(s): the server closed the connection; left out of the figures.",
        "Run 3 (inferact-nvfp4/off, run 1, folder 03-inferact-nvfp4-off-run1) was not run "
        "(still pending); left out of the figures.",
        "Run 5 (official-fp8/off, run 2, folder 05-official-fp8-off-run2): its before_run "
        "command './swap.sh' exited with status 3 after 1.2 s; its output ended: 'no GPU 1'.",
        "Run 6 (official-fp8/mtp3, run 2, folder 06-official-fp8-mtp3-run2) is marked done "
        "but has no benchmark.json; left out of the figures.",
        "Run 7 (inferact-nvfp4/off, run 2, folder 07-inferact-nvfp4-off-run2): its "
        "before_run command './slow.sh' timed out after 60.0 s.",
        "Run folder 07-inferact-nvfp4-off-run2 was redone: interrupted (SIGKILL).",
    ]
    runs = {f"{r['model']}/{r['speculation']}": r["runs"] for r in doc["performance"]}
    assert runs == {"official-fp8/off": 5, "official-fp8/mtp3": 3, "inferact-nvfp4/off": 4,
                    "inferact-nvfp4/mtp3": 5}
    assert doc["performance_protocol"]["runs_per_model"] is None  # the variants disagree
    # the placements' words need every variant to keep the same runs
    assert doc["performance_protocol"]["aggregation"] == "mean of run medians"
    assert doc["campaign"]["summarized_runs"] == 17
    assert cf.run_indices["official-fp8/mtp3"] == (3, 4, 5)


def test_without_checks_files_the_gate_is_not_evaluated_and_said(
        tmp_path: Path, example: dict[str, Any]) -> None:
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries(), checks=False)
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    assert {g["gate"]: g["outcome"] for g in doc["gates"]}["functional"] == "not_evaluated"
    assert set(doc["not_included"]) == {"functional", "multimodal", "restoration",
                                        "checks_under_load"}
    assert doc["not_included"]["functional"].startswith("not measured: no functional suite")
    assert doc["retained_failures"] == [
        f"Checks of {v} were not made: no checks file (the campaign did not reach them)."
        for v in VARIANTS]


def test_a_variant_with_no_run_left_is_refused(tmp_path: Path, example: dict[str, Any]) -> None:
    entries = [e if e["variant"] != "inferact-nvfp4/off" else {**e, "state": "failed"}
               for e in all_entries()]
    folder = write_folder(tmp_path / "c", example_docs(example), entries)
    with pytest.raises(UsageError) as e:
        read_campaign_folder(folder, verify=accept_all)
    assert str(e.value).startswith("summarize: no finished run whose benchmark.json verifies "
                                   "for inferact-nvfp4/off (states: inferact-nvfp4/off: "
                                   "failed, failed, failed, failed, failed)")
    assert "\n" not in str(e.value)


def test_a_run_that_does_not_verify_is_left_out(tmp_path: Path) -> None:
    """The real verifier: the seed benchmark file verifies; a copy whose e2e median was
    edited does not, and is left out with the first problem named."""
    good = orjson.loads(SEED.read_bytes())
    bad = copy.deepcopy(good)
    bad["metrics"]["e2e_p50_ms"] += 1.0
    toml = CAMPAIGN_FILE.read_text().replace("runs_per_variant = 5", "runs_per_variant = 2")
    toml = toml.replace('placements = ["first", "first", "first", "swapped", "swapped"]\n', "")
    entries = [entry(k, v, i) for k, (i, v) in enumerate(
        [(i, v) for i in (1, 2) for v in VARIANTS], 1)]
    docs = {v: [good, good] for v in VARIANTS}
    docs["official-fp8/off"] = [good, bad]
    folder = write_folder(tmp_path / "c", docs, entries, toml=toml)
    cf = read_campaign_folder(folder)
    assert [len(v.runs) for v in cf.variants] == [1, 2, 2, 2]
    (failure,) = cf.failures
    assert failure.startswith("Run 5 (official-fp8/off, run 2, folder 05-official-fp8-off-run2)"
                              ": its benchmark.json does not verify (")
    assert "e2e_p50_ms" in failure and failure.endswith("; left out of the figures.")
    assert BENCHMARK["metrics"]["e2e_p50_ms"] == good["metrics"]["e2e_p50_ms"]


@pytest.mark.parametrize("damage, said", [
    (lambda f: (f / "campaign.json").unlink(), "holds no campaign.json"),
    (lambda f: (f / "campaign.json").write_text("{"), "campaign.json is not strict JSON ("),
    (lambda f: (f / "campaign.json").write_bytes(orjson.dumps({"schema": "x/v9"})),
     "schema 'x/v9' is not allowed; expected 'anvil-campaign/v1'"),
])
def test_a_bad_campaign_json_is_one_line(tmp_path: Path, example: dict[str, Any], damage,
                                         said: str) -> None:
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    damage(folder)
    with pytest.raises(UsageError) as e:
        read_campaign_folder(folder, verify=accept_all)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_scenario_that_no_longer_resolves(tmp_path: Path, example: dict[str, Any]) -> None:
    """The campaign names its scenario relative to its own file; recorded at a path where
    that scenario is not, the campaign cannot be re-checked: one line, exit 2."""
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries(),
                          campaign_file=tmp_path / "moved" / "fp8-vs-nvfp4.toml")
    with pytest.raises(UsageError) as e:
        read_campaign_folder(folder, verify=accept_all)
    text = str(e.value)
    assert "no longer checks out there: scenario:" in text and "performance.toml" in text
    assert "\n" not in text and e.value.exit_code == 2


def test_an_unknown_variant_in_campaign_json(tmp_path: Path, example: dict[str, Any]) -> None:
    entries = all_entries()
    entries[0] = {**entries[0], "variant": "ghost/off"}
    folder = write_folder(tmp_path / "c", example_docs(example), entries[1:])
    data = orjson.loads((folder / "campaign.json").read_bytes())
    data["runs"].insert(0, entries[0])
    (folder / "campaign.json").write_bytes(orjson.dumps(data))
    with pytest.raises(UsageError, match=r"runs\[0\]\.variant 'ghost/off' is not one of"):
        read_campaign_folder(folder, verify=accept_all)


def test_the_report_rounds_and_says_not_significant(tmp_path: Path,
                                                    example: dict[str, Any]) -> None:
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    md = markdown(doc)
    assert ("| official-fp8 | mtp3 | 569.3 | 6,341 | 111.3 | 954.2 | 46.0 | 3,610 | 5 |"
            in md)
    assert "- official-fp8/mtp3 decode_delta_percent: +131.9 % (95 % CI " in md
    assert "- inferact-nvfp4/mtp3 e2e_delta_percent: -26.6 % (95 % CI " in md
    # the candidate improves e2e by 4.2 %, below the gate's 10 %: the gate fails
    gate = next(g for g in doc["gates"] if g["gate"] == "e2e_p50_improvement_percent")
    assert gate["outcome"] == "fail"
    assert "- functional = \"all_pass\": **pass**: all 10 checks passed" in md
    assert "- both_models / tools: 20/20" in md
    assert "- both_models / thinking_disabled_reasoning_leakage: false" in md
    assert "- official_fp8 / general_image_seconds: 9.3" in md
    assert "**no-promotion**, because:" in md
    assert "accepted length 3.35 – 3.52, acceptance rate 0.78 – 0.84" in md
    # a delta whose interval holds a gate's threshold is flagged where it is shown
    row = next(r for r in doc["performance"] if r["speculation"] == "mtp3")
    row["e2e_delta_ci95_percent"] = [-40.0, -5.0]
    assert "not significant against e2e_p50_improvement_percent (the interval contains " \
           "-10 %)" in markdown(doc)
    row["e2e_delta_ci95_percent"] = [-3.0, 2.0]
    assert "not significant (the interval contains 0)" in markdown(doc)


def test_written_in_order_and_atomically(tmp_path: Path, example: dict[str, Any]) -> None:
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    json_path, md_path = output_paths(folder, None)
    assert (json_path, md_path) == (folder / "summary.json", folder / "summary.md")
    write_summary(doc, markdown(doc), json_path, md_path)
    assert list(orjson.loads(json_path.read_bytes())) == list(doc)
    assert md_path.read_text().startswith("# Benchmark summary: qwen-fp8-vs-nvfp4\n")
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


def test_output_path_must_be_json_in_a_folder(tmp_path: Path) -> None:
    assert output_paths(tmp_path, str(tmp_path / "s.json"))[1] == tmp_path / "s.md"
    with pytest.raises(UsageError, match="expected a path ending in .json"):
        output_paths(tmp_path, str(tmp_path / "s.txt"))
    with pytest.raises(UsageError, match="does not exist"):
        output_paths(tmp_path, str(tmp_path / "nowhere" / "s.json"))


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    assert cli.main(["summarize", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("anvil: summarize: ")
    assert "is not a folder" in err


def _check(result: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"result": result, "base_url": "http://127.0.0.1:8000/v1",
            "checked_at": "2026-08-01T17:00:00.000Z", "aliases": rows}


def _row(alias: str, ok: bool = True, first: int | str | None = None) -> dict[str, Any]:
    return {"alias": alias, "result": "pass" if ok else "fail", "listed": True,
            "answered": ok, "attempts": 2 + (first is not None), "retried_after": first,
            "retried_request": "POST /v1/chat/completions" if first is not None else None,
            "reason": None if ok else "POST /v1/chat/completions: HTTP 404"}


def test_the_restoration_block_and_its_retry_in_words(tmp_path: Path,
                                                      example: dict[str, Any]) -> None:
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    record = orjson.loads((folder / "campaign.json").read_bytes())
    record["restoration"] = _check("pass", [_row("llm.primary", first=503),
                                            _row("vision.general"),
                                            _row("vision.ocr", first="connection reset")])
    (folder / "campaign.json").write_bytes(orjson.dumps(record))
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    rest = doc["restoration"]
    assert {k: rest[k] for k in ("result", "router_aliases", "all_tiers_admitting")} == {
        "result": "pass", "router_aliases": example["restoration"]["router_aliases"],
        "all_tiers_admitting": True}
    assert [a["alias"] for a in rest["aliases"]] == rest["router_aliases"]
    assert "restoration" not in doc["not_included"]
    assert list(doc).index("restoration") == list(doc).index("retained_failures") + 1
    assert doc["retained_failures"] == [
        "Restoration: alias llm.primary answered 503 once (POST /v1/chat/completions), then "
        "200 after a retry.",
        "Restoration: alias vision.ocr had its connection reset once "
        "(POST /v1/chat/completions), then 200 after a retry."]
    assert "## Restoration" in markdown(doc)


def test_a_failed_restoration_is_said_and_not_admitting(tmp_path: Path,
                                                        example: dict[str, Any]) -> None:
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    record = orjson.loads((folder / "campaign.json").read_bytes())
    record["restoration"] = _check("fail", [_row("llm.primary"), _row("vision.general", False),
                                            _row("vision.ocr")])
    (folder / "campaign.json").write_bytes(orjson.dumps(record))
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    assert (doc["restoration"]["result"], doc["restoration"]["all_tiers_admitting"]) == (
        "fail", False)
    assert doc["retained_failures"] == [
        "Restoration: alias vision.general did not answer after the last run: "
        "POST /v1/chat/completions: HTTP 404."]


def test_restoration_left_out_says_why(tmp_path: Path, example: dict[str, Any]) -> None:
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    assert "restoration" not in doc
    assert "holds no restoration check" in doc["not_included"]["restoration"]
    record = orjson.loads((folder / "campaign.json").read_bytes())
    record["restoration"] = _check("pass", [_row("llm.primary")])  # not the campaign's list
    (folder / "campaign.json").write_bytes(orjson.dumps(record))
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    assert "restoration" not in doc and "not as anvil writes it" in (
        doc["not_included"]["restoration"])
    toml = CAMPAIGN_FILE.read_text()
    toml = toml[:toml.index("[restoration]")]
    folder = write_folder(tmp_path / "d", example_docs(example), all_entries(), toml=toml)
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    assert "names no [restoration] aliases" in doc["not_included"]["restoration"]
