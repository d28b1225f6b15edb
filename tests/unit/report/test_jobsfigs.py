"""`anvil report`'s agent-jobs section, from `jobs` blocks built by hand from their typed
definition (`post/jobsblock.Jobs`, msgspec-valid): every figure of the block is on the
page as the report's `cell` writes it, the time split is one bar, an `invalid` run says
so in plain words at the top and in the section, a damaged block is one line, and a run
without the block has no such section (the run's page through `make_report`, the block
added where the run is rebuilt, as the post-processor will build it)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from rawbuild import HEADER, completed, write_raw

from anvil_metrics.errors import UsageError
from anvil_metrics.post.jobsblock import Jobs
from anvil_metrics.post.postprocess import postprocess_run
from anvil_metrics.report import jobsfigs, runfigs
from anvil_metrics.report.build import make_report
from anvil_metrics.report.page import cell


def _run(folder: Path) -> Path:
    """Four completed requests, post-processed (a folder `anvil verify` accepts)."""
    folder.mkdir(parents=True)
    start = HEADER["perf_anchor_ns"] + 50_000_000
    write_raw(folder / "requests.jsonl", HEADER, [
        completed(i, start_ns=start + i * 20_000_000, first_output_ns=start + i * 20_000_000
                  + 5_000_000, first_content_ns=start + i * 20_000_000 + 5_000_000,
                  end_ns=start + i * 20_000_000 + 9_000_000) for i in range(4)])
    postprocess_run(folder)
    return folder


def _block(**kw: object) -> dict:
    """A msgspec-valid block: these values, by name, for every field `Jobs` has (its
    definition may grow a field while the block's build is written beside it: `plan`)."""
    values = dict(
        start_at="sampled", started=200, completed=196, cut=4, latency_p50_ms=81234.5,
        latency_p95_ms=190500.25, latency_p99_ms=240001.0, jobs_per_hour=352.8, gpus=8,
        jobs_per_hour_per_gpu=44.1, model_share=0.625, tool_share=0.25, join_share=0.1,
        other_share=0.025, requests_per_job=41.5, prompt_tokens_per_job=1_250_000.0,
        output_tokens_per_job=9800.0, expected_reuse=0.912, reported_reuse=0.897,
        expected_reuse_p50=0.93, reported_reuse_p50=0.905, requests=8300,
        context_overflows=12, overflow_share=12 / 8300, validity="valid",
        plan=[[0, 41, 1_250_000, 1_140_000]] * 200)
    values.update(kw)
    jobs = msgspec.convert({k: v for k, v in values.items() if k in Jobs.__struct_fields__},
                           Jobs)
    return msgspec.to_builtins(jobs)


def test_every_figure_of_the_block_is_in_its_tables() -> None:
    block = _block()
    section = jobsfigs.jobs_section(block)
    assert section is not None and section.title == "Agent jobs"
    cells = [c for t in section.tables for row in t.rows for c in row]
    for key in ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "jobs_per_hour",
                "jobs_per_hour_per_gpu", "requests_per_job", "prompt_tokens_per_job",
                "output_tokens_per_job"):
        assert cell(block[key]) in cells, key
    for key in ("started", "completed", "cut", "gpus", "requests", "context_overflows"):
        assert str(block[key]) in cells, key
    assert ["62.5 %", "25.0 %", "10.0 %", "2.5 %"] == list(section.tables[1].rows[0])
    assert ["91.2 %", "89.7 %", "93.0 %", "90.5 %"] == list(section.tables[2].rows[0][3:])
    assert section.tables[3].classes == ("pass",) and section.tables[3].rows[0][-1] == "valid"
    assert section.text.startswith("valid: 12 of 8300 requests overflowed the context")
    (bar,) = section.figures
    assert bar.name == "job-time-split.png" and bar.png.startswith(b"\x89PNG")


def test_an_invalid_run_says_so_and_missing_shares_draw_no_bar() -> None:
    section = jobsfigs.jobs_section(_block(
        context_overflows=100, overflow_share=100 / 8300, validity="invalid",
        model_share=None, tool_share=None, join_share=None, other_share=None))
    assert section is not None
    assert section.text.startswith("INVALID: 100 of 8300 requests (1.2 %) overflowed the "
                                   "server's context, over the 1% allowed")
    assert section.tables[3].classes == ("fail",) and section.figures == ()
    assert section.tables[1].rows[0] == ("null",) * 4  # missing is null, never 0 %


def test_no_block_no_section_and_a_damaged_block_is_one_line() -> None:
    assert jobsfigs.jobs_section(None) is None
    with pytest.raises(UsageError, match="its jobs block is not allowed as written"):
        jobsfigs.jobs_section({**_block(), "cut": -1})


def test_a_runs_page_shows_the_block_where_the_run_has_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _run(tmp_path / "benchmark-20260801T160039Z")
    plain = make_report(folder, tmp_path / "plain").html_path.read_text()
    assert "Agent jobs" not in plain and "agent jobs" not in plain
    build = runfigs.build_run

    def with_jobs(f: Path):  # the run rebuilt as the post-processor builds an agent run's
        raw, built = build(f)
        built.doc["jobs"] = _block(validity="invalid", context_overflows=100,
                                   overflow_share=100 / 8300)
        return raw, built

    monkeypatch.setattr(runfigs, "build_run", with_jobs)
    r = make_report(folder, tmp_path / "agent")
    html = r.html_path.read_text()
    assert "<h2>Agent jobs</h2>" in html
    assert '<p class="sub">agent jobs: INVALID: 100 of 8300 requests' in html
    assert '<td class="fail">invalid</td>' in html and "81,234.50" in html
    assert "job-time-split.png" in [p.name for p in r.png_paths]
