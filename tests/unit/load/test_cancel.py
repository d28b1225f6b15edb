"""`load/cancel`: the `[cancel]` table and the flags, checked in one line; the draw
reproducible per request and within the binomial bound of its rate."""

from __future__ import annotations

import math

import pytest

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.cancel import CancelPlan, parse_cancel
from anvil_metrics.load.options import run_options, scenario_flags
from anvil_metrics.load.scenario import scenario_from_dict, scenario_to_dict, scenario_with_flags


def test_the_draw_follows_the_rate_and_is_the_same_each_time() -> None:
    plan = CancelPlan(0.2, "decode", seed=4)
    drawn = [plan.cancels(k) for k in range(2000)]
    n = sum(drawn)
    assert abs(n - 400) <= 3.29 * math.sqrt(2000 * 0.2 * 0.8), n
    assert drawn == [CancelPlan(0.2, "prefill", seed=4).cancels(k) for k in range(2000)]
    assert all(CancelPlan(1.0, "decode").cancels(k) for k in range(100))


def test_the_table_round_trips_and_flags_go_over_it() -> None:
    sc = scenario_from_dict({"measurement_protocol": "m", "context_seed": 3,
                             "cancel": {"rate": 0.5, "after": 250}})
    assert sc.cancel == CancelPlan(0.5, 250.0, 3)
    assert scenario_from_dict(scenario_to_dict(sc)) == sc
    doc = scenario_to_dict(sc)
    over = scenario_with_flags(doc, scenario_flags({"cancel_after": "decode"}), "s.toml")
    assert over.cancel == CancelPlan(0.5, "decode", 3)
    plain = {"measurement_protocol": "m"}
    both = scenario_with_flags(plain, scenario_flags({"cancel_rate": "0.1",
                                                      "cancel_after": "12.5"}), None)
    assert both.cancel == CancelPlan(0.1, 12.5, 0)
    opts = run_options({"cancel_rate": "0.3", "cancel_after": "prefill"}, host="http://h",
                       users=1, api_key=None)
    assert opts.scenario.cancel == CancelPlan(0.3, "prefill", 0)


@pytest.mark.parametrize("table,where", [
    ({"rate": 0}, "cancel.rate = 0"), ({"rate": 1.5, "after": "decode"}, "cancel.rate"),
    ({"rate": 0.1}, "cancel.after = None"), ({"rate": 0.1, "after": "soon"}, "cancel.after"),
    ({"rate": 0.1, "after": -5}, "cancel.after"), ({"rate": 0.1, "when": 1}, "cancel.when"),
])
def test_a_bad_table_is_one_line(table: dict, where: str) -> None:
    with pytest.raises(ScenarioError) as e:
        parse_cancel(table, 0, "s.toml")
    assert where in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("values,said", [
    ({"cancel_rate": "0"}, "--cancel-rate '0' is not allowed"),
    ({"cancel_rate": "0.2"}, "--cancel-rate '0.2' needs cancel.after (--cancel-after) too"),
    ({"cancel_after": "decode"}, "--cancel-after 'decode' needs cancel.rate (--cancel-rate) "
     "too"),
    ({"cancel_rate": "0.2", "cancel_after": "later"}, "--cancel-after 'later' is not allowed"),
])
def test_a_bad_flag_is_one_line(values: dict, said: str) -> None:
    with pytest.raises(UsageError) as e:
        run_options(values, host="http://h", users=1, api_key=None)
    assert said in str(e.value), str(e.value)
