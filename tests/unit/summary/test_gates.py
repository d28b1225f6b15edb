"""The check classes' pass rate under load in a campaign summary (issue 51): pooled over a
variant's runs, its Wilson interval, the `check_pass_rate_under_load` gate's outcomes, and
`anvil verify` recomputing both from the runs.

Known truth: two runs whose `mix` blocks judged 40 (39 passed) and 60 (58 passed) answers
of a json check class pool to 97 of 100; the interval is checked against its definition
(the p whose score statistic |p̂ − p| / √(p(1 − p)/n) equals z), found here by bisection,
not by the module's closed form.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from summarybuild import (
    CAMPAIGN_FILE,
    DATA,
    SUMMARY_NAME,
    accept_all,
    all_entries,
    example_docs,
    write_folder,
)

from anvil_metrics.summary.folder import read_campaign_folder, summary_document, write_summary
from anvil_metrics.summary.gates import VariantRuns, pass_rate_gate, pooled_check_classes
from anvil_metrics.summary.markdown import markdown
from anvil_metrics.summary.verify import verify_summary

Z95 = 1.959963984540054  # the 0.975 quantile of the standard normal


def judged_run(judged: int, passed: int, rid: str = "r") -> dict[str, Any]:
    return {"run_id": rid, "mix": {"classes": [
        {"name": "chat", "requests": 100},
        {"name": "strict", "check": "json", "verdicts": {"judged": judged, "passed": passed}}]}}


def score_bound(passed: int, n: int, lower: bool) -> float:
    """The Wilson bound by its definition, solved by bisection."""
    phat = passed / n

    def outside(p: float) -> bool:
        return abs(phat - p) > Z95 * math.sqrt(p * (1 - p) / n)
    lo, hi = (0.0, phat) if lower else (phat, 1.0)
    for _ in range(200):
        mid = (lo + hi) / 2
        if outside(mid) == lower:  # below the lower bound / inside above it
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


TWO_RUNS = VariantRuns("m", "on", [judged_run(40, 39, "a"), judged_run(60, 58, "b")])


def test_two_runs_pool_their_verdicts_with_a_wilson_interval() -> None:
    (c,) = pooled_check_classes(TWO_RUNS)  # the plain class "chat" is not a check class
    assert (c["name"], c["check"], c["runs"], c["judged"], c["passed"]) == (
        "strict", "json", 2, 100, 97)
    assert c["pass_rate"] == 0.97  # 97 / 100, not the mean of 0.975 and 0.9667
    assert c["pass_rate_ci95_low"] == pytest.approx(score_bound(97, 100, True), abs=1e-9)
    assert c["pass_rate_ci95_high"] == pytest.approx(score_bound(97, 100, False), abs=1e-9)
    assert 0.91 < c["pass_rate_ci95_low"] < 0.92 and 0.98 < c["pass_rate_ci95_high"] < 0.99


@pytest.mark.parametrize(("threshold", "outcome"), [
    (0.9, "pass"),              # the whole interval (0.915 … 0.990) is at or above it
    (0.95, "not_significant"),  # the interval contains it
    (0.995, "fail"),            # the whole interval is below it
    (1, "fail"),
    (0, "pass")])
def test_the_gate_compares_the_interval(threshold: float, outcome: str) -> None:
    g = pass_rate_gate(threshold, TWO_RUNS)
    assert g.outcome == outcome, g.reason
    assert g.figures["candidate"] == "m/on" and g.figures["candidate_runs"] == 2
    assert g.figures["check_classes"] == pooled_check_classes(TWO_RUNS)
    assert "strict (json) passed 97 of 100" in g.reason


def test_without_a_check_class_the_gate_is_not_evaluated() -> None:
    plain = VariantRuns("m", "on", [{"run_id": "a", "mix": {"classes": [{"name": "chat"}]}},
                                    {"run_id": "b"}])
    g = pass_rate_gate(0.99, plain)
    assert g.outcome == "not_evaluated" and "no run of m/on has a check class" in g.reason
    nothing = VariantRuns("m", "on", [judged_run(0, 0)])
    g = pass_rate_gate(0.99, nothing)
    assert g.outcome == "not_evaluated" and "no answer of strict was judged" in g.reason
    assert pass_rate_gate(0.99, None).outcome == "not_evaluated"


def test_the_summary_shows_it_and_verify_recomputes_it(tmp_path: Path) -> None:
    example = orjson.loads((DATA / SUMMARY_NAME).read_bytes())
    docs = example_docs(example)
    cand = docs["inferact-nvfp4/mtp3"]
    for i, (judged, passed) in enumerate([(40, 39), (60, 58), (50, 50), (50, 50), (50, 50)]):
        cand[i]["mix"] = judged_run(judged, passed)["mix"]
    toml = CAMPAIGN_FILE.read_text().replace(
        'no_saturated_runs = true\n',
        'no_saturated_runs = true\ncheck_pass_rate_under_load = 0.9\n')
    folder = write_folder(tmp_path / "c", docs, all_entries(), toml=toml)
    doc = summary_document(read_campaign_folder(folder, verify=accept_all))
    (row,) = doc["checks_under_load"]  # only the candidate's runs have a check class
    assert (row["model"], row["speculation"], row["runs"]) == ("inferact-nvfp4", "mtp3", 5)
    (c,) = row["classes"]
    assert (c["judged"], c["passed"], c["pass_rate"]) == (250, 247, 247 / 250)
    assert c["pass_rate_ci95_low"] == pytest.approx(score_bound(247, 250, True), abs=1e-9)
    (gate,) = [g for g in doc["gates"] if g["gate"] == "check_pass_rate_under_load"]
    assert gate["outcome"] == "pass" and gate["figures"]["check_classes"] == [c]
    assert "checks_under_load" not in doc["not_included"]
    assert "inferact-nvfp4/mtp3, class strict (json): 247 of 250 passed" in markdown(doc)
    path = folder / "summary.json"
    write_summary(doc, "", path, path.with_suffix(".md"))
    doc = orjson.loads(path.read_bytes())
    assert verify_summary(doc, path, verify=accept_all).problems == []
    doc["checks_under_load"][0]["classes"][0]["passed"] = 248
    gate = next(g for g in doc["gates"] if g["gate"] == "check_pass_rate_under_load")
    gate["outcome"] = "fail"
    problems = verify_summary(doc, path, verify=accept_all).problems
    assert problems == [
        "checks_under_load[0].classes[0].passed: file has 248, recomputed 247",
        f"gates[{doc['gates'].index(gate)}].outcome: file has \"fail\", recomputed \"pass\""]
