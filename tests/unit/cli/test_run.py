"""`anvil run`, `capacity`, `postprocess` and `prompts` in-process: bad input is one line
before anything runs; postprocess prints the run's summary and where it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
from rawbuild import HEADER, completed, write_raw

from anvil_metrics.cli.main import main
from anvil_metrics.post.benchmark import load_benchmark
from anvil_metrics.runs.launch import summary_lines

HOST = "http://127.0.0.1:9"  # nothing listens there; nothing here reaches it


def test_a_missing_scenario_is_one_line_before_any_run_folder(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "none.toml"
    assert main(["run", str(missing), "-H", HOST, "--results-dir", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (f"anvil: scenario file {str(missing)!r} does not "
                                       "exist; pass a .toml path\n")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("flags,line", [
    (["--start", "1.5"], "anvil: --start 1.5 / --max 256: by users, whole numbers\n"),
    (["--start", "8", "--max", "4"],
     "anvil: --start 8 is above --max 4; start at or below it\n"),
    (["--by", "rate", "--start", "2000"],
     "anvil: --start 2000 is above --max 1000; start at or below it\n"),
])
def test_capacity_checks_its_range_before_any_step(capsys, flags: list[str], line: str
                                                    ) -> None:
    argv = ["capacity", "scenarios/smoke.toml", "-H", HOST, "--slo", "ttft_p95_ms<=2000"]
    assert main(argv + flags) == 2
    captured = capsys.readouterr()
    assert captured.err == line and captured.out == ""


@pytest.mark.parametrize("tokens", ["0", "4096,x", ","])
def test_prompts_sizes_must_be_token_counts(capsys, tokens: str) -> None:
    with pytest.raises(SystemExit) as ei:
        main(["prompts", "-H", HOST, "--tokens", tokens])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"anvil: argument --tokens: --tokens {tokens!r} is not allowed; "
                          "expected token counts >= 1") and err.count("\n") == 1


def test_postprocess_prints_the_summary_and_the_result(tmp_path: Path, capsys) -> None:
    write_raw(tmp_path / "requests.jsonl", HEADER, [completed(i) for i in range(3)],
              {"finished_at": "2026-08-01T16:09:00Z", "client": {}})
    assert main(["postprocess", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    path = tmp_path / "benchmark.json"
    assert out == [*summary_lines(load_benchmark(path)), f"result: {path}"]


def test_postprocess_of_a_path_that_is_no_run_folder_is_one_line_exit_2(tmp_path: Path,
                                                                       capsys) -> None:
    """As `report` and `verify` say a missing input: exit 2, one line (a damaged file inside a
    run folder is a problem found, exit 1: tests/unit/post/test_rawcolumns.py)."""
    for path, what in ((tmp_path / "nope", "is not a folder"),
                       (tmp_path, "has no requests.jsonl")):
        assert main(["postprocess", str(path)]) == 2
        assert capsys.readouterr().err == (
            f"anvil: postprocess: {str(path)!r} {what}; pass a run folder made by anvil (it "
            f"holds requests.jsonl)\n")
