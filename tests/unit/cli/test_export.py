"""`anvil export` from the command line: both files written and named, and nothing asked
for, or no run there, is one line with exit 2."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from rawbuild import HEADER, completed, write_raw

from anvil_metrics.cli.main import main
from anvil_metrics.jsonio import atomic_write_json
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawread import read_raw


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    write_raw(folder / "requests.jsonl", HEADER, [completed(i) for i in range(4)])
    atomic_write_json(folder / "benchmark.json",
                      build_benchmark(read_raw(folder / "requests.jsonl")))
    return folder


def test_both_files_are_written_and_named(run: Path, tmp_path: Path, capsys) -> None:
    pytest.importorskip("pyarrow")
    assert main(["export", str(run), "--parquet", str(tmp_path / "r.parquet"),
                 "--vllm-json", str(tmp_path / "v.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"parquet: {tmp_path / 'r.parquet'} (4 rows)"
    assert out[1].startswith(f"vllm bench serve result: {tmp_path / 'v.json'} (4 completed")
    assert orjson.loads((tmp_path / "v.json").read_bytes())["completed"] == 4
    assert (tmp_path / "r.parquet").read_bytes()[:4] == b"PAR1"


def test_mistakes_are_one_line_and_exit_2(run: Path, tmp_path: Path, capsys) -> None:
    assert main(["export", str(run)]) == 2
    assert capsys.readouterr().err.strip() == (
        "anvil: export: nothing to write; give --parquet FILE, --vllm-json FILE and/or "
        "--llm-d FILE")
    assert main(["export", str(tmp_path / "none"), "--vllm-json", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no benchmark.json there" in err[0]
