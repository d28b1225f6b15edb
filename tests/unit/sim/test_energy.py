"""The simulator's GPUs (`sim/energy.py`): the power model's text, the energy function, and
its DCGM series read back by anvil's own DCGM reader equal to the function."""

from __future__ import annotations

import pytest

from anvil_metrics.sim.energy import PowerModel, SimGpus, parse_power_model
from anvil_metrics.sim.options import config_from_args, parse_args
from anvil_metrics.telemetry.energy import dcgm_gpus
from anvil_metrics.telemetry.scrape import exposition_samples


def test_the_power_models_text() -> None:
    assert parse_power_model("idle=100,per_token=0.5") == PowerModel(100.0, 0.5)
    assert parse_power_model(" idle=0, per_token=2e-1") == PowerModel(0.0, 0.2)
    for bad in ("idle=100", "per_token=1,idle=2", "idle=-1,per_token=1", "idle=x,per_token=1",
                "idle=inf,per_token=1", ""):
        with pytest.raises(ValueError, match="expected idle=WATTS,per_token=JOULES"):
            parse_power_model(bad)


def test_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config_from_args(parse_args(["--gpus", "8", "--power-model",
                                       "idle=90,per_token=0.3"]))
    assert (cfg.gpus, cfg.power_model) == (8, PowerModel(90.0, 0.3))
    assert config_from_args(parse_args([])).power_model is None
    for argv, said in ((["--gpus", "2"], "--gpus: needs --power-model"),
                       (["--power-model", "idle=1"], "argument --power-model"),
                       (["--gpus", "0", "--power-model", "idle=1,per_token=1"], "--gpus")):
        with pytest.raises(SystemExit) as e:
            parse_args(argv)
        assert e.value.code == 2 and said in capsys.readouterr().err


def test_the_energy_is_the_function_of_time_and_tokens() -> None:
    gpus = SimGpus(4, PowerModel(100.0, 0.5), t0_ns=1_000_000_000)
    assert gpus.energy_j(3_500_000_000, 0) == 4 * 100 * 2.5
    assert gpus.energy_j(3_500_000_000, 1234) == 1000.0 + 617.0
    truth = gpus.truth(10)
    assert truth["energy_j"] == gpus.energy_j(truth["t_ns"], 10)
    assert (truth["gpus"], truth["idle_w"], truth["per_token_j"], truth["output_tokens"]) == (
        4, 100.0, 0.5, 10)


def test_its_dcgm_series_read_back_as_the_function_split_over_the_gpus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Read by anvil's DCGM reader: each GPU holds a quarter of the function's joules; the
    power is idle at the first answer, then the mean since the previous one."""
    clock = iter([3_000_000_000, 5_000_000_000])
    monkeypatch.setattr("anvil_metrics.sim.energy.time.monotonic_ns", lambda: next(clock))
    gpus = SimGpus(4, PowerModel(100.0, 0.5), t0_ns=1_000_000_000)
    first = dcgm_gpus(exposition_samples(gpus.exposition(0)), "sim:1")
    assert [g.key for g in first] == [f"sim:1/{i}" for i in range(4)]
    assert {g.energy_j for g in first} == {800.0 / 4} and {g.power_w for g in first} == {100.0}
    assert first[0].name == "NVIDIA H100 80GB HBM3" and first[3].uuid.startswith("GPU-")
    assert len({g.uuid for g in first}) == 4
    second = dcgm_gpus(exposition_samples(gpus.exposition(400)), "sim:1")
    # 2 s more at idle (800 J over four GPUs) and 400 tokens x 0.5 J
    assert {g.energy_j for g in second} == {(1600.0 + 200.0) / 4}
    assert [g.power_w for g in second] == [pytest.approx((1000.0 / 2.0) / 4)] * 4
