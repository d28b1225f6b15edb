"""Every per-field table of the package is the catalogue's: the report's colours and labels,
the live charts' fields and the web page's keys — and a field's colour or chart added to the
catalogue shows up in each without another edit. (The public summary's figures and gates:
test_summaryfigures.py.)"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from rawbuild import completed

from anvil_metrics import catalog
from anvil_metrics.live import series
from anvil_metrics.live.webui_page import PAGE_HTML
from anvil_metrics.post.derive import derive_row
from anvil_metrics.report import draw


def test_every_row_field_with_a_direction_is_a_time_or_a_rate():
    for f in catalog.ROW:
        assert f.better in ("higher", "lower", None), f.name
        if f.better is not None:
            assert f.better == ("higher" if f.unit.endswith("/s") else "lower"), f.name


def test_report_colours_and_labels_are_the_catalogues():
    coloured = {f.name: f.colour for f in catalog.ROW if f.colour}
    assert {k: v for k, v in draw.COLOURS.items() if k in catalog.BY_NAME} == coloured
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


def test_report_colours_unchanged():
    """What the colours were before they came from the catalogue, value for value."""
    assert draw.COLOURS == {
        "time_to_first_output_ms": "#1f77b4", "ttft_ms": "#ff7f0e", "e2e_ms": "#2ca02c",
        "time_to_first_chunk_ms": "#9467bd", "decode_tok_s": "#d62728",
        "mean_inter_token_latency_ms": "#8c564b", "effective_prefill_tok_s": "#17becf",
        "in_flight": "#1f77b4", "throughput": "#2ca02c", "failure": "#d62728",
        "slo": "#d62728", "capacity": "#2ca02c"}


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


NEW_FIELD_LOOKS = textwrap.dedent("""
    import dataclasses
    from anvil_metrics import catalog as c
    c.ROW = tuple(dataclasses.replace(f, series="chunk") if f.name == "time_to_first_chunk_ms"
                  else dataclasses.replace(f, colour="#123456") if f.name == "generation_ms"
                  else f for f in c.ROW)
    c.BY_NAME = {f.name: f for f in c.ROW}
    from anvil_metrics.live import series
    from anvil_metrics.live.webui_page import PAGE_HTML
    from anvil_metrics.report import draw
    assert draw.COLOURS["generation_ms"] == "#123456"
    assert series.SERIES_FIELDS == ("ttft_ms", "decode_tok_s", "time_to_first_chunk_ms")
    assert 'id="chart-chunk"' in PAGE_HTML
    assert "series.time_to_first_chunk_ms_p50" in PAGE_HTML
    print("ok")
""")


def test_a_new_colour_and_chart_appear_everywhere():
    """A colour and a live series added to the catalogue alone reach the report and the page
    (in a fresh interpreter: the tables are made at import)."""
    done = subprocess.run([sys.executable, "-c", NEW_FIELD_LOOKS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
