"""The scripted simulator's answers to the `json` suite (`anvil sim --script`).

Why: the suite must be seen to pass against a server that honours `response_format` and to
fail on each way one does not. The questions and their right values live with the suite
(`checks/jsonmode.py`); this module recognises a question by the exact text of the last user
message and writes the right value as bare JSON — or, per `--script-fault json:KIND`:

    not_json          prose, as a server that ignores response_format writes
    fenced            the right JSON inside a ```json block (the constraint was not applied)
    schema_violation  JSON that breaks the schema (a required key dropped)
    wrong_value       JSON that meets the schema with a wrong value (`WRONG`)
"""

from __future__ import annotations

from typing import Any

import orjson

from anvil_metrics.checks.jsonmode import CASE_BY_PROMPT
from anvil_metrics.sim.script import ScriptedReply, last_user_text

FAULTS: dict[str, tuple[str, ...]] = {
    "json": ("not_json", "fenced", "schema_violation", "wrong_value"),
}

# a wrong answer that still meets each case's schema
WRONG: dict[str, dict[str, Any]] = {
    "object_person": {"name": "Alice", "age": 31},
    "object_capitals": {"France": "Paris", "Japan": "Kyoto", "Kenya": "Nairobi"},
    "schema_order": {"drink": "coffee", "quantity": 3, "size": "large"},
    "schema_primes": {"primes": [2, 3, 5, 7, 9, 11, 13, 17, 19], "count": 9},
    "schema_reviews": {"reviews": [{"id": 1, "sentiment": "positive"},
                                   {"id": 2, "sentiment": "neutral"},
                                   {"id": 3, "sentiment": "neutral"}]},
}


def answer(data: dict[str, Any], faults: frozenset[str]) -> ScriptedReply | None:
    case = CASE_BY_PROMPT.get(last_user_text(data))
    if case is None:
        return None
    value: dict[str, Any] = dict(case.value)
    if "json:not_json" in faults:
        return ScriptedReply(content="Sure! The answer is: " + ", ".join(
            f"{k} {v}" for k, v in value.items()))
    if "json:schema_violation" in faults:
        value.pop(list(value)[-1])
    elif "json:wrong_value" in faults:
        value = WRONG[case.id]
    text = orjson.dumps(value).decode()
    if "json:fenced" in faults:
        text = f"```json\n{text}\n```"
    return ScriptedReply(content=text)
