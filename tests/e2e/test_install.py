"""The package as a user gets it from a wheel, outside the checkout: `anvil demo` runs.

Why a test: in a checkout, code can reach files beside the package (scenarios/, locustfiles/)
that a wheel does not carry; the demo once failed that way after `pip install .`. Here the
wheel is built from the repository, installed (without its dependencies, which the test's
own environment has) into a folder of its own, and run from another folder, with that folder
first on the path so nothing comes from the checkout.

It is also the test of `anvil demo` itself (`make demo` runs the same command in the
checkout): a verified benchmark.json that `anvil verify` recomputes, and the run's report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson
import pytest

from anvil_metrics.runs.simproc import start_simulator

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def test_a_wheel_carries_what_the_package_reads_and_its_demo_runs(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "w"),
         str(REPO)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "w").glob("anvil_metrics-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("anvil_metrics/scenarios/smoke.toml",
                    "anvil_metrics/scenarios/campaigns/fp8-vs-nvfp4.toml",
                    "anvil_metrics/schemas/benchmark-v1.schema.json",
                    "anvil_metrics/runs/locustfile.py"):
        assert shipped in names

    target = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    where = subprocess.run(
        [sys.executable, "-c", "import anvil_metrics; print(anvil_metrics.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(target), where.stdout

    demo = subprocess.run(
        [sys.executable, "-m", "anvil_metrics", "demo", "--results-dir", "out"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "verify: OK" in demo.stdout
    (result,) = (elsewhere / "out").glob("benchmark-*/benchmark.json")
    assert f"result: {Path('out') / result.parent.name / 'benchmark.json'}" in demo.stdout
    check = subprocess.run(
        [sys.executable, "-m", "anvil_metrics", "verify", str(result)],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "recomputes exactly" in check.stdout, check.stdout
    # the demo draws its run too (matplotlib is in the dev extra)
    assert "report: " in demo.stdout
    assert (result.parent / "report.html").stat().st_size > 50_000
    assert (result.parent / "timeline.png").read_bytes()[:4] == b"\x89PNG"

    # the README's other two lines for an installed package: its scenario, its locustfile
    package = target / "anvil_metrics"
    with start_simulator([]) as sim:
        run = subprocess.run(
            [sys.executable, "-m", "anvil_metrics", "run", str(package / "scenarios/smoke.toml"),
             "--host", sim.url, "--requests", "6", "--users", "2", "--results-dir", "r1"],
            cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        plain = subprocess.run(
            [sys.executable, "-m", "locust", "-f", str(package / "runs/locustfile.py"),
             "--headless", "-H", sim.url, "-u", "2", "-r", "2", "--requests", "6",
             "--results-dir", "r2"],
            cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
        assert plain.returncode == 0, plain.stdout + plain.stderr
    for folder in ("r1", "r2"):
        (bench,) = (elsewhere / folder).glob("*/benchmark.json")
        assert len(orjson.loads(bench.read_bytes())["request_timings"]) == 6
