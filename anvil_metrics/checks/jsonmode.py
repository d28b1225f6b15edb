"""The `json` suite: does the server honour `response_format` (`json_object`, `json_schema`)?

Why it exists: structured output is enforced by the server (guided decoding), not by the
model; a new engine version, a quantization or a flag can silently turn the constraint off,
and the model then writes prose or a Markdown block that looks right to a human and breaks
every client that parses it.

Each case asks a question whose answer is fixed, with a `response_format`, and passes only if

1. the content is JSON as it stands (surrounding whitespace allowed). A ```json fence is NOT
   tolerated: a server that enforces `response_format` cannot emit a backtick before the
   `{`, so a fence proves the constraint was not applied — the regression this suite exists
   to catch — even when the JSON inside happens to be right;
2. it validates against the case's schema with `jsonschema` (for `json_schema` cases the
   schema sent; for `json_object` cases, which send no schema, the one the question
   describes, kept here);
3. the values are the ones the question fixes (`jsonmatch.VALUES`: strings compared without
   case or surrounding spaces; numbers exactly, of the same type; lists in order).

The schemas keep to what every guided-decoding backend and OpenAI's `strict: true` accept
(type, properties, required, additionalProperties: false, enum, array items): a backend that
refuses `minItems` or `minimum` would make the suite measure schema-keyword coverage instead
of whether `response_format` works at all. Lengths and ranges are checked as values (3).

jsonschema (a core dependency) validates the answers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from anvil_metrics.checks.jsonmatch import VALUES, mismatch
from anvil_metrics.checks.results import SuiteResult
from anvil_metrics.checks.suite import CheckContext, Judgement, run_case, suite_result

SUITE = "json"
MAX_TOKENS = 2048  # room for a reasoning model's thinking before the JSON


@dataclass(frozen=True, slots=True)
class JsonCase:
    """One question: its prompt, the `response_format` sent, the schema the answer must meet
    and the value it must have (`value` is a complete right answer)."""

    id: str
    prompt: str
    format_type: str  # "json_object" | "json_schema"
    schema: Mapping[str, Any]
    value: Mapping[str, Any]
    schema_name: str = ""  # json_schema's `name`

    def response_format(self) -> dict[str, Any]:
        if self.format_type == "json_object":
            return {"type": "json_object"}
        return {"type": "json_schema", "json_schema": {
            "name": self.schema_name, "strict": True, "schema": dict(self.schema)}}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    """A strict object schema: every property required, no others (what `strict: true`
    demands of a schema)."""
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


CASES: tuple[JsonCase, ...] = (
    JsonCase(
        "object_person",
        "Return a JSON object with exactly two keys, \"name\" and \"age\", for a person "
        "named Alice who is 30 years old. \"age\" must be a whole number.",
        "json_object",
        {"type": "object", "properties": {"name": {"type": "string"},
                                          "age": {"type": "integer"}},
         "required": ["name", "age"]},
        {"name": "Alice", "age": 30},
    ),
    JsonCase(
        "object_capitals",
        "Return a JSON object that maps each of these countries to its capital city: "
        "France, Japan, Kenya. Use the country names exactly as written as the keys and "
        "the capital cities' English names as the values.",
        "json_object",
        {"type": "object", "properties": {k: {"type": "string"}
                                          for k in ("France", "Japan", "Kenya")},
         "required": ["France", "Japan", "Kenya"]},
        {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi"},
    ),
    JsonCase(
        "schema_order",
        "Extract the order from this customer message: \"Hi! Could I get three large "
        "teas, please?\"",
        "json_schema",
        _object({"drink": {"type": "string", "enum": ["coffee", "tea", "juice"]},
                 "quantity": {"type": "integer"},
                 "size": {"type": "string", "enum": ["small", "medium", "large"]}}),
        {"drink": "tea", "quantity": 3, "size": "large"},
        schema_name="order",
    ),
    JsonCase(
        "schema_primes",
        "List every prime number less than 20 in ascending order, and how many there are.",
        "json_schema",
        _object({"primes": {"type": "array", "items": {"type": "integer"}},
                 "count": {"type": "integer"}}),
        {"primes": [2, 3, 5, 7, 11, 13, 17, 19], "count": 8},
        schema_name="primes",
    ),
    JsonCase(
        "schema_reviews",
        "Classify the sentiment of each review, in the order given, with its number as the "
        "id. 1: \"Absolutely loved it, I would buy it again.\" 2: \"It broke after one day, "
        "a total waste of money.\" 3: \"The package arrived on a Tuesday.\"",
        "json_schema",
        _object({"reviews": {"type": "array", "items": _object({
            "id": {"type": "integer"},
            "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]}})}}),
        {"reviews": [{"id": 1, "sentiment": "positive"}, {"id": 2, "sentiment": "negative"},
                     {"id": 3, "sentiment": "neutral"}]},
        schema_name="reviews",
    ),
)
CASE_BY_PROMPT = {c.prompt: c for c in CASES}


def request_body(case: JsonCase) -> dict[str, Any]:
    system = "You answer in JSON only." if case.format_type == "json_object" else None
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": case.prompt})
    return {"messages": messages, "response_format": case.response_format(),
            "temperature": 0, "max_tokens": MAX_TOKENS}


# -- scoring (pure) ----------------------------------------------------------------------------


def parse_content(content: str) -> tuple[Any, str | None]:
    """(the JSON value, None) or (None, why the content is not JSON as it stands)."""
    text = content.strip()
    if not text:
        return None, "the content is empty"
    try:
        return orjson.loads(text), None
    except orjson.JSONDecodeError:
        pass
    if text.startswith("```"):
        return None, ("the content is a ``` fenced block, not bare JSON: the server did not "
                      "enforce response_format")
    return None, f"the content is not JSON: {text[:80]!r}"


def schema_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """The most relevant way `value` breaks `schema` (jsonschema's best match), else None."""
    import jsonschema  # here: ~0.1 s of imports only this suite pays

    validator_class = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top)"
    return f"schema violation at {where}: {error.message}"


def value_problem(expected: Any, got: Any) -> str | None:
    """Where `got` differs from the value the question fixes, None when it does not
    (`jsonmatch.VALUES`: strings without case and surrounding spaces, numbers of the same
    type, keys not in `expected` ignored: the schema decides whether they may be there)."""
    m = mismatch(expected, got, VALUES)
    if m is None:
        return None
    here = "".join(f"/{p}" for p in m.path) or "(top)"
    if m.kind == "missing":
        return f"{here}: missing"
    if m.kind == "not_object":
        return f"{here}: expected an object"
    if m.kind == "not_list":
        return (f"{here}: expected {orjson.dumps(m.expected).decode()}, got "
                f"{orjson.dumps(m.got).decode()}")
    return f"{here}: expected {m.expected!r}, got {m.got!r}"


def judge_content(case: JsonCase, content: str) -> Judgement:
    """The verdict on one answer's content: parses, validates, right values."""
    value, problem = parse_content(content)
    if problem is None:
        problem = schema_problem(value, case.schema) or value_problem(case.value, value)
    return Judgement(problem is None, content, problem)


# -- the suite ---------------------------------------------------------------------------------


def run_json(ctx: CheckContext) -> SuiteResult:
    started = time.monotonic()
    cases = []
    for case in CASES:
        def judge(case: JsonCase = case) -> Judgement:
            answer = ctx.client.chat(request_body(case))
            return judge_content(case, answer.content)
        expected = {"response_format": case.format_type, "value": case.value}
        cases.append(run_case(ctx, case.id, expected, judge))
    return suite_result(SUITE, cases, started)
