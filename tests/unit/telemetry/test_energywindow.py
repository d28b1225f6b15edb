"""energywindow: joules per GPU over a window from counters (exact) and from power
(trapezoids), edges interpolated, a reset and a disappeared GPU left uncovered, the long
gap not bridged, and the file read with a torn last line."""

from __future__ import annotations

from pathlib import Path

import pytest
from energybuild import SOURCE, S, failed, series, write_energy

from anvil_metrics.telemetry.energywindow import (
    gpu_windows,
    peak_power_w,
    read_energy_file,
)

TIMES = range(0, 10 * S + 1, S // 2)  # every 0.5 s (the source's interval) for 10 s


def _ramp(t: float) -> float:
    return 200.0 + 10.0 * t  # W: linear, so trapezoids are exact


def _ramp_j(t: float) -> float:
    return 5_000.0 + 200.0 * t + 5.0 * t * t  # its integral, from an arbitrary boot count


def test_a_counter_is_differenced_and_power_integrated_alike() -> None:
    a, b = 2 * S, 8 * S
    truth = _ramp_j(8) - _ramp_j(2)
    counter = gpu_windows(tuple(series(2, TIMES, {}, _ramp, _ramp_j)), a, b, 0.5)
    power = gpu_windows(tuple(series(2, TIMES, {}, _ramp, None)), a, b, 0.5)
    for got, method in ((counter, "counter"), (power, "power")):
        assert [g.method for g in got] == [method, method]
        assert [g.energy_j for g in got] == [pytest.approx(truth, rel=1e-12)] * 2
        assert [g.covered_ns for g in got] == [b - a] * 2
    assert counter[0].name == "NVIDIA H100 80GB HBM3" and counter[1].uuid == "GPU-00000001"


def test_an_edge_between_readings_is_interpolated() -> None:
    # readings at 0, 0.5, ... ; the window's edges at 2.25 s and 7.75 s fall between two
    a, b = 2 * S + S // 4, 7 * S + 3 * S // 4
    truth = _ramp_j(7.75) - _ramp_j(2.25)
    power = gpu_windows(tuple(series(1, TIMES, {}, _ramp, None)), a, b, 0.5)[0]
    assert power.energy_j == pytest.approx(truth, rel=1e-12)  # linear power: exact
    counter = gpu_windows(tuple(series(1, TIMES, {}, _ramp, _ramp_j)), a, b, 0.5)[0]
    # pro rata within the two edge pairs: off by at most the ramp's curvature there
    assert counter.energy_j == pytest.approx(truth, abs=2 * 5.0 * 0.25 ** 2)
    assert counter.covered_ns == power.covered_ns == b - a


def test_a_counter_reset_is_not_counted_and_lowers_the_coverage() -> None:
    samples = series(1, TIMES, {}, lambda t: 300.0,
                     lambda t: 300.0 * t if t < 5.2 else 300.0 * (t - 5.2))
    got = gpu_windows(tuple(samples), 0, 10 * S, 0.5)[0]
    assert got.counter_resets == 1
    assert got.covered_ns == 10 * S - S // 2  # the pair 5.0 → 5.5 s holds the reset
    assert got.energy_j == pytest.approx(300.0 * 9.5)


def test_a_gpu_that_disappears_covers_what_it_was_read_for() -> None:
    samples = series(2, TIMES, {}, lambda t: 100.0, lambda t: 100.0 * t)
    for s in samples:
        if s.t_ns > 4 * S:
            s.gpus = s.gpus[:1]  # GPU 1 gone after 4 s
    got = gpu_windows(tuple(samples), 0, 10 * S, 0.5)
    assert [g.covered_ns for g in got] == [10 * S, 4 * S]
    assert [g.energy_j for g in got] == [pytest.approx(1000.0), pytest.approx(400.0)]


def test_power_is_not_bridged_over_a_long_gap() -> None:
    samples = [s for s in series(1, TIMES, {}, lambda t: 300.0, None)
               if not 3 * S < s.t_ns < 6 * S]  # 3 s without a reading: > 3 × 0.5 s
    got = gpu_windows(tuple(samples), 0, 10 * S, 0.5)[0]
    assert got.covered_ns == 7 * S and got.energy_j == pytest.approx(2100.0)
    # a counter is: its difference over the gap is exact
    samples = [s for s in series(1, TIMES, {}, lambda t: 300.0, lambda t: 300.0 * t)
               if not 3 * S < s.t_ns < 6 * S]
    got = gpu_windows(tuple(samples), 0, 10 * S, 0.5)[0]
    assert got.covered_ns == 10 * S and got.energy_j == pytest.approx(3000.0)


def test_peak_power_needs_every_gpu_in_one_reading() -> None:
    samples = series(2, TIMES, {}, _ramp, None)
    assert peak_power_w(tuple(samples), ["127.0.0.1:9400/0", "127.0.0.1:9400/1"], 0,
                        6 * S) == pytest.approx(2 * _ramp(6))
    assert peak_power_w(tuple(samples), ["127.0.0.1:9400/0", "elsewhere/0"], 0, 6 * S) is None


def test_the_file_is_read_typed_and_a_torn_last_line_dropped(tmp_path: Path) -> None:
    samples = [*series(1, range(0, 2 * S, S // 2), {0: "first"}, lambda t: 1.0, None),
               failed(9, 3 * S, "last")]
    path = write_energy(tmp_path, samples)
    got = read_energy_file(path)
    assert got is not None and got.source == SOURCE and list(got.samples) == samples
    assert got.bad_lines == 0
    path.write_bytes(path.read_bytes() + b'{"type": "energy_sample", "seq": 10, "t_')
    got = read_energy_file(path)
    assert got is not None and got.bad_lines == 0 and len(got.samples) == len(samples)
    lines = path.read_bytes().splitlines()
    path.write_bytes(b"\n".join([lines[0], b'{"type": "energy_sample", "seq": -1}',
                                 *lines[1:-1]]) + b"\n")
    got = read_energy_file(path)
    assert got is not None and got.bad_lines == 1 and got.first_bad.startswith("line 2: ")
    assert read_energy_file(tmp_path / "none.jsonl") is None
