"""`anvil export --llm-d`: llm-d's Benchmark Report v0.2.1, each field by its definition from
known stamps (ms → s exactly, anvil's nearest rank), real runs (a plain run, a sweep) valid
under llm-d's own JSON Schema, the README's table the code's, and mistakes one line."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import orjson
import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.cli.main import main
from anvil_metrics.compare.runs import read_run
from anvil_metrics.export.llmd import MAPPING, llmd_reports, markdown_table
from anvil_metrics.jsonio import atomic_write_json
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawread import read_raw

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
MS = 1_000_000


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((FIXTURES / "llmd" / "br_v0_2_1_json_schema.json").read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _at(report: dict, dotted: str) -> object:
    for key in dotted.split("."):
        report = report[key]
    return report


def test_known_stamps_map_by_definition(tmp_path: Path) -> None:
    """Request i: first token (250 + 10·i) ms after its start, then 50 ms to its end with 6
    output tokens (TPOT 10 ms); one more request fails."""
    records = []
    for i in range(4):
        start = HEADER["perf_anchor_ns"] + 400 * MS * i
        first = start + (250 + 10 * i) * MS
        records.append(completed(i, start_ns=start, first_output_ns=first,
                                 first_content_ns=first + MS, end_ns=first + 50 * MS))
    records.append(failed(4, start_ns=HEADER["perf_anchor_ns"] + 1700 * MS))
    write_raw(tmp_path / "requests.jsonl", HEADER, records)
    atomic_write_json(tmp_path / "benchmark.json",
                      build_benchmark(read_raw(tmp_path / "requests.jsonl")))
    run = read_run(tmp_path)
    [r] = llmd_reports(run.doc, run.rows)
    _validator().validate(r)
    lat = r["results"]["request_performance"]["aggregate"]["latency"]
    ttft = lat["time_to_first_token"]
    assert ttft["units"] == "s"
    assert (ttft["min"], ttft["p25"], ttft["p50"], ttft["p75"], ttft["p99p9"]) == (
        0.25, 0.25, 0.26, 0.27, 0.28)  # nearest rank of 4: ⌈q·4⌉
    assert ttft["mean"] == pytest.approx(0.265) and ttft["stddev"] == pytest.approx(
        np.std([0.25, 0.26, 0.27, 0.28]))
    assert lat["time_per_output_token"]["units"] == "s/token"
    assert lat["time_per_output_token"]["p50"] == pytest.approx(0.010)
    assert lat["request_latency"]["max"] == pytest.approx(0.330)
    assert lat["normalized_time_per_output_token"]["min"] == pytest.approx(0.300 / 6)
    req = r["results"]["request_performance"]["aggregate"]["requests"]
    assert (req["total"], req["failures"]) == (5, 1)
    assert req["output_length"]["mean"] == 6 and req["input_length"]["p50"] == 130
    assert "request_size" not in req and "multimodal" not in req  # no row has them
    wall_s = run.doc["wall_clock_ms"] / 1000
    thr = r["results"]["request_performance"]["aggregate"]["throughput"]
    assert thr["request_rate"] == {"units": "queries/s", "mean": pytest.approx(4 / wall_s)}
    assert thr["output_token_rate"]["mean"] == pytest.approx(24 / wall_s)
    assert thr["total_token_rate"]["mean"] == pytest.approx((24 + 4 * 130) / wall_s)
    assert r["run"]["uid"] == run.doc["run_id"] and "eid" not in r["run"]
    assert r["version"] == "0.2.1"


def test_a_real_run_is_valid_and_agrees_with_its_document() -> None:
    run = read_run(FIXTURES / "postprocess" / "plain")
    [r] = llmd_reports(run.doc, run.rows)
    _validator().validate(r)
    m = run.doc["metrics"]
    lat = r["results"]["request_performance"]["aggregate"]["latency"]
    for key, figure in (("time_to_first_token", "time_to_first_output"),
                        ("request_latency", "e2e")):
        for p in (50, 95):
            assert lat[key][f"p{p}"] == m[f"{figure}_p{p}_ms"] / 1000
    assert lat["time_per_output_token"]["p95"] == m["mean_inter_token_latency_ms_p95"] / 1000
    thr = r["results"]["request_performance"]["aggregate"]["throughput"]
    assert thr["output_token_rate"]["mean"] == m["throughput_tok_s"]
    # every field this run has a figure for is there (it has no step and no media)
    media = ("run.eid", "request_size", "multimodal", "image_rate", "audio_rate")
    for x in MAPPING:
        if not x.left_out and not x.path.endswith(media) and ".multimodal." not in x.path:
            assert _at(r, x.path) is not None, x.path


def test_a_sweep_is_one_valid_report_per_step(tmp_path: Path, capsys) -> None:
    src = FIXTURES / "postprocess" / "steps"
    assert main(["export", str(src), "--llm-d", str(tmp_path / "br.json")]) == 0
    doc = read_run(src).doc
    paths = [tmp_path / f"br_{i}.json" for i in range(len(doc["steps"]))]
    assert capsys.readouterr().out.strip() == (
        f"llm-d benchmark report v0.2.1: {', '.join(map(str, paths))}")
    for path, step in zip(paths, doc["steps"], strict=True):
        r = orjson.loads(path.read_bytes())
        _validator().validate(r)
        assert r["run"]["uid"] == f"{doc['run_id']}-step{step['step']}"
        assert r["run"]["eid"] == doc["run_id"] and "start" not in r["run"]["time"]
        agg = r["results"]["request_performance"]["aggregate"]
        assert agg["requests"]["total"] == step["requests"]
        assert agg["latency"]["time_to_first_token"]["p50"] == (
            step["metrics"]["time_to_first_output_p50_ms"] / 1000)


def test_the_readme_table_is_the_codes() -> None:
    readme = (ROOT / "README.md").read_text()
    assert markdown_table() in readme
    assert all(m.how for m in MAPPING)


def test_mistakes_are_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty"), "--llm-d", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no benchmark.json there" in err[0]
    other = tmp_path / "compare.json"
    other.write_text('{"schema": "anvil-serving.compare/v1", "runs": []}')
    assert main(["export", str(other), "--llm-d", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a" in err[0] and str(other) in err[0]
    assert not (tmp_path / "o").exists()


def test_media_and_request_bytes_fill_the_v021_fields(tmp_path: Path) -> None:
    """Two requests carrying 2 and 4 images, 1 audio clip each, 1000 and 3000 body bytes."""
    records = [completed(i, extra={"images": 2 + 2 * i, "audio_clips": 1,
                                   "request_bytes": 1000 + 2000 * i}) for i in range(2)]
    write_raw(tmp_path / "requests.jsonl", HEADER, records)
    atomic_write_json(tmp_path / "benchmark.json",
                      build_benchmark(read_raw(tmp_path / "requests.jsonl")))
    run = read_run(tmp_path)
    [r] = llmd_reports(run.doc, run.rows)
    _validator().validate(r)
    req = r["results"]["request_performance"]["aggregate"]["requests"]
    assert req["request_size"]["units"] == "bytes"
    assert (req["request_size"]["min"], req["request_size"]["max"]) == (1000, 3000)
    assert req["multimodal"]["image"]["count"]["mean"] == 3
    assert req["multimodal"]["audio"]["count"]["p50"] == 1
    thr = r["results"]["request_performance"]["aggregate"]["throughput"]
    wall_s = run.doc["wall_clock_ms"] / 1000
    assert thr["image_rate"] == {"units": "images/s", "mean": pytest.approx(6 / wall_s)}
    assert thr["audio_rate"]["mean"] == pytest.approx(2 / wall_s)
