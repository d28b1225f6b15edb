"""How a run's load is asked for: the scenario's `duration`, `requests` defaults, the
open-loop plan (`rate`, `arrival`, `burstiness`, `arrival_seed`), their flags, and the wire.

Why these rules matter: a run ended by time and a run ended by a request count report
different things (`load.mode`), and an open-loop plan that is silently reinterpreted (a
Poisson run with a burstiness, a rate beside shared-prefix bursts) would put a wrong plan in
the result. Each bad value must be refused naming the field or flag, before any load.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import anvil, write_scenario

from anvil_metrics.cluster.wire import scenario_from_wire, scenario_to_wire
from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.arrivals import ArrivalPlan
from anvil_metrics.load.options import run_options
from anvil_metrics.load.scenario import scenario_from_dict, scenario_to_dict

BASE: dict[str, Any] = {"measurement_protocol": "load", "max_tokens": 64,
                        "context_tokens": 8192, "max_context_tokens": 8192}
DIST = {"context_distribution": {"300": 3, "600": 2}}
HOST = "http://127.0.0.1:9"


def sc(**kw: Any):
    return scenario_from_dict({**BASE, **kw}, source="t.toml")


# --- duration --------------------------------------------------------------------------------

@pytest.mark.parametrize("value,seconds", [("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0),
                                           ("1.5h", 5400.0), ("90", 90.0), (12, 12.0),
                                           (0.5, 0.5)])
def test_duration_values(value: Any, seconds: float) -> None:
    s = sc(duration=value)
    assert s.duration_s == seconds and type(s.duration_s) is float
    assert s.requests is None and s.load_mode == "duration"


@pytest.mark.parametrize("value", ["5x", "", "0s", "m", 0, -1, 0.0, True, float("inf"),
                                   float("nan"), [5]])
def test_bad_durations_name_the_field(value: Any) -> None:
    with pytest.raises(ScenarioError) as e:
        sc(duration=value)
    assert e.value.field == "duration"
    assert "duration = " in str(e.value) and "t.toml" in str(e.value)


# --- the request budget's defaults -----------------------------------------------------------

def test_requests_defaults() -> None:
    # a distribution and no duration: its total
    assert sc(**DIST).requests == 5 and sc(**DIST).load_mode == "budget"
    # a duration: no budget, distribution or not
    assert sc(**DIST, duration="10s").requests is None
    assert sc(**DIST, duration="10s").load_mode == "duration"
    # no distribution: no budget; the run lasts until stopped
    assert sc().requests is None and sc().load_mode == "until_stopped"
    # explicit requests are kept, with or without a duration (then a time limit)
    assert sc(requests=7).requests == 7
    both = sc(**DIST, requests=7, duration="1m")
    assert (both.requests, both.duration_s, both.load_mode) == (7, 60.0, "budget")


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "4"])
def test_bad_requests_are_named(value: Any) -> None:
    with pytest.raises(ScenarioError) as e:
        sc(requests=value)
    assert e.value.field == "requests"


# --- the open-loop plan ----------------------------------------------------------------------

def test_open_loop_plan_from_the_scenario() -> None:
    assert sc().arrivals is None
    assert sc(rate=20).arrivals == ArrivalPlan(20.0, "poisson", 1.0, 0)
    assert sc(rate=2.5, arrival="gamma", burstiness=0.25, arrival_seed=9).arrivals == (
        ArrivalPlan(2.5, "gamma", 0.25, 9))
    assert sc(rate=4, arrival="constant").arrivals == ArrivalPlan(4.0, "constant")
    assert sc(rate=4, arrival="poisson", burstiness=1).arrivals == ArrivalPlan(4.0)
    # a burstiness alone is a gamma's (1: poisson), as the flag's and vLLM's bench
    assert sc(rate=5, burstiness=2.0).arrivals == ArrivalPlan(5.0, "gamma", 2.0)
    assert sc(rate=5, burstiness=1).arrivals == ArrivalPlan(5.0)


@pytest.mark.parametrize("kw,field", [
    ({"arrival": "gamma"}, "arrival"),  # a shape without a rate
    ({"burstiness": 0.5}, "burstiness"),
    ({"arrival_seed": 3}, "arrival_seed"),
    ({"rate": 0}, "rate"),
    ({"rate": -2.0}, "rate"),
    ({"rate": True}, "rate"),
    ({"rate": "20"}, "rate"),
    ({"rate": float("inf")}, "rate"),
    ({"rate": 5, "arrival": "uniform"}, "arrival"),
    ({"rate": 5, "arrival": "poisson", "burstiness": 0.5}, "burstiness"),
    ({"rate": 5, "arrival": "gamma", "burstiness": 0}, "burstiness"),
    ({"rate": 5, "arrival": "gamma", "burstiness": False}, "burstiness"),
    ({"rate": 5, "arrival_seed": -1}, "arrival_seed"),
    ({"rate": 5, "arrival_seed": 1.5}, "arrival_seed"),
])
def test_bad_plans_name_the_field(kw: dict, field: str) -> None:
    with pytest.raises(ScenarioError) as e:
        sc(**kw)
    assert e.value.field == field, str(e.value)


def test_rate_with_shared_prefix_bursts_is_refused() -> None:
    burst = {**DIST, "serve_flags": {"shared_prefix_burst": True},
             "shared_prefix": {"prefix_tokens": 128}}
    assert sc(**burst).shared_prefix_burst  # fine without a rate
    with pytest.raises(ScenarioError) as e:
        sc(**burst, rate=5)
    assert e.value.field == "rate"


# --- the round trip the wire uses ------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    {},  # no budget, until stopped
    {**DIST, "duration": "90s"},  # no budget, a duration
    {**DIST},  # the distribution's budget
    {**DIST, "requests": 7, "duration": 30, "rate": 3.5, "arrival": "gamma",
     "burstiness": 0.4, "arrival_seed": 11},
    {"rate": 20.0, "arrival": "constant"},
    {"duration": "2m", "rate": 1, "arrival_seed": 4},
])
def test_scenario_round_trip_keeps_budget_duration_and_plan(kw: dict) -> None:
    s = sc(**kw)
    doc = orjson.loads(orjson.dumps(scenario_to_dict(s)))  # plain JSON, as on the wire
    back = scenario_from_dict(doc, source=s.source)
    assert back == s
    assert (back.requests, back.duration_s, back.arrivals, back.load_mode) == (
        s.requests, s.duration_s, s.arrivals, s.load_mode)
    wire = scenario_from_wire(orjson.loads(orjson.dumps(scenario_to_wire(s))))
    assert wire == s


def test_round_trip_of_a_budget_less_scenario_with_a_distribution() -> None:
    # requests None must stay None on the wire, not become the distribution's total
    s = replace(sc(**DIST), requests=None, duration_s=None)
    assert s.load_mode == "until_stopped"
    back = scenario_from_dict(orjson.loads(orjson.dumps(scenario_to_dict(s))))
    assert back.requests is None and back.load_mode == "until_stopped"


# --- flags: run_options (both roads) ---------------------------------------------------------

def opts(values: dict[str, Any], **kw: Any):
    return run_options(values, host=HOST, users=kw.pop("users", 2), api_key=None, **kw)


def test_rate_flags_make_the_plan() -> None:
    assert opts({}).scenario.arrivals is None
    assert opts({"rate": "20"}).scenario.arrivals == ArrivalPlan(20.0)
    assert opts({"rate": "20", "burstiness": "0.5"}).scenario.arrivals == (
        ArrivalPlan(20.0, "gamma", 0.5))  # a burstiness alone means gamma
    assert opts({"rate": "20", "burstiness": "1"}).scenario.arrivals == ArrivalPlan(20.0)
    assert opts({"rate": "3", "arrival": "constant", "arrival_seed": "5"}).scenario.arrivals == (
        ArrivalPlan(3.0, "constant", 1.0, 5))
    assert opts({"rate": 8.0, "arrival": "gamma", "burstiness": 2.0,
                 "arrival_seed": 1}).scenario.arrivals == ArrivalPlan(8.0, "gamma", 2.0, 1)


def test_rate_flags_over_the_scenarios_plan(tmp_path: Path) -> None:
    path = write_scenario(tmp_path / "s.toml", 'measurement_protocol = "x"\nrate = 4.0\n'
                          'arrival = "gamma"\nburstiness = 0.5\narrival_seed = 3\n')
    base = {"scenario": str(path)}
    assert opts(base).scenario.arrivals == ArrivalPlan(4.0, "gamma", 0.5, 3)
    # a new rate keeps the scenario's shape and seed
    assert opts({**base, "rate": "9"}).scenario.arrivals == ArrivalPlan(9.0, "gamma", 0.5, 3)
    # a shape flag without --rate reshapes the scenario's rate
    assert opts({**base, "arrival": "constant"}).scenario.arrivals == (
        ArrivalPlan(4.0, "constant", 1.0, 3))
    assert opts({**base, "arrival_seed": "8"}).scenario.arrivals == (
        ArrivalPlan(4.0, "gamma", 0.5, 8))


@pytest.mark.parametrize("values,flag", [
    ({"arrival": "gamma"}, "--arrival"),
    ({"burstiness": "0.5"}, "--burstiness"),
    ({"arrival_seed": "3"}, "--arrival-seed"),
    ({"rate": "5", "arrival": "poisson", "burstiness": "0.5"}, "--burstiness"),
    ({"rate": "0"}, "--rate"),
    ({"rate": "-1"}, "--rate"),
    ({"rate": "fast"}, "--rate"),
    ({"rate": "5", "arrival": "uniform"}, "--arrival"),
    ({"rate": "5", "burstiness": "0"}, "--burstiness"),
    ({"rate": "5", "arrival_seed": "-1"}, "--arrival-seed"),
    ({"duration": "5x"}, "--duration"),
    ({"duration": "0"}, "--duration"),
    ({"duration": "-1s"}, "--duration"),
])
def test_bad_flags_are_named(values: dict, flag: str) -> None:
    with pytest.raises(UsageError) as e:
        opts(values)
    assert str(e.value).startswith(f"{flag} "), str(e.value)


def test_rate_with_a_shared_prefix_scenario_is_refused(tmp_path: Path) -> None:
    path = write_scenario(tmp_path / "s.toml", "\n".join([
        'measurement_protocol = "x"', "max_tokens = 64", "context_tokens = 8192",
        "max_context_tokens = 8192", "[context_distribution]", "600 = 4",
        "[serve_flags]", "shared_prefix_burst = true", "[shared_prefix]",
        "prefix_tokens = 128", ""]))
    with pytest.raises(UsageError, match="--rate"):
        opts({"scenario": str(path), "rate": "5"})


def test_duration_flag_and_locusts_run_time() -> None:
    s = opts({"duration": "1m30s"}).scenario
    assert (s.duration_s, s.requests, s.load_mode) == (90.0, None, "duration")
    # plain Locust's -t is the duration when --duration is not given ...
    s = opts({}, run_time_s=8.0).scenario
    assert (s.duration_s, s.requests, s.load_mode) == (8.0, None, "duration")
    # ... and --duration wins over it
    assert opts({"duration": "3s"}, run_time_s=8.0).scenario.duration_s == 3.0
    # with a request count, the duration is a time limit: the budget ends the run
    s = opts({"duration": "3s", "requests": "10"}).scenario
    assert (s.requests, s.duration_s, s.load_mode) == (10, 3.0, "budget")
    assert opts({}).scenario.load_mode == "until_stopped"


def test_stop_timeout_is_carried() -> None:
    assert opts({}, stop_timeout_s=1.5).stop_timeout_s == 1.5


# --- anvil run: one line, exit 2 -------------------------------------------------------------

@pytest.mark.parametrize("args,flag", [
    (["--duration", "5x"], "--duration"),
    (["--duration", "0"], "--duration"),
    (["--rate", "0"], "--rate"),
    (["--rate", "lots"], "--rate"),
    (["--arrival", "gamma"], "--arrival"),
    (["--rate", "5", "--arrival", "poisson", "--burstiness", "3"], "--burstiness"),
])
def test_anvil_run_refuses_bad_load_flags_in_one_line(tmp_path: Path, args: list[str],
                                                      flag: str) -> None:
    proc = anvil("run", "scenarios/smoke.toml", "--host", HOST, "--results-dir",
                 str(tmp_path), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert flag in err
    assert list(tmp_path.iterdir()) == []  # refused before any run folder
