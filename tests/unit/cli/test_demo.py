"""`anvil demo` in-process, with the simulator and Locust replaced: it serves the smoke
scenario's context, runs it at its own concurrency, then prints the summary, the verdict
of verify and where the result is; a run without a benchmark is one line, exit 1. (The
real thing, end to end: tests/e2e/test_run.py.)"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from conftest import REPO
from rawbuild import HEADER, completed, failed, write_raw

import anvil_metrics.report.build as report
import anvil_metrics.runs.launch as launch
import anvil_metrics.runs.simproc as simproc
from anvil_metrics.cli.main import main
from anvil_metrics.load.scenario import load_scenario

SMOKE = load_scenario(REPO / "scenarios" / "smoke.toml")


@pytest.fixture
def fakes(monkeypatch, tmp_path: Path) -> dict[str, Any]:
    """The simulator, the CPU pinning and the run, replaced; what they were asked."""
    seen: dict[str, Any] = {"benchmark": None}

    @contextmanager
    def start_simulator(args: list[str]):
        seen["sim_args"] = args
        yield SimpleNamespace(url="http://127.0.0.1:9", pid=4242)

    @contextmanager
    def pinned_apart(pid: int):
        yield f"pid {pid} pinned"

    def run_scenario(sc: Any, path: str, url: str, *, users: int, run_dir: Path) -> Any:
        seen.update(scenario=sc, path=path, url=url, users=users)
        return launch.RunResult(run_dir, seen["benchmark"], 0, run_dir / "locust.log")

    monkeypatch.setattr(simproc, "start_simulator", start_simulator)
    monkeypatch.setattr(simproc, "pinned_apart", pinned_apart)
    monkeypatch.setattr(launch, "run_scenario", run_scenario)
    monkeypatch.setattr(report, "make_report", lambda folder: SimpleNamespace(
        html_path=Path(folder) / "report.html"))
    return seen


def test_a_run_without_a_benchmark_is_one_line_exit_1(fakes, tmp_path: Path, capsys) -> None:
    assert main(["demo", "--results-dir", str(tmp_path)]) == 1
    assert fakes["sim_args"] == ["--max-context", str(SMOKE.max_context_tokens),
                                 "--role-chunk", "with-first-token"]
    assert replace(fakes["scenario"], source=None) == replace(SMOKE, source=None)
    assert Path(fakes["path"]).name == "smoke.toml" == Path(fakes["scenario"].source).name
    assert (fakes["url"], fakes["users"]) == ("http://127.0.0.1:9", SMOKE.concurrency)
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[0] == "simulator: http://127.0.0.1:9 (pid 4242; pid 4242 pinned)"
    assert out[1].startswith(f"running smoke.toml: {SMOKE.requests} requests, "
                             f"{SMOKE.concurrency} users; Locust log: {tmp_path}")
    assert captured.err.startswith("anvil: demo run failed; see ")
    assert captured.err.count("\n") == 1


def demo_of(fakes: dict[str, Any], tmp_path: Path, records: list[Any], capsys: Any) -> int:
    """`anvil demo` whose run recorded `records` (its benchmark.json built from them)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_raw(run_dir / "requests.jsonl", HEADER, records,
              {"finished_at": "2026-08-01T16:09:00Z", "client": {}})
    assert main(["postprocess", str(run_dir)]) == 0
    fakes["benchmark"] = run_dir / "benchmark.json"
    capsys.readouterr()
    return main(["demo", "--results-dir", str(tmp_path)])


def test_a_verified_run_prints_its_summary_and_result(fakes, tmp_path: Path, capsys) -> None:
    assert demo_of(fakes, tmp_path, [completed(i) for i in range(3)], capsys) == 0
    run_dir = tmp_path / "run"
    out = capsys.readouterr().out.splitlines()
    summary = launch.summary_lines(orjson.loads(fakes["benchmark"].read_bytes()))
    assert out[2:] == [*summary, "verify: OK", f"result: {fakes['benchmark']}",
                       f"report: {run_dir / 'report.html'}"]


def test_a_run_whose_every_request_failed_exits_4_saying_so_last(fakes, tmp_path: Path,
                                                                  capsys) -> None:
    assert demo_of(fakes, tmp_path, [failed(i) for i in range(2)], capsys) == 4
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("anvil: every one of the 2 measured requests failed (2 ")
