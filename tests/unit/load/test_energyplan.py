"""The energy source's keys (`load/energyplan.py`): each source's plan, the refusals (one
line naming the key or flag, the value, what is allowed), the table written back."""

from __future__ import annotations

import pytest

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.energyplan import EnergyPlan, MetricSelector, parse_selector
from anvil_metrics.load.options import locust_args, run_options
from anvil_metrics.load.scenario import scenario_from_dict, scenario_to_dict

BASE = {"measurement_protocol": "t"}
URL = "http://10.0.0.5:9400/metrics"


def plan(energy: dict) -> EnergyPlan | None:
    return scenario_from_dict({**BASE, "energy": energy}).energy


def test_each_source_and_its_defaults() -> None:
    assert scenario_from_dict(BASE).energy is None
    assert plan({"urls": [URL, "http://10.0.0.6:9400/metrics"], "idle": "10s"}) == EnergyPlan(
        "dcgm", (URL, "http://10.0.0.6:9400/metrics"), None, 0.5, 10.0)
    assert plan({"source": "nvml", "interval": 2}) == EnergyPlan("nvml", (), None, 2.0)
    got = plan({"metric": 'gpu_power_usage{gpu_id="0", hostname=n1}:W', "urls": [URL]})
    assert got is not None and got.source == "metric"
    assert got.metric == MetricSelector("gpu_power_usage", (("gpu_id", "0"),
                                                            ("hostname", "n1")), "W")


@pytest.mark.parametrize("energy", [
    {"urls": [URL], "idle": 5}, {"source": "nvml"},
    {"source": "metric", "metric": "nv_energy_consumption:J", "urls": [URL], "interval": 0.1},
])
def test_the_table_reads_back_into_the_same_plan(energy: dict) -> None:
    sc = scenario_from_dict({**BASE, "energy": energy})
    assert scenario_from_dict(scenario_to_dict(sc)).energy == sc.energy


@pytest.mark.parametrize(("energy", "key", "words"), [
    ({"source": "dcgm"}, "energy.source", "--energy-url URL"),
    ({"source": "nvml", "urls": [URL]}, "energy.urls", "none with --energy nvml"),
    ({"metric": "gpu_power_usage", "urls": [URL]}, "energy.metric", "UNIT"),
    ({"metric": "gpu_power_usage:kW", "urls": [URL]}, "energy.metric", "W, mW"),
    ({"source": "dcgm", "metric": "x:W", "urls": [URL]}, "energy.metric",
     "with --energy metric"),
    ({"idle": "10s"}, "energy.idle", "an energy source beside it"),
    ({"urls": ["ftp://x"]}, "energy.urls", "http(s) URLs"),
    ({"urls": [URL, "http://u:p@10.0.0.5:9400/other"]}, "energy.urls", "one URL per node"),
    ({"source": "rapl"}, "energy.source", "one of"),
    ({"source": "nvml", "interval": 0}, "energy.interval", "> 0"),
    ({"source": "nvml", "watts": 1}, "energy.watts", "one of the keys"),
])
def test_a_bad_energy_table_is_refused_by_its_key(energy: dict, key: str, words: str) -> None:
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict({**BASE, "energy": energy})
    assert e.value.field == key and words in str(e.value), str(e.value)


def test_the_flags_set_the_keys_and_a_bad_one_is_named() -> None:
    opts = run_options({"energy_url": f"{URL}, http://n2:9400/metrics",
                        "energy_idle": "2s", "energy_interval": "0.25"},
                       host="http://h:1", users=None, api_key=None)
    assert opts.scenario.energy == EnergyPlan("dcgm", (URL, "http://n2:9400/metrics"), None,
                                              0.25, 2.0)
    # repeated: Locust's parser gives its texts, anvil run's argparse each text's list
    n2 = "http://n2:9400/metrics"
    for given in ([URL, n2], [[URL], [n2]]):
        opts = run_options({"energy_url": given}, host="http://h:1", users=None,
                           api_key=None)
        assert opts.scenario.energy == EnergyPlan("dcgm", (URL, n2))
    assert locust_args({"energy_url": [[URL, n2], [URL]]}) == [
        "--energy-url", f"{URL},{n2}", "--energy-url", URL]
    with pytest.raises(ScenarioError, match="--energy-metric 'x{a=1': energy.metric"):
        run_options({"energy_metric": "x{a=1"}, host="http://h:1", users=None, api_key=None)


def test_selectors() -> None:
    s = parse_selector('nv_energy_consumption{gpu_uuid="GPU-1"}:J')
    assert s is not None and s.energy and s.factor == 1.0
    assert s.matches("nv_energy_consumption", {"gpu_uuid": "GPU-1", "x": "y"})
    assert s.matches("nv_energy_consumption_total", {"gpu_uuid": "GPU-1"})  # the parser's name
    assert not s.matches("nv_energy_consumption", {"gpu_uuid": "GPU-2"})
    assert s.text == 'nv_energy_consumption{gpu_uuid="GPU-1"}:J'
    micro = parse_selector("gpu_energy_consumed:uJ")
    assert micro is not None and micro.factor == 1e-6 and micro.text == "gpu_energy_consumed:uJ"
    assert parse_selector("gpu_power_usage:mW").factor == 1e-3  # type: ignore[union-attr]
    for bad in ("", ":W", "a b:W", "x{a}:W", "x:w"):
        assert parse_selector(bad) is None, bad
