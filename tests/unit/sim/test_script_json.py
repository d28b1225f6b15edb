"""The scripted answers to the `json` suite (`sim/script_json.py`): each case's right value as
bare JSON from the suite's table, or the one thing each fault breaks."""

from __future__ import annotations

import orjson
import pytest

from anvil_metrics.checks.jsonmode import CASES, JsonCase
from anvil_metrics.sim.script_json import WRONG, answer


def ask(prompt: str, *faults: str) -> str:
    reply = answer({"messages": [{"role": "user", "content": prompt}]}, frozenset(faults))
    assert reply is not None
    return reply.content


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_each_case_and_its_faults(case: JsonCase) -> None:
    assert orjson.loads(ask(case.prompt)) == dict(case.value)
    fenced = ask(case.prompt, "json:fenced")
    assert fenced.startswith("```json\n") and fenced.endswith("\n```")
    assert orjson.loads(fenced[8:-4]) == dict(case.value)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(ask(case.prompt, "json:not_json"))
    short = orjson.loads(ask(case.prompt, "json:schema_violation"))
    assert list(short) == list(case.value)[:-1]
    wrong = orjson.loads(ask(case.prompt, "json:wrong_value"))
    assert wrong == WRONG[case.id] != dict(case.value)


def test_a_wrong_value_for_every_case_and_nothing_else() -> None:
    assert set(WRONG) == {c.id for c in CASES}
    assert answer({"messages": [{"role": "user", "content": "{}"}]}, frozenset()) is None
