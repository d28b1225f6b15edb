"""Per GPU and per dollar (post/pergpu.py): a stored stepped run given gpus and a price,
its figures against their definitions by hand, the steps' own, and verify's recomputation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from anvil_metrics.post.postprocess import RAW_FILE, postprocess_run
from anvil_metrics.post.verify import verify_benchmark

STEPS = Path(__file__).resolve().parents[2] / "fixtures" / "postprocess" / "steps"


def _run(tmp_path: Path, **params: object) -> dict:
    """The stored stepped run, its header's params changed, post-processed."""
    shutil.copy(STEPS / RAW_FILE, tmp_path / RAW_FILE)
    lines = (tmp_path / RAW_FILE).read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["params"].update(params)
    lines[0] = json.dumps(header) + "\n"
    (tmp_path / RAW_FILE).write_text("".join(lines))
    return json.loads(postprocess_run(tmp_path).path.read_text())


def test_per_gpu_and_per_dollar_follow_their_definitions(tmp_path: Path) -> None:
    doc = _run(tmp_path, gpus=4, gpu_hour_price_usd=2.5)
    m, wall = doc["metrics"], doc["wall_clock_ms"]
    assert m["output_tok_s_per_gpu"] == m["throughput_tok_s"] / 4
    assert m["requests_s_per_gpu"] == doc["completed"] / (wall / 1000) / 4
    cost = 2.5 * 4 * (wall / 3_600_000)
    assert m["usd_per_m_output_tokens"] == cost / m["output_tokens"] * 1e6
    assert m["usd_per_m_input_tokens"] == cost / m["prompt_tokens"] * 1e6
    assert doc["per_gpu"] == {"gpus": 4, "gpu_hour_price_usd": 2.5, "window_s": wall / 1000,
                              "gpu_hours": 4 * (wall / 3_600_000), "cost_usd": cost}
    assert len(doc["steps"]) >= 2
    for s in doc["steps"]:  # each step over its own window
        sm = s["metrics"]
        assert sm["output_tok_s_per_gpu"] == sm["throughput_tok_s"] / 4
        window_ms = (s["ended_s"] - s["started_s"]) * 1000
        assert sm["requests_s_per_gpu"] == s["completed"] / (window_ms / 1000) / 4
    assert verify_benchmark(doc) == []


def test_tok_s_per_user_comes_from_the_rows(tmp_path: Path) -> None:
    doc = _run(tmp_path)
    rows = [r for r in doc["request_timings"] if r["decode_tok_s"] is not None]
    m = doc["metrics"]
    assert abs(m["decode_tok_s_mean"] - sum(r["decode_tok_s"] for r in rows) / len(rows)) < 1e-9
    weighted = (sum(r["output_tokens"] - 1 for r in rows)
                / sum(r["generation_ms"] / 1000 for r in rows))
    assert abs(m["decode_tok_s_weighted"] - weighted) < 1e-9 * weighted


def test_without_gpus_there_is_no_block_and_without_a_price_no_cost(tmp_path: Path) -> None:
    doc = _run(tmp_path)
    assert "per_gpu" not in doc and "output_tok_s_per_gpu" not in doc["metrics"]
    doc = _run(tmp_path, gpus=2)
    assert doc["per_gpu"]["gpu_hour_price_usd"] is None and doc["per_gpu"]["cost_usd"] is None
    assert doc["metrics"]["usd_per_m_output_tokens"] is None
    assert doc["metrics"]["output_tok_s_per_gpu"] is not None
    assert verify_benchmark(doc) == []


def test_verify_names_a_changed_figure(tmp_path: Path) -> None:
    doc = _run(tmp_path, gpus=2, gpu_hour_price_usd=1.0)
    doc["metrics"]["usd_per_m_output_tokens"] *= 2
    doc["steps"][1]["metrics"]["output_tok_s_per_gpu"] += 1
    doc["per_gpu"]["gpus"] = 3
    problems = "\n".join(verify_benchmark(doc))
    assert "per_gpu.gpu_hours" in problems
    assert "metrics.usd_per_m_output_tokens" in problems
    assert "steps[1].metrics.output_tok_s_per_gpu" in problems
    del doc["per_gpu"]
    assert any("set, but the file has no per_gpu block" in p for p in verify_benchmark(doc))


def test_verify_of_a_block_of_the_wrong_type_says_so_once(tmp_path: Path) -> None:
    doc = _run(tmp_path, gpus=2)
    doc["per_gpu"]["gpus"] = "two"
    problems = verify_benchmark(doc)
    assert problems and any("per_gpu.gpus" in p for p in problems)


def test_a_file_written_before_the_per_user_keys_still_verifies(tmp_path: Path) -> None:
    """decode_tok_s_mean and decode_tok_s_weighted are added keys: a stepped file from
    before them (its metrics and its steps' metrics lack both) verifies."""
    doc = _run(tmp_path)
    for m in (doc["metrics"], *(s["metrics"] for s in doc["steps"])):
        del m["decode_tok_s_mean"], m["decode_tok_s_weighted"]
    assert verify_benchmark(doc) == []
    doc["steps"][0]["metrics"]["decode_tok_s_mean"] = 1.0  # present: recomputed
    assert any(p.startswith("steps[0].metrics") for p in verify_benchmark(doc))
