"""A Locust master and its workers as real processes, and the checks every distributed run
must pass (the distributed and the network-namespace tests share them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import REPO, load_json, raw_lines

from anvil_metrics.post.benchmark import verify_benchmark

LOCUSTFILE = str(REPO / "locustfiles" / "chat.py")


class Cluster:
    """A master and its workers (a list, or by name), the results folder and the master's
    log."""

    def __init__(self, master: subprocess.Popen,
                 workers: list[subprocess.Popen] | dict[str, subprocess.Popen],
                 results: Path, log: Path) -> None:
        self.master, self.workers, self.results, self.log = master, workers, results, log

    def wait(self, timeout: float = 90) -> int:
        try:
            return self.master.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("the master did not end by itself:\n"
                                 + self.log.read_text()[-3000:]) from None

    def run_dir(self) -> Path:
        runs = [p for p in self.results.iterdir() if p.is_dir() and p.name.startswith("bench")]
        assert len(runs) == 1, (runs, self.log.read_text()[-3000:])
        return runs[0]


def requests_of(run_dir: Path) -> list[dict]:
    return [line for line in raw_lines(run_dir) if line["type"] == "request"]


def check_document(run_dir: Path) -> dict:
    doc = load_json(run_dir / "benchmark.json")
    assert verify_benchmark(doc) == []
    assert doc["requests"] == doc["completed"] + doc["failed"]
    return doc

