"""`anvil verify` of a summary: every figure recomputed from its campaign folder.

The folders are the ones `tests/summarybuild.py` builds by hand (the spec example's constructed
runs), so a clean summary is known truth: it was written by `anvil summarize`'s own
functions from those runs. Their benchmark files are not valid documents (their metrics
were edited), so `verify_summary` is given the verifier that accepts them, except where the
command itself is run: there the real verifier leaves every run out, and verify says the
figures cannot be recomputed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from summarybuild import DATA, SUMMARY_NAME, accept_all, all_entries, example_docs, write_folder

from anvil_metrics.cli import main as cli
from anvil_metrics.summary.folder import read_campaign_folder, summary_document, write_summary
from anvil_metrics.summary.verify import differences, shape_problems, verify_summary


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return orjson.loads((DATA / SUMMARY_NAME).read_bytes())


def summarized(tmp_path: Path, example: dict[str, Any], seed: int = 0,
               out: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """A campaign folder and its summary.json (in the folder, or at `out`)."""
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    doc = summary_document(read_campaign_folder(folder, verify=accept_all), seed=seed)
    path = out or folder / "summary.json"
    write_summary(doc, "", path, path.with_suffix(".md"))
    return path, orjson.loads(path.read_bytes())


def test_a_summary_recomputes_from_its_folder(tmp_path: Path, example) -> None:
    path, doc = summarized(tmp_path, example)
    check = verify_summary(doc, path, verify=accept_all)
    assert check.problems == []
    assert check.runs == 20 and check.folder == path.parent.resolve()


def test_each_changed_figure_is_named(tmp_path: Path, example) -> None:
    path, doc = summarized(tmp_path, example)
    want = doc["performance"][2]["e2e_p50_ms"]
    doc["performance"][2]["e2e_p50_ms"] = want + 1e-9  # not one bit may differ
    doc["sampled_speculative_telemetry"][0]["acceptance_rate_range"][1] = 0.99
    doc["decision"] = "promotion"
    problems = verify_summary(doc, path, verify=accept_all).problems
    assert problems[:2] == [
        'decision: file has "promotion", recomputed "no-promotion"',
        f"performance[2].e2e_p50_ms: file has {want + 1e-9!r}, recomputed {want!r}"]
    assert len(problems) == 3
    assert problems[2].startswith("sampled_speculative_telemetry[0].acceptance_rate_range[1]:"
                                  " file has 0.99, recomputed ")


def test_the_recorded_seed_is_used(tmp_path: Path, example) -> None:
    path, doc = summarized(tmp_path, example, seed=7)
    assert doc["statistics"]["bootstrap"]["seed"] == 7
    assert verify_summary(doc, path, verify=accept_all).problems == []
    doc["statistics"]["bootstrap"]["seed"] = 0  # the intervals are seed 7's, not seed 0's
    problems = verify_summary(doc, path, verify=accept_all).problems
    assert problems and all("ci95_percent" in p or "improvement_ci95" in p
                            or "decision_reasons" in p or "gates[" in p for p in problems)
    assert any(p.startswith("performance[1].decode_delta_ci95_percent[1]: file has ")
               for p in problems)


def test_a_run_gone_from_the_folder_shows(tmp_path: Path, example) -> None:
    path, doc = summarized(tmp_path, example)
    shutil.rmtree(next(path.parent.glob("01-*")))
    problems = verify_summary(doc, path, verify=accept_all).problems
    assert "performance[0].runs: file has 5, recomputed 4" in problems
    assert "campaign.summarized_runs: file has 20, recomputed 19" in problems
    assert any(p.startswith("retained_failures: file has 0 entries, recomputed 1")
               for p in problems)


def test_a_summary_written_elsewhere_finds_its_folder(tmp_path: Path, example) -> None:
    (tmp_path / "out").mkdir()
    path, doc = summarized(tmp_path, example, out=tmp_path / "out" / "s.json")
    check = verify_summary(doc, path, verify=accept_all)
    assert check.problems == [] and check.folder == (tmp_path / "c").resolve()
    shutil.move(tmp_path / "c", tmp_path / "moved")  # neither beside it nor where recorded
    check = verify_summary(doc, path, verify=accept_all)
    assert check.folder is None and check.problems == []
    assert "no campaign.json beside it" in check.why_shape_only


def test_the_spec_example_is_checked_for_shape_only(example) -> None:
    check = verify_summary(example, DATA / SUMMARY_NAME)
    assert check.folder is None and check.problems == [] and check.runs == 0


def test_shape_problems_are_named(example) -> None:
    bad = {**example, "decision": "maybe", "performance": [
        {**example["performance"][0], "ttft_p50_ms": "fast"}, 3]}
    del bad["date"]
    assert shape_problems(bad) == [
        "date: missing",
        'decision: file has "maybe", expected "promotion", "no-promotion" or null',
        'performance[0].ttft_p50_ms: expected a number or null, file has "fast"',
        "performance[1]: expected an object, file has 3",
    ]


def test_differences_by_path() -> None:
    assert differences({"a": [1, 2.0], "b": 1}, {"a": [1, 2], "c": None}) == [
        "a[1]: file has 2.0, recomputed 2",
        "c: missing (recomputed null)",
        "b: file has 1, but the recomputed summary has no such field"]
    assert differences([1], [1, 2], "x") == ["x: file has 1 entries, recomputed 2"]


def test_cli_says_what_it_checked(tmp_path: Path, example, capsys) -> None:
    copy = tmp_path / "example.json"
    shutil.copy(DATA / SUMMARY_NAME, copy)
    assert cli.main(["verify", str(copy)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(f"{copy}: shape checked only, figures not recomputed: no "
                              "campaign.json beside it")
    # the hand-built runs do not verify for real: nothing to recompute from, one line, exit 1
    path, _ = summarized(tmp_path, example)
    assert cli.main(["verify", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("schema: checked against public-summary-v1.schema.json (JSON Schema "
                      "draft 2020-12)")
    assert out[1].startswith("MISMATCH campaign: its figures cannot be recomputed from ")
    assert "no finished run whose benchmark.json verifies" in out[1]
    assert out[-1] == f"{path}: 1 mismatch(es)"


def test_cli_a_benchmark_too_big_to_hold_whole_is_checked_all_the_same(monkeypatch, capsys
                                                                      ) -> None:
    """A benchmark over SMALL_BYTES is verified in blocks (docscan), never parsed whole: its
    fields and blocks are checked against the same definitions as a small one's."""
    import anvil_metrics.summary.verify as sv

    monkeypatch.setattr(sv, "SMALL_BYTES", 1 << 10)
    seed = DATA / "benchmark-v1.000_51f6de0d03ca0563.json"
    assert cli.main(["verify", str(seed)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("schema: checked against anvil's definition of "
                      "anvil-serving.benchmark/v1, the one benchmark-v1.schema.json is "
                      "generated from")
    assert out[-1].endswith("every per-request value and aggregate recomputes exactly")


def test_a_summary_written_before_a_not_included_reason_was_added_verifies(
        tmp_path: Path, example) -> None:
    """A summary an earlier anvil wrote has no `not_included.checks_under_load`: absent is
    not a difference; a reason the file holds is still compared."""
    path, doc = summarized(tmp_path, example)
    assert "checks_under_load" in doc["not_included"]
    older = {**doc, "not_included": {k: v for k, v in doc["not_included"].items()
                                     if k != "checks_under_load"}}
    assert verify_summary(older, path, verify=accept_all).problems == []
    doc["not_included"]["checks_under_load"] = "changed"
    assert [p.split(":")[0] for p in verify_summary(doc, path, verify=accept_all).problems
            ] == ["not_included.checks_under_load"]


def test_a_summary_written_before_the_deltas_verdicts_verifies(tmp_path: Path, example) -> None:
    """A row an earlier anvil wrote has no `<delta>_verdict`: absent is not a difference; a
    verdict the file holds is still compared."""
    path, doc = summarized(tmp_path, example)
    rows = [i for i, r in enumerate(doc["performance"]) if "e2e_delta_verdict" in r]
    assert rows
    older = {**doc, "performance": [{k: v for k, v in r.items() if not k.endswith("_verdict")}
                                    for r in doc["performance"]]}
    assert verify_summary(older, path, verify=accept_all).problems == []
    doc["performance"][rows[0]]["e2e_delta_verdict"] = "changed"
    assert [p.split(":")[0] for p in verify_summary(doc, path, verify=accept_all).problems
            ] == [f"performance[{rows[0]}].e2e_delta_verdict"]
