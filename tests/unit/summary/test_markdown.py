"""summary.markdown: `summary.md` from a small summary document — figures rounded as the
example rounds them, each delta with its interval and a plain "not significant" where the
interval holds 0 or a gate's threshold, each delta's verdict at the 2 % minimum effect with
that margin, a null delta with its reason, and the decision.

Why: a reader takes the words, not the JSON; a delta called significant while its
interval crosses the gate's threshold would read as a promotion the figures do not bear.
(The spec's own example through this report: `test_folder.py`.)
"""

from __future__ import annotations

from typing import Any

from anvil_metrics.summary.markdown import COLUMNS, columns, delta_lines, markdown


def _row(spec: str, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "speculation": spec, "ttft_p50_ms": 123.456,
            "effective_prefill_tok_s_p50": 4567.5, "decode_tok_s_p50": 50.04,
            "e2e_p50_ms": 1000.0, "aggregate_output_tok_s": 9.99,
            "prompt_tokens_p50": 2048.0, "runs": 5, **kw}


def _doc() -> dict[str, Any]:
    return {
        "schema": "s/v1", "date": "2026-08-01", "decision": "no-promotion",
        "campaign": {"name": "c1"},
        "performance_protocol": {"requests_per_run": 10, "runs_per_model": 5,
                                 "concurrency": 1, "configured_input_tokens": 2048,
                                 "max_output_tokens": 256, "aggregation": "mean of medians"},
        "performance": [
            _row("off"),
            _row("mtp", decode_delta_percent=12.34, decode_delta_ci95_percent=[8.0, 16.0],
                 decode_delta_mann_whitney_p=0.00794, decode_delta_verdict="better",
                 e2e_delta_percent=None, e2e_delta_verdict=None,
                 null_reasons={"e2e_delta_percent": "a run has no e2e"})],
        "gates": [{"gate": "decode_p50_improvement_percent", "threshold": 10,
                   "outcome": "fail", "reason": "the interval reaches below 10 %"}],
        "decision_reasons": ["decode did not improve by 10 % for certain"],
        "not_included": {"functional": "no checks were run"},
    }


def test_the_deltas_say_what_their_intervals_allow() -> None:
    assert delta_lines(_doc()) == [
        "- m/mtp decode_delta_percent: +12.3 % (95 % CI 8.0 … 16.0 %; Mann–Whitney p "
        "0.00794): **better** (the interval lies wholly beyond the ±2 % minimum effect); "
        "not significant against decode_p50_improvement_percent (the interval "
        "contains 10 %)",
        "- m/mtp e2e_delta_percent: null (a run has no e2e)"]
    doc = _doc()
    doc["gates"] = []
    doc["performance"][1].update(decode_delta_ci95_percent=[-1.0, 16.0],
                                 decode_delta_verdict="inconclusive")
    assert delta_lines(doc)[0].endswith("; not significant (the interval contains 0)")
    doc["performance"][1]["decode_delta_ci95_percent"] = [1.0, 16.0]
    assert delta_lines(doc)[0].endswith("; significant")
    doc["performance"][1].update(decode_delta_ci95_percent=None, decode_delta_verdict=None)
    assert "(no interval; Mann–Whitney p 0.00794): no verdict (no interval); no interval" \
        in delta_lines(doc)[0]


def test_each_verdict_is_said_with_its_margin_and_an_old_summary_reads_as_before() -> None:
    """The verdict sits beside the interval, in words with the margin it was judged at; a
    summary written before `<d>_verdict` existed has no verdict to say and no word of one."""
    doc = _doc()
    doc["gates"] = []
    row = doc["performance"][1]
    said = {}
    for verdict in ("worse", "equivalent", "inconclusive"):
        row["decode_delta_verdict"] = verdict
        said[verdict] = delta_lines(doc)[0].split("0.00794): ")[1]
    assert said == {
        "worse": "**worse** (the interval lies wholly beyond the ±2 % minimum effect); "
                 "significant",
        "equivalent": "**equivalent** (the 90 % interval lies within the ±2 % minimum "
                      "effect); significant",
        "inconclusive": "**inconclusive** (the interval straddles the ±2 % minimum effect: "
                        "more runs may settle it); significant"}
    del row["decode_delta_verdict"]
    assert delta_lines(doc)[0].endswith("(95 % CI 8.0 … 16.0 %; Mann–Whitney p 0.00794): "
                                        "significant")
    assert "verdict" not in markdown(doc)


def test_too_few_runs_are_never_called_significant() -> None:
    """2 against 2: the rank test's smallest p is 1/3, so however far the interval is from
    0 (here -0.0 % with an interval that excludes it, as seen) the words say so; 4 against
    4 (1/35) can be significant."""
    doc = _doc()
    doc["gates"] = []
    doc["performance"][0]["runs"] = 2
    doc["performance"][1].update(runs=2, decode_delta_percent=-0.04,
                                 decode_delta_ci95_percent=[-0.05, -0.03],
                                 decode_delta_verdict="equivalent")
    assert delta_lines(doc)[0].endswith(
        "; too few runs to tell (2 against 2: the smallest Mann–Whitney p they allow is "
        "0.333)")
    doc["performance"][0]["runs"] = doc["performance"][1]["runs"] = 4
    assert delta_lines(doc)[0].endswith("; significant")


def test_the_report_rounds_the_table_and_gives_the_decision() -> None:
    md = markdown(_doc())
    lines = md.splitlines()
    assert lines[0] == "# Benchmark summary: c1"
    assert "Decision: **no-promotion**." in lines[2]
    assert "10 requests per run, 5 runs per variant, concurrency 1" in md
    header = "| model | speculation | " + " | ".join(t for _, t in columns(_doc())) + " |"
    assert len(columns(_doc())) == len(COLUMNS) - 3  # no row has per GPU, $ or J figures
    assert header in lines
    assert "| m | off | 123.5 | 4,568 | 50.0 | 1000.0 | 10.0 | 2,048 | 5 |" in lines
    assert "- decode_p50_improvement_percent = 10: **fail**: the interval reaches below 10 %" \
        in lines
    assert "- decode did not improve by 10 % for certain" in lines
    assert "- functional: no checks were run" in lines
    assert "- no speculative variant" in lines and "- none" in lines  # telemetry, failures
    assert md.endswith("summary.json keeps full precision.\n")


def test_an_empty_summary_still_reads() -> None:
    md = markdown({})
    assert md.startswith("# Benchmark summary: campaign\n")
    assert "- none (no speculative variant with an off variant)" in md
    assert "Decision: **none**." in md and "## Not included" not in md
