"""energyblock: the `energy` block of a run with `energy.jsonl` beside it (its figures
against the closed-form truth of the file), null with a reason at partial coverage, the
idle baseline, verify recomputing it from the file (and saying when the file is gone), and
the CLI's lines."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from energybuild import S, failed, series, write_energy
from rawbuild import HEADER, completed, write_raw

from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.docscan import verify_file
from anvil_metrics.post.energyblock import Energy, summary_lines
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.telemetry.energyfile import EnergySample

WATTS, IDLE_W = 350.0, 60.0
TOKENS = [6, 9, 12]  # three completed requests' output tokens


def _watts(t: float) -> float:
    return IDLE_W if t < 5 else WATTS  # idle for 5 s, then the load


def _joules(t: float) -> float:
    return 1e6 + IDLE_W * min(t, 5) + WATTS * max(t - 5, 0)


def _samples(n: int = 2, idle: bool = True) -> list[EnergySample]:
    marks = {6 * S: "first", 16 * S: "last"}
    if idle:
        marks.update({0: "idle_start", 4 * S: "idle_end"})
    return series(n, range(0, 16 * S + 1, S // 2), marks, _watts, _joules)


def _doc(tmp_path: Path, samples: list[EnergySample] | None = None,
         params: dict[str, Any] | None = None) -> dict[str, Any]:
    if samples is not None:
        write_energy(tmp_path, samples)
    recs = [completed(i, usage={"prompt_tokens": 100, "completion_tokens": n})
            for i, n in enumerate(TOKENS)]
    path = tmp_path / "requests.jsonl"
    write_raw(path, {**HEADER, "params": {"concurrency": 1, **(params or {})}}, recs,
              {"finished_at": "2026-08-01T16:00:45Z"})
    return build_benchmark(read_raw(path))


def _written(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "benchmark.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return path


def test_the_block_is_the_files_joules_over_the_window_per_token(tmp_path: Path) -> None:
    doc = _doc(tmp_path, _samples())
    e = doc["energy"]
    assert tuple(e) == Energy.__struct_fields__
    joules = 2 * WATTS * 10  # two GPUs at 350 W over the 10 s window
    assert e["window_s"] == 10.0 and e["coverage"] == 1.0 and e["gpu_count"] == 2
    assert e["energy_j"] == pytest.approx(joules, rel=1e-12)
    assert e["mean_power_w"] == pytest.approx(2 * WATTS) and e["peak_power_w"] == 2 * WATTS
    assert (e["output_tokens"], e["requests"]) == (sum(TOKENS), len(TOKENS))
    assert e["j_per_output_token"] == pytest.approx(joules / sum(TOKENS))
    assert e["j_per_request"] == pytest.approx(joules / len(TOKENS))
    assert e["output_tokens_per_j"] == pytest.approx(sum(TOKENS) / joules)
    assert e["idle"]["power_w"] == pytest.approx(2 * IDLE_W)
    assert e["above_idle_j"] == pytest.approx(joules - 2 * IDLE_W * 10)
    assert e["above_idle_j_per_output_token"] == pytest.approx(
        (joules - 2 * IDLE_W * 10) / sum(TOKENS))
    assert e["null_reasons"] == {}
    assert [g["method"] for g in e["gpus"]] == ["counter", "counter"]
    assert verify_benchmark(doc) == []
    assert summary_lines(doc) == [
        f"energy: 2 GPUs (dcgm), 7,000 J over 10.0 s (coverage 100.0%); mean 700 W, peak "
        f"700 W; {joules / sum(TOKENS):.4g} J/output token, {sum(TOKENS) / joules:.3g} tok/J; "
        f"idle 120 W, above idle {(joules - 1200) / sum(TOKENS):.4g} J/token"]


def test_partial_coverage_is_stated_and_per_token_figures_null(tmp_path: Path) -> None:
    samples = _samples(idle=False)
    for s in samples:
        if s.t_ns > 11 * S:
            s.gpus = s.gpus[:1]  # GPU 1 gone halfway through the window
    samples.insert(20, failed(99, 10 * S + 1))
    e = _doc(tmp_path, samples)["energy"]
    assert e["coverage"] == 0.75 and [g["coverage"] for g in e["gpus"]] == [1.0, 0.5]
    assert e["energy_j"] == pytest.approx(WATTS * 15)  # the covered part's
    for key in ("j_per_output_token", "mean_power_w", "output_tokens_per_j"):
        assert e[key] is None and "cover 75.0% of the window" in e["null_reasons"][key]
    assert e["failed_samples"] == 1 and "1 of " in e["null_reasons"]["readings"]
    assert e["idle"] is None and e["null_reasons"]["idle"].startswith("no idle baseline")
    lines = summary_lines({"energy": e})
    assert lines[0].startswith("energy: 2 GPUs (dcgm), 5,250 J over 10.0 s (coverage 75.0%); "
                               "mean null W, peak 700 W; null J/output token, null tok/J")
    assert lines[1] == f"energy: {e['null_reasons']['coverage']}"
    assert "127.0.0.1:9400/1 50.0%" in lines[1]


def test_a_counter_reset_is_said_and_nulls_the_per_token_figures(tmp_path: Path) -> None:
    def reset(t: float) -> float:
        return _joules(t) if t < 10.2 else _joules(t) - _joules(10.2)

    e = _doc(tmp_path, series(1, range(0, 16 * S + 1, S // 2), {6 * S: "first",
                                                                 16 * S: "last"},
                              _watts, reset))["energy"]
    assert e["gpus"][0]["counter_resets"] == 1 and e["coverage"] == 0.95
    assert e["energy_j"] == pytest.approx(WATTS * 9.5)
    assert e["j_per_output_token"] is None
    assert "1 counter reset(s) not counted" in e["null_reasons"]["j_per_output_token"]


def test_without_the_window_marks_every_figure_is_null(tmp_path: Path) -> None:
    samples = [s for s in _samples() if s.mark != "last"]
    doc = _doc(tmp_path, samples)
    e = doc["energy"]
    assert e["energy_j"] is None and e["window_s"] is None
    assert "no reading marked first and last" in e["null_reasons"]["j_per_output_token"]
    assert summary_lines(doc)[0].startswith("energy: 2 GPUs (dcgm): no reading marked first")
    assert verify_benchmark(doc) == []


def test_absent_without_a_source_and_null_when_the_file_is_missing(tmp_path: Path) -> None:
    assert "energy" not in _doc(tmp_path)
    e = _doc(tmp_path, params={"energy": {"source": "dcgm"}})["energy"]
    assert e["energy_j"] is None and "no energy.jsonl" in e["null_reasons"]["energy"]


def test_verify_recomputes_the_block_from_the_file(tmp_path: Path) -> None:
    doc = _doc(tmp_path, _samples())
    path = _written(tmp_path, doc)
    assert verify_file(path) == []
    bad = copy.deepcopy(doc)
    bad["energy"]["gpus"][0]["energy_j"] += 1.0
    assert any(p.startswith("energy.gpus: file has") and "from energy.jsonl and the rows"
               in p for p in verify_file(_written(tmp_path, bad)))
    bad = copy.deepcopy(doc)
    bad["energy"]["j_per_output_token"] *= 1.01
    assert any(p.startswith("energy.j_per_output_token: file has")
               for p in verify_benchmark(bad))
    # the file gone: not a failure, but said
    (tmp_path / "energy.jsonl").unlink()
    notes: list[str] = []
    assert verify_file(_written(tmp_path, doc), notes=notes) == []
    assert notes == ["energy: no energy.jsonl beside the file: its joules were not "
                     "recomputed (its per-token figures were, from the rows)"]


def test_power_integration_is_said_to_be_an_estimate(tmp_path: Path) -> None:
    samples = _samples(idle=False)
    for s in samples:
        for g in s.gpus:
            g.energy_j = None  # a power gauge only (an exporter without the counter)
    e = _doc(tmp_path, samples)["energy"]
    assert [g["method"] for g in e["gpus"]] == ["power", "power"]
    lines = summary_lines({"energy": e})
    assert lines[1].startswith(f"energy: power integrated over {e['samples']} readings 0.5 s "
                               "apart, not an energy counter: an estimate")
    counted = summary_lines(_doc(tmp_path, _samples(idle=False)))
    assert not any("power integrated" in line for line in counted)
