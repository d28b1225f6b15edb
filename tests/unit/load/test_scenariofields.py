"""A scenario file's fields: each bad one is named with its value and what is allowed, the
first in the rules' order; each kind of field keeps what it accepts; the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.scenariofields import TABLE_KEYS
from anvil_metrics.load.scenariorules import scenario_fields

BASE = {"measurement_protocol": "t", "max_tokens": 100, "max_context_tokens": 1000}


def refused(doc: dict) -> ScenarioError:
    with pytest.raises(ScenarioError) as ei:
        scenario_fields(doc, source="x.toml")
    return ei.value


@pytest.mark.parametrize(
    "patch,field",
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": "4"}, "concurrency"),
        ({"requests": -1}, "requests"),
        ({"max_tokens": True}, "max_tokens"),
        ({"bogus": 1}, "bogus"),
        ({"context_distribution": {"950": 1}}, "context_distribution.950"),
        ({"context_distribution": {"abc": 1}}, "context_distribution.abc"),
        ({"context_distribution": {"500": 0}}, "context_distribution.500"),
        ({"serve_flags": {"reasoning_effort": "max"}}, "serve_flags.reasoning_effort"),
        ({"serve_flags": {"thinking_mode": "maybe"}}, "serve_flags.thinking_mode"),
        ({"serve_flags": {"colour": 1}}, "serve_flags.colour"),
        ({"request": {"include_usage": "yes"}}, "request.include_usage"),
        ({"request": {"extra_body": 3}}, "request.extra_body"),
        ({"meta": {"gpu": 5}}, "meta.gpu"),
        ({"timeouts": {"idle_s": 0}}, "timeouts.idle_s"),
        ({"timeouts": {"network_s": 10}}, "timeouts.network_s"),
        ({"measurement_protocol": ""}, "measurement_protocol"),
        ({"request": {"endpoint": "rankings"}}, "request.endpoint"),
        ({"request": {"endpoint": "embeddings", "fixed_output_tokens": True}},
         "request.fixed_output_tokens"),
        ({"request": {"endpoint": "embeddings"}, "cancel": {"rate": 0.5, "after": "decode"}},
         "cancel.after"),
        ({"request": {"endpoint": "embeddings"}, "serve_flags": {"reasoning_effort": "low"}},
         "serve_flags.reasoning_effort"),
        ({"request": {"prompt_ids": True}}, "request.prompt_ids"),
        ({"request": {"endpoint": "messages", "prompt_ids": True}}, "request.prompt_ids"),
        ({"request": {"endpoint": "messages", "fixed_output_tokens": True}},
         "request.fixed_output_tokens"),
        ({"request": {"endpoint": "messages"},
          "conversation": {"turns": 2, "turn_tokens": 8, "history": "fixed"}},
         "conversation.history"),
        ({"request": {"endpoint": "messages"},
          "conversation": {"turns": 2, "turn_tokens": 8, "previous_response_id": True}},
         "conversation.previous_response_id"),
        ({"request": {"endpoint": "completions", "prompt_ids": 1}}, "request.prompt_ids"),
        ({"conversation": {"turns": 2, "turn_tokens": 8, "previous_response_id": True}},
         "conversation.previous_response_id"),
        ({"request": {"endpoint": "responses"},
          "conversation": {"turns": 2, "turn_tokens": 8, "previous_response_id": "yes"}},
         "conversation.previous_response_id"),
    ],
)
def test_bad_fields_are_named(patch: dict, field: str) -> None:
    e = refused({**BASE, **patch})
    msg = str(e)
    assert e.field == field
    assert msg.startswith("x.toml: ") and field in msg and "\n" not in msg


def test_plan_exceeding_context_is_refused() -> None:
    with pytest.raises(ScenarioError, match=r"950 \+ 100 = 1050"):
        scenario_fields({**BASE, "context_distribution": {"950": 2}})


def test_extra_body_cannot_change_what_anvil_reports() -> None:
    e = refused({**BASE, "request": {"extra_body": {"max_tokens": 5}}})
    assert e.field == "request.extra_body.max_tokens"
    assert "no key anvil sets itself" in str(e)


@pytest.mark.parametrize("patch,line", [
    ({"concurrency": 0}, "x.toml: concurrency = 0 is not allowed; use a whole number >= 1"),
    ({"context_seed": -1}, "x.toml: context_seed = -1 is not allowed; use a whole number >= 0"),
    ({"serve_flags": {"no_thinking": 1}},
     "x.toml: serve_flags.no_thinking = 1 is not allowed; use true or false"),
    ({"serve_flags": {"reasoning_effort": "max"}}, "x.toml: serve_flags.reasoning_effort = "
     "'max' is not allowed; use one of ('low', 'medium', 'high')"),
    ({"serve_flags": {"thinking_mode": None}}, "x.toml: serve_flags.thinking_mode = None is "
     "not allowed; use one of ('default', 'on', 'off')"),
    ({"measurement_protocol": " "},
     "x.toml: measurement_protocol = ' ' is not allowed; use a non-empty string"),
    ({"request": {"system_prompt": 3}},
     "x.toml: request.system_prompt = 3 is not allowed; use a string"),
    ({"timeouts": {"total_s": float("inf")}}, "x.toml: timeouts.total_s = inf is not "
     "allowed; use a finite number of seconds > 0"),
])
def test_each_kind_says_what_it_allows(patch: dict, line: str) -> None:
    assert str(refused({**BASE, **patch})) == line


def test_the_first_bad_field_in_the_rules_order_is_the_one_named() -> None:
    # in the file's order the timeouts come first; in the rules' order concurrency does
    doc = {"timeouts": {"total_s": 0, "idle_s": 0}, **BASE, "concurrency": 0}
    assert refused(doc).field == "concurrency"
    del doc["concurrency"]
    assert refused(doc).field == "timeouts.idle_s"  # connect_s, first_byte_s, idle_s, total_s


def test_what_each_kind_accepts_is_kept() -> None:
    v = scenario_fields({**BASE, "context_tokens": 800, "serve_flags": {"no_thinking": True},
                         "timeouts": {"idle_s": 5}, "request": {"system_prompt": "be brief"},
                         "meta": {"gpu": "H100", "model": None}})
    assert v["timeouts"].idle_s == 5.0 and isinstance(v["timeouts"].idle_s, float)
    assert v["timeouts"].total_s == 7200.0  # a default
    assert v["thinking_mode"] == "off" and "no_thinking" not in v
    assert v["system_prompt"] == "be brief" and v["meta"] == {"gpu": "H100", "model": None}
    assert v["context_distribution"] == {700: 1}  # min(800, 1000) - max_tokens
    assert "source" not in v


def test_max_context_tokens_defaults_to_context_tokens() -> None:
    v = scenario_fields({"measurement_protocol": "t", "context_tokens": 2048})
    assert v["max_context_tokens"] == 2048
    e = refused({"measurement_protocol": "t", "context_tokens": 2048,
                 "context_distribution": {"2000": 1}})
    assert "max_context_tokens (2048)" in str(e)


def test_no_thinking_contradicts_thinking_on() -> None:
    e = refused({**BASE, "serve_flags": {"no_thinking": True, "thinking_mode": "on"}})
    assert e.field == "serve_flags.no_thinking"


def test_every_key_a_table_allows_is_checked() -> None:
    """A key allowed but read by no rule would be silently ignored: a value of the wrong
    type is refused, by its name, for each (shared_prefix: test_scenario's own test)."""
    tables = TABLE_KEYS
    assert set(tables) == {"serve_flags", "shared_prefix", "request", "meta", "timeouts",
                           "trace", "dataset", "energy"}
    for table, keys in tables.items():
        for key in sorted(keys) if table != "shared_prefix" else ():
            assert refused({**BASE, table: {key: []}}).field == f"{table}.{key}"


def test_the_headers_table_is_checked_and_a_credential_never_shown() -> None:
    v = scenario_fields({**BASE, "headers": {"X-Tenant": " a ", "X-Api-Key": "sk-9"}})
    assert v["headers"] == {"X-Tenant": "a", "X-Api-Key": "sk-9"}
    assert scenario_fields(BASE)["headers"] == {}
    e = refused({**BASE, "headers": {"Host": "h"}})
    assert e.field == "headers.Host" and "anvil writes itself" in str(e)
    e = refused({**BASE, "headers": {"X-Api-Key": "sk-9\nX-B: 1"}})
    assert e.field == "headers.X-Api-Key" and "sk-9" not in str(e), str(e)
    assert refused({**BASE, "headers": {"X-N": 3}}).field == "headers.X-N"
    assert refused({**BASE, "headers": "X-N=3"}).field == "headers"


def scenario_table() -> str:
    """The README's table of a scenario's keys: each row of the field table, what it may be
    alone, its default as TOML writes it, and the flags that set it (or a key inside it)."""
    from anvil_metrics.load.scenariofields import FIELDS, FLAGS

    def toml(v: object) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, int):
            return str(v)  # as TOML writes it: 16777216, not 1.67772e+07
        if isinstance(v, float):
            return format(v, "g")
        return ""

    lines = ["| key | what it may be | default | flag |", "|---|---|---|---|"]
    for key, row in FIELDS.items():
        flags = [f.name for f in FLAGS if f.key == key or f.key.startswith(key + ".")]
        if any(f.short for f in FLAGS if f.name in flags):
            flags += [f.short for f in FLAGS if f.name in flags and f.short]
        default = ("required" if row.required else "`context_tokens`" if callable(row.default)
                   else f"`{toml(row.default)}`" if toml(row.default) else "")
        lines.append(f"| `{key}` | {row.kind.allowed} | {default} | "
                     f"{', '.join(f'`{f}`' for f in flags)} |")
    return "\n".join(lines) + "\n"


def test_the_readmes_table_is_the_field_table() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    assert scenario_table() in readme, "README's scenario table, as the field table makes it:\n" \
        + scenario_table()
