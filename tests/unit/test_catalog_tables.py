"""Every per-figure table of the package is the catalogue's: the summary's figures, decimals,
labels and gates, the report's colours and labels, the live charts' fields and the web page's
keys — and a figure added to the catalogue shows up in each without another edit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from rawbuild import completed

from anvil_metrics import catalog
from anvil_metrics.campaign import spec
from anvil_metrics.live import series
from anvil_metrics.live.webui_page import PAGE_HTML
from anvil_metrics.post.derive import derive_row
from anvil_metrics.report import campaignfigs, draw
from anvil_metrics.summary import decide, markdown, verify

NAMES = [f.name for f in catalog.SUMMARY_FIGURES]


def test_summary_tables_are_the_catalogues():
    assert decide.ROW_METRICS == tuple((f.name, f.metric) for f in catalog.SUMMARY_FIGURES)
    assert verify.ROW_FIGURES == tuple(NAMES)
    deltas = [(f.delta, f.name) for f in catalog.SUMMARY_FIGURES if f.delta]
    assert list(decide.DELTAS) == deltas and verify.ROW_DELTAS == tuple(d for d, _ in deltas)
    assert markdown.COLUMNS[:-1] == tuple((f.name, f.label) for f in catalog.SUMMARY_FIGURES)
    assert [n for n, _ in markdown.DELTA_NAMES] == [d for d, _ in deltas]
    assert {f.name for f in catalog.SUMMARY_FIGURES if f.added} <= set(verify.ROW_ADDED)


def test_display_decimals_are_the_catalogues():
    for f in catalog.SUMMARY_FIGURES:
        assert decide.DISPLAY_DECIMALS[f.name] == f.decimals, f.name
        if f.delta:
            assert decide.DISPLAY_DECIMALS[f.delta] == catalog.DELTA_DECIMALS
    per_figure = set(decide.DISPLAY_DECIMALS) - set(decide.TELEMETRY_DECIMALS)
    assert per_figure == set(NAMES) | {f.delta for f in catalog.SUMMARY_FIGURES if f.delta}


def test_summary_figures_read_real_metrics_in_their_fields_direction():
    for f in catalog.SUMMARY_FIGURES:
        aggregate = catalog.AGGREGATES_BY_NAME[f.metric]  # KeyError: no such metric
        assert f.unit == aggregate.unit, f.name
        if aggregate.inputs and catalog.BY_NAME[aggregate.inputs[0]].percentiles:
            assert f.better == catalog.BY_NAME[aggregate.inputs[0]].better, f.name
    assert catalog.SUMMARY_BY_NAME["e2e_p50_ms"].better == "lower"
    assert catalog.SUMMARY_BY_NAME["aggregate_output_tok_s"].better == "higher"
    assert catalog.SUMMARY_BY_NAME["prompt_tokens_p50"].better is None


def test_gates_refer_to_summary_figures_in_their_direction():
    for gate, (name, higher) in catalog.IMPROVEMENT_GATES.items():
        assert higher == (catalog.SUMMARY_BY_NAME[name].better == "higher"), gate
        assert ("above" if higher else "below") in spec.GATES[gate].meaning
    assert catalog.IMPROVEMENT_GATES["ttft_p50_improvement_percent"] == ("ttft_p50_ms", False)
    assert list(catalog.KNOWN_GATES)[:len(catalog.IMPROVEMENT_GATE_FIGURES)] == [
        g for g, _ in catalog.IMPROVEMENT_GATE_FIGURES]


def test_every_row_field_with_a_direction_is_a_time_or_a_rate():
    for f in catalog.ROW:
        assert f.better in ("higher", "lower", None), f.name
        if f.better is not None:
            assert f.better == ("higher" if f.unit.endswith("/s") else "lower"), f.name


def test_report_colours_and_labels_are_the_catalogues():
    coloured = {f.name: f.colour for f in catalog.ROW if f.colour}
    assert {k: v for k, v in draw.COLOURS.items() if k in catalog.BY_NAME} == coloured
    assert campaignfigs.LABELS == {f.name: f.long_label for f in catalog.SUMMARY_FIGURES}
    assert catalog.BY_NAME["ttft_ms"].long_label == "TTFT (first content) (ms)"
    assert catalog.BY_NAME["request_index"].long_label == "request_index"


def test_live_series_and_page_keys_are_the_catalogues():
    charted = [f for f in catalog.ROW if f.series]
    assert series.SERIES_FIELDS == tuple(f.name for f in charted)
    s = series.Series()
    s.add(0.5, {f.name: 10.0 for f in charted})
    keys = {series.series_key(f.name) for f in charted}
    assert keys <= set(s.as_json())
    for f in charted:
        assert f'id="chart-{f.series.lower()}"' in PAGE_HTML
        assert f"series.{series.series_key(f.name)}" in PAGE_HTML
    assert "@SERIES" not in PAGE_HTML


def test_page_charts_unchanged():
    """The generated charts are the page's hand-written ones, byte for byte."""
    assert """  <figure><figcaption>TTFT p50 (ms) per bucket, within 1 %</figcaption>
    <svg id="chart-ttft" viewBox="0 0 420 220" role="img" aria-label="TTFT p50"></svg>
  </figure>
  <figure><figcaption>decode p50 (tok/s) per bucket, within 1 %</figcaption>
    <svg id="chart-decode" viewBox="0 0 420 220" role="img" aria-label="decode p50"></svg>
  </figure>
</div>""" in PAGE_HTML
    assert "const series = s.series || {t_s: [], ttft_ms_p50: [], decode_tok_s_p50: []};" \
        in PAGE_HTML
    assert """  drawChart(document.getElementById("chart-ttft"), series.t_s, series.ttft_ms_p50);
  drawChart(document.getElementById("chart-decode"), series.t_s, series.decode_tok_s_p50);
  renderDownloads(s);""" in PAGE_HTML


def test_report_and_summary_labels_unchanged():
    """What the tables were before they came from the catalogue, value for value."""
    assert campaignfigs.LABELS == {
        "ttft_p50_ms": "time to first token p50 (ms)",
        "effective_prefill_tok_s_p50": "effective prefill p50 (tok/s)",
        "decode_tok_s_p50": "decode rate p50 (tok/s)", "e2e_p50_ms": "end to end p50 (ms)",
        "aggregate_output_tok_s": "aggregate output (tok/s)",
        "prompt_tokens_p50": "prompt tokens p50 (server-counted)"}
    assert draw.COLOURS == {
        "time_to_first_output_ms": "#1f77b4", "ttft_ms": "#ff7f0e", "e2e_ms": "#2ca02c",
        "time_to_first_chunk_ms": "#9467bd", "decode_tok_s": "#d62728",
        "mean_inter_token_latency_ms": "#8c564b", "effective_prefill_tok_s": "#17becf",
        "in_flight": "#1f77b4", "throughput": "#2ca02c", "failure": "#d62728",
        "slo": "#d62728", "capacity": "#2ca02c"}
    assert [t for _, t in markdown.COLUMNS] == [
        "TTFT p50 ms", "prefill tok/s p50", "decode tok/s p50", "e2e p50 ms", "output tok/s",
        "prompt tokens", "runs"]
    assert decide.DISPLAY_DECIMALS == {
        "ttft_p50_ms": 1, "effective_prefill_tok_s_p50": 0, "decode_tok_s_p50": 1,
        "e2e_p50_ms": 1, "aggregate_output_tok_s": 1, "prompt_tokens_p50": 0,
        "decode_delta_percent": 1, "e2e_delta_percent": 1,
        "accepted_length_range": 2, "acceptance_rate_range": 2}
    assert list(catalog.KNOWN_GATES) == [
        "e2e_p50_improvement_percent", "ttft_p50_improvement_percent",
        "decode_p50_improvement_percent", "effective_prefill_p50_improvement_percent",
        "aggregate_output_improvement_percent", "no_saturated_runs", "functional"]


@pytest.mark.parametrize("field", [f for f in catalog.ROW if f.stamps], ids=lambda f: f.name)
def test_stamped_durations_are_their_stamps_difference(field):
    stamps = {"start_ns": 1_000, "first_output_ns": 3_501_000, "first_content_ns": 4_001_000,
              "end_ns": 9_001_000}
    record = completed(0, **stamps, extra={"first_chunk_ns": 2_001_000})
    row = derive_row(record)

    def stamp(key: str) -> int:
        return record.extra[key[6:]] if key.startswith("extra.") else getattr(record, key)

    start, stop = field.stamps
    assert row[field.name] == (stamp(stop) - stamp(start)) / 1e6
    assert field.source == f"({stop} − {start}) / 1e6"


NEW_FIGURE = textwrap.dedent("""
    import dataclasses
    from anvil_metrics import catalog as c
    c.SUMMARY_FIGURES += (c.SummaryFigure("ttft_p95_ms", "ms", 3, "TTFT p95 ms",
                                          "time to first token p95 (ms)", "ttft_p95_ms",
                                          delta="ttft_delta_percent"),)
    c.SUMMARY_BY_NAME = {f.name: f for f in c.SUMMARY_FIGURES}
    c.ROW = tuple(dataclasses.replace(f, series="chunk") if f.name == "time_to_first_chunk_ms"
                  else dataclasses.replace(f, colour="#123456") if f.name == "generation_ms"
                  else f for f in c.ROW)
    c.BY_NAME = {f.name: f for f in c.ROW}
    from anvil_metrics.live import series
    from anvil_metrics.live.webui_page import PAGE_HTML
    from anvil_metrics.report import campaignfigs, draw
    from anvil_metrics.schemas.verdicts import summary_schema
    from anvil_metrics.summary import decide, markdown, verify
    assert ("ttft_p95_ms", "ttft_p95_ms") in decide.ROW_METRICS
    assert ("ttft_delta_percent", "ttft_p95_ms") in decide.DELTAS
    assert decide.DISPLAY_DECIMALS["ttft_p95_ms"] == 3
    assert decide.DISPLAY_DECIMALS["ttft_delta_percent"] == c.DELTA_DECIMALS
    assert ("ttft_p95_ms", "TTFT p95 ms") in markdown.COLUMNS
    assert "ttft_p95_ms" in verify.ROW_FIGURES and "ttft_delta_percent" in verify.ROW_DELTAS
    assert campaignfigs.LABELS["ttft_p95_ms"] == "time to first token p95 (ms)"
    assert draw.COLOURS["generation_ms"] == "#123456"
    assert series.SERIES_FIELDS == ("ttft_ms", "decode_tok_s", "time_to_first_chunk_ms")
    assert 'id="chart-chunk"' in PAGE_HTML
    assert "series.time_to_first_chunk_ms_p50" in PAGE_HTML
    row = summary_schema()["properties"]["performance"]["items"]["properties"]
    assert "ttft_p95_ms" in row and "ttft_delta_percent" in row
    run = {"metrics": {"ttft_p95_ms": 12.5}}
    got = decide.performance_row(decide.VariantRuns("m", "off", [run]), None, seed=1)
    assert got["ttft_p95_ms"] == 12.5, got
    print("ok")
""")


def test_a_new_figure_appears_everywhere():
    """A summary figure, a colour and a live series added to the catalogue alone reach the
    summary rows, decimals, columns, verify's shape, the JSON Schema, the report and the page
    (in a fresh interpreter: the tables are made at import)."""
    done = subprocess.run([sys.executable, "-c", NEW_FIGURE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
