"""The public summary's figures and gates are one table (`summaryfigures.py`): the summary's
rows, decimals, columns and shape, the campaign's gates, the report's panel titles and the
JSON Schema are made from it — and a figure added to it shows up in each without another
edit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from anvil_metrics import catalog, summaryfigures
from anvil_metrics.campaign import spec
from anvil_metrics.report import campaignfigs
from anvil_metrics.summary import decide, markdown, verify
from anvil_metrics.summaryfigures import (
    IMPROVEMENT_GATE_FIGURES,
    IMPROVEMENT_GATES,
    KNOWN_GATES,
    SUMMARY_BY_NAME,
    SUMMARY_FIGURES,
)

NAMES = [f.name for f in SUMMARY_FIGURES]


def test_summary_tables_are_the_figures():
    assert decide.ROW_METRICS == tuple((f.name, f.metric) for f in SUMMARY_FIGURES)
    assert verify.ROW_FIGURES == tuple(NAMES)
    deltas = [(f.delta, f.name) for f in SUMMARY_FIGURES if f.delta]
    assert list(decide.DELTAS) == deltas and verify.ROW_DELTAS == tuple(d for d, _ in deltas)
    assert markdown.COLUMNS[:-1] == tuple((f.name, f.label) for f in SUMMARY_FIGURES)
    assert [n for n, _ in markdown.DELTA_NAMES] == [d for d, _ in deltas]
    assert {f.name for f in SUMMARY_FIGURES if f.added} <= set(verify.ROW_ADDED)


def test_display_decimals_are_the_figures():
    for f in SUMMARY_FIGURES:
        assert decide.DISPLAY_DECIMALS[f.name] == f.decimals, f.name
        if f.delta:
            assert decide.DISPLAY_DECIMALS[f.delta] == summaryfigures.DELTA_DECIMALS
    per_figure = set(decide.DISPLAY_DECIMALS) - set(decide.TELEMETRY_DECIMALS)
    assert per_figure == set(NAMES) | {f.delta for f in SUMMARY_FIGURES if f.delta}


def test_summary_figures_read_real_metrics_in_their_fields_direction():
    for f in SUMMARY_FIGURES:
        if f.metric in summaryfigures.BLOCK_FIGURES:  # a block's figure: its own unit
            assert f.unit == summaryfigures.BLOCK_FIGURES[f.metric].unit
            continue
        aggregate = catalog.AGGREGATES_BY_NAME[f.metric]  # KeyError: no such metric
        assert f.unit == aggregate.unit, f.name
        if aggregate.inputs and catalog.BY_NAME[aggregate.inputs[0]].percentiles:
            assert f.better == catalog.BY_NAME[aggregate.inputs[0]].better, f.name
    assert SUMMARY_BY_NAME["e2e_p50_ms"].better == "lower"
    assert SUMMARY_BY_NAME["aggregate_output_tok_s"].better == "higher"
    assert SUMMARY_BY_NAME["prompt_tokens_p50"].better is None


def test_gates_refer_to_summary_figures_in_their_direction():
    for gate, (name, higher) in IMPROVEMENT_GATES.items():
        assert higher == (SUMMARY_BY_NAME[name].better == "higher"), gate
        assert ("above" if higher else "below") in spec.GATES[gate].meaning
    assert IMPROVEMENT_GATES["ttft_p50_improvement_percent"] == ("ttft_p50_ms", False)
    assert list(KNOWN_GATES)[:len(IMPROVEMENT_GATE_FIGURES)] == [
        g for g, _ in IMPROVEMENT_GATE_FIGURES]
    assert set(spec.GATES) == set(KNOWN_GATES)


def test_report_labels_are_the_figures():
    assert campaignfigs.LABELS == {f.name: f.long_label for f in SUMMARY_FIGURES}


def test_report_and_summary_labels_unchanged():
    """What the tables were before they came from one table, value for value."""
    assert campaignfigs.LABELS == {
        "ttft_p50_ms": "time to first token p50 (ms)",
        "effective_prefill_tok_s_p50": "effective prefill p50 (tok/s)",
        "decode_tok_s_p50": "decode rate p50 (tok/s)", "e2e_p50_ms": "end to end p50 (ms)",
        "aggregate_output_tok_s": "aggregate output (tok/s)",
        "prompt_tokens_p50": "prompt tokens p50 (server-counted)",
        # issue 49's additions (optional: only where runs have them)
        "output_tok_s_per_gpu": "output per GPU (tok/s)",
        "usd_per_m_output_tokens": "cost per million output tokens (USD)",
        "j_per_output_token": "energy per output token (J)"}
    assert [t for _, t in markdown.COLUMNS] == [
        "TTFT p50 ms", "prefill tok/s p50", "decode tok/s p50", "e2e p50 ms", "output tok/s",
        "prompt tokens", "output tok/s/GPU", "$/M output tok", "J/output tok", "runs"]
    assert decide.DISPLAY_DECIMALS == {
        "ttft_p50_ms": 1, "effective_prefill_tok_s_p50": 0, "decode_tok_s_p50": 1,
        "e2e_p50_ms": 1, "aggregate_output_tok_s": 1, "prompt_tokens_p50": 0,
        "output_tok_s_per_gpu": 1, "usd_per_m_output_tokens": 4, "j_per_output_token": 4,
        "decode_delta_percent": 1, "e2e_delta_percent": 1,
        "accepted_length_range": 2, "acceptance_rate_range": 2}
    assert list(KNOWN_GATES) == [
        "e2e_p50_improvement_percent", "ttft_p50_improvement_percent",
        "decode_p50_improvement_percent", "effective_prefill_p50_improvement_percent",
        "aggregate_output_improvement_percent", "output_per_gpu_improvement_percent",
        "usd_per_m_output_improvement_percent", "j_per_output_token_improvement_percent",
        "no_saturated_runs", "functional", "check_pass_rate_under_load"]


NEW_FIGURE = textwrap.dedent("""
    from anvil_metrics import summaryfigures as s
    s.SUMMARY_FIGURES += (s.SummaryFigure("ttft_p95_ms", "ms", 3, "TTFT p95 ms",
                                          "time to first token p95 (ms)", "ttft_p95_ms",
                                          delta="ttft_delta_percent"),)
    s.SUMMARY_BY_NAME = {f.name: f for f in s.SUMMARY_FIGURES}
    from anvil_metrics.report import campaignfigs
    from anvil_metrics.schemas.verdicts import summary_schema
    from anvil_metrics.summary import decide, fields, markdown, verify
    assert ("ttft_p95_ms", "ttft_p95_ms") in decide.ROW_METRICS
    assert ("ttft_delta_percent", "ttft_p95_ms") in decide.DELTAS
    assert decide.DISPLAY_DECIMALS["ttft_p95_ms"] == 3
    assert decide.DISPLAY_DECIMALS["ttft_delta_percent"] == s.DELTA_DECIMALS
    assert ("ttft_p95_ms", "TTFT p95 ms") in markdown.COLUMNS
    assert "ttft_p95_ms" in verify.ROW_FIGURES and "ttft_delta_percent" in verify.ROW_DELTAS
    assert campaignfigs.LABELS["ttft_p95_ms"] == "time to first token p95 (ms)"
    assert fields.ROW["ttft_p95_ms"][0] == "ms" and "ttft_delta_percent" in fields.ROW
    row = summary_schema()["properties"]["performance"]["items"]["properties"]
    assert "ttft_p95_ms" in row and "ttft_delta_percent" in row
    run = {"metrics": {"ttft_p95_ms": 12.5}}
    got = decide.performance_row(decide.VariantRuns("m", "off", [run]), None, seed=1)
    assert got["ttft_p95_ms"] == 12.5, got
    print("ok")
""")


def test_a_new_figure_appears_everywhere():
    """A summary figure added to `SUMMARY_FIGURES` alone reaches the summary rows, decimals,
    columns, verify's shape, the field descriptions, the JSON Schema and the report (in a
    fresh interpreter: the tables are made at import)."""
    done = subprocess.run([sys.executable, "-c", NEW_FIGURE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
