"""The energy reader beside a run: real processes (the simulator as a DCGM exporter,
`anvil run`, the energy child), the samples file against the simulator's own energy
function, and an exporter that never answers leaving the run alone."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from conftest import anvil, load_json, result_path
from simfork import start_simulator

from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.telemetry.energy import READ_TIMEOUT_S
from anvil_metrics.telemetry.energyfile import ENERGY_FILE, EnergyLine, EnergySample

pytestmark = pytest.mark.e2e

GPUS, IDLE_W, PER_TOKEN_J = 2, 10.0, 1.0


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_simulator(["--prefill-ms", "20", "--interval-ms", "5", "--content-tokens",
                          "30", "--gpus", str(GPUS), "--power-model",
                          f"idle={IDLE_W:g},per_token={PER_TOKEN_J:g}"]) as s:
        yield s


def _run(sim_url: str, out: Path, *extra: str, requests: int) -> tuple[dict, list]:
    proc = anvil("run", "scenarios/smoke.toml", "--host", sim_url, "--requests", str(requests),
                 "--users", "4", "--warmup-requests", "0", "--results-dir", str(out),
                 "--quiet", *extra, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = result_path(proc)
    dec = msgspec.json.Decoder(EnergyLine)
    return load_json(path), [dec.decode(x) for x in
                             (path.parent / ENERGY_FILE).read_bytes().splitlines()]


def test_the_samples_hold_the_simulators_joules_and_the_idle_baseline_comes_first(
        sim: SimProcess, tmp_path: Path) -> None:
    """Over the measured window (the `first` and `last` samples), the GPUs' joules less
    idle × the window's seconds, over per_token_J, are the run's output tokens (each
    request's usage), to half a token: the counters are the simulator's exact function,
    read on the run's clock. The idle baseline (0.5 s) is read before the first request."""
    doc, lines = _run(sim.url, tmp_path, "--energy-url", f"{sim.url}/metrics",
                      "--energy-interval", "0.2", "--energy-idle", "0.5s", requests=16)
    head, samples = lines[0], lines[1:]
    assert (head.source, head.where, head.interval_s) == ("dcgm", [f"{sim.url}/metrics"], 0.2)
    assert all(isinstance(s, EnergySample) and s.ok and len(s.gpus) == GPUS for s in samples)
    marks = {s.mark: s for s in samples if s.mark}
    assert [s.mark for s in samples if s.mark] == ["idle_start", "idle_end", "first", "last"]
    assert marks["idle_end"].t_ns - marks["idle_start"].t_ns >= 0.5e9
    assert [s.seq for s in samples] == list(range(len(samples)))
    totals = [sum(g.energy_j for g in s.gpus) for s in samples]
    assert totals == sorted(totals)  # a counter, never down
    first, last = marks["first"], marks["last"]
    joules = sum(g.energy_j for g in last.gpus) - sum(g.energy_j for g in first.gpus)
    idle_j = GPUS * IDLE_W * (last.t_ns - first.t_ns) / 1e9
    tokens = (joules - idle_j) / PER_TOKEN_J
    print(f"\nwindow {joules:.3f} J, idle {idle_j:.3f} J, tokens from joules {tokens:.3f}, "
          f"the run's {doc['metrics']['output_tokens']}")
    assert doc["completed"] == 16
    assert abs(tokens - doc["metrics"]["output_tokens"]) < 0.5
    assert {g.uuid for g in first.gpus} == {g.uuid for g in last.gpus} and all(
        g.name == "NVIDIA H100 80GB HBM3" for g in last.gpus)


def test_an_exporter_that_never_answers_leaves_the_run_alone(sim: SimProcess,
                                                            tmp_path: Path) -> None:
    """Every reading hangs (a socket nobody answers on): each times out in the child, the
    file says so at the window's edges, and the run completes with its loop never held
    for a reading (a wait on the loop would stall it for the reading's timeout, 1 s)."""
    with socket.socket() as hang:
        hang.bind(("127.0.0.1", 0))
        hang.listen(64)
        url = f"http://127.0.0.1:{hang.getsockname()[1]}/metrics"
        doc, lines = _run(sim.url, tmp_path, "--energy-url", url, requests=8)
    assert doc["completed"] == 8 and doc["failed"] == 0
    edges = [s for s in lines[1:] if s.mark]
    assert [s.mark for s in edges] == ["first", "last"]
    for s in edges:
        assert not s.ok and s.gpus == []
        assert s.error == f"{url}: no answer within {READ_TIMEOUT_S:g} s"
    assert doc["client"]["loop_lag_ms"]["max"] < READ_TIMEOUT_S * 1000
