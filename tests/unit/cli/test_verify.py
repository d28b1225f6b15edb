"""`anvil verify` and `anvil report` in-process: verify tells a file's kind by its schema,
says what it checked it against, and prints each mismatch on its own line (exit 1)."""

from __future__ import annotations

from pathlib import Path

import orjson
from energybuild import S, series, write_energy
from rawbuild import HEADER, completed, write_raw
from summarybuild import example_checks

from anvil_metrics.cli.main import main

CASE = {"id": "a", "passed": True, "expected": "x", "answer": "x", "error": None,
        "elapsed_s": 0.1}


def benchmark(folder: Path) -> Path:
    write_raw(folder / "requests.jsonl", HEADER, [completed(i) for i in range(3)],
              {"finished_at": "2026-08-01T16:09:00Z", "client": {}})
    assert main(["postprocess", str(folder)]) == 0
    return folder / "benchmark.json"


def test_a_missing_file_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["verify", str(tmp_path / "b.json")]) == 2
    assert capsys.readouterr().err == (f"anvil: verify: {str(tmp_path / 'b.json')!r} does "
                                       "not exist; pass a benchmark.json or summary.json path\n")


def test_a_file_that_is_not_json_or_a_folder_is_one_line_exit_2(tmp_path: Path,
                                                                capsys) -> None:
    path = tmp_path / "b.json"
    path.write_text('{"schema": "anvil-serving.benchmark/v1",\n  "metrics": {,}}')
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"anvil: verify: {path} is not strict JSON (") and "line 2" in err
    assert err.endswith("; expected a benchmark.json or summary.json\n")
    assert err.count("\n") == 1
    assert main(["verify", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"anvil: verify: {tmp_path} is a folder, not a file; "
                                       "expected a benchmark.json or summary.json\n")


def test_a_benchmark_recomputes_and_an_edited_one_does_not(tmp_path: Path, capsys) -> None:
    path = benchmark(tmp_path)
    capsys.readouterr()
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("schema: checked against ")
    assert out[-1] == f"{path}: every per-request value and aggregate recomputes exactly"
    doc = orjson.loads(path.read_bytes())
    doc["metrics"]["e2e_p50_ms"] += 1.0
    path.write_bytes(orjson.dumps(doc))
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    mismatches = [line for line in out if line.startswith("MISMATCH ")]
    assert mismatches and any("e2e_p50_ms" in line for line in mismatches)
    assert out[-1] == f"{path}: {len(mismatches)} mismatch(es)"


def test_a_checks_document_is_checked_against_its_cases(tmp_path: Path, capsys) -> None:
    path = tmp_path / "checks.json"
    doc = {"schema": "anvil-serving.checks/v1", "model": "m", "host": "http://127.0.0.1:1",
           "started_at": "2026-08-01T16:00:39Z", "checks": {"json": {
               "result": "pass", "passed": 1, "total": 1, "elapsed_s": 1.0, "cases": [CASE]}}}
    path.write_bytes(orjson.dumps(doc))
    assert main(["verify", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"{path}: every suite's result, passed and total follow from its cases")
    path.write_bytes(orjson.dumps({**example_checks("official-fp8/off"),
                                   "host": "http://127.0.0.1:1",
                                   "started_at": "2026-08-01T16:00:39Z"}))
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "MISMATCH checks.coding.passed: 6; its cases give 0" in out


def test_report_of_a_folder_of_no_known_kind_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("anvil: ") and err.count("\n") == 1


def test_someone_elses_json_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    """Not anvil's: one line naming what it is, not a mismatch for every field it lacks."""
    for text, found in (('{"hello": 1}', "no schema field"),
                        ('{"schema": "other/v2"}', "schema 'other/v2'"),
                        ("[1, 2]", "a JSON list, not an object")):
        path = tmp_path / "f.json"
        path.write_text(text)
        assert main(["verify", str(path)]) == 2
        captured = capsys.readouterr()
        assert captured.err == (f"anvil: verify: {path} is not an anvil-serving document "
                                f"({found}); expected a benchmark.json or summary.json\n")
        assert captured.out == ""


def test_an_energy_block_whose_file_is_gone_verifies_and_says_so(tmp_path: Path,
                                                                 capsys) -> None:
    write_energy(tmp_path, series(1, range(0, 2 * S + 1, S // 2), {0: "first", 2 * S: "last"},
                                  lambda t: 100.0, lambda t: 100.0 * t))
    path = benchmark(tmp_path)
    assert orjson.loads(path.read_bytes())["energy"]["energy_j"] == 200.0
    capsys.readouterr()
    assert main(["verify", str(path)]) == 0
    said = capsys.readouterr().out.splitlines()  # recomputed from the file: nothing to add
    assert len(said) == 2 and said[-1].endswith(": every per-request value and aggregate "
                                                "recomputes exactly")
    (tmp_path / "energy.jsonl").unlink()
    assert main(["verify", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"{path}: energy: no energy.jsonl beside the file: its joules were not recomputed "
        "(its per-token figures were, from the rows)")
