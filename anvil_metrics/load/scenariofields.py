"""A scenario file's fields, checked: what each may be, in the order they are checked.

Why its own module: `scenario.py` says what a scenario is and how it is read, written and
overridden; this says what its file may hold. Each plain value is one row of `_RULES` (its
kind, its default, the least or the values allowed), checked by one loop; the keys that
depend on one another (the distribution and max_tokens, a sweep and a budget, a shared
prefix and the smallest planned size) are one function each, at their place in the order.
The first bad value raises `ScenarioError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import orjson

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.headers import REDACTED, is_credential, problem
from anvil_metrics.load.cancel import parse_cancel
from anvil_metrics.load.conversation import parse_conversation
from anvil_metrics.load.loadspec import arrivals_of, duration_of, steps_of
from anvil_metrics.load.mix import REASONING_EFFORTS, THINKING_MODES, parse_mix
from anvil_metrics.prep.prompts import MAX_GROUP_SIZE, MIN_UNIQUE_TOKENS

# what a run's requests are posted to (`body.py`), under the API path; which of them answer
# with a stream (an embedding is one JSON answer); which take the prompt as text, no template
ENDPOINT_PATHS = {"chat": "/chat/completions", "completions": "/completions",
                  "responses": "/responses", "embeddings": "/embeddings"}
ENDPOINTS = tuple(ENDPOINT_PATHS)
STREAMED_ENDPOINTS = ("chat", "completions", "responses")
TEXT_ENDPOINTS = ("completions", "embeddings")

META_KEYS = ("model", "engine", "gpu", "tier", "manifest", "source_recipe")

_TOP_KEYS = {
    "measurement_protocol",
    "concurrency",
    "requests",
    "warmup_requests",
    "max_tokens",
    "context_tokens",
    "max_context_tokens",
    "context_seed",
    "context_distribution",
    "serve_flags",
    "request",
    "meta",
    "headers",
    "timeouts",
    "shared_prefix",
    "duration",
    "rate",
    "arrival",
    "burstiness",
    "arrival_seed",
    "goodput",
    "steps",
    "rates",
    "step_duration",
    "warmup",
    "cooldown",
    "conversation",
    "request_class",
    "models",
    "cancel",
}
# the chat header and the group's head line alone are ~10-20 tokens: a shared prefix
# shorter than this would not be what the run reports
MIN_SHARED_PREFIX_TOKENS = 64
# body fields that anvil sets and reports; extra_body may not silently change them
_RESERVED_BODY_KEYS = {"model", "messages", "stream", "max_tokens", "max_completion_tokens",
                       "stream_options"}


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Client timeouts, per request. The defaults fit a 393k-token prefill, which can take
    minutes: `first_byte_s` bounds each wait from the request's write until the stream's
    first output (headers, a role-only chunk and the prefill), `idle_s` each silence
    between two reads after that, `total_s` the whole request. A request that
    overruns one fails with kind `timeout` in the phase it was in."""

    connect_s: float = 30.0
    first_byte_s: float = 1800.0
    idle_s: float = 300.0
    total_s: float = 7200.0


# the tables' keys (None: any key; the distribution's keys are token counts)
_TABLE_KEYS: dict[str, set[str] | None] = {
    "context_distribution": None,
    "serve_flags": {"reasoning_effort", "thinking_mode", "no_thinking", "shared_prefix_burst"},
    "shared_prefix": {"prefix_tokens", "group_size"},
    "request": {"include_usage", "fixed_output_tokens", "extra_body", "system_prompt",
                "endpoint", "prompt_ids"},
    "meta": set(META_KEYS),
    "headers": None,
    "timeouts": {f.name for f in fields(Timeouts)},
}


def _err(field_name: str, value: Any, allowed: str, source: str | None) -> ScenarioError:
    return ScenarioError(field_name, value, allowed, source=source)


def _table(d: dict, key: str, allowed_keys: set[str] | None, src: str | None) -> dict:
    v = d.get(key, {})
    if not isinstance(v, dict):
        raise _err(key, v, "a table", src)
    if allowed_keys is not None:
        for k in v:
            if k not in allowed_keys:
                raise _err(f"{key}.{k}", v[k], f"one of the keys {sorted(allowed_keys)}", src)
    return v


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float)


# A field's kind -> (does it accept a value, what it allows, in words)
_KINDS: dict[str, tuple[Callable[[_Field, Any], bool], Callable[[_Field], str]]] = {
    "whole": (lambda f, v: _number(v) and isinstance(v, int) and v >= f.minimum,
              lambda f: f"a whole number >= {f.minimum}"),
    "flag": (lambda f, v: isinstance(v, bool), lambda f: "true or false"),
    "choice": (lambda f, v: v in f.choices or (v is None and f.default is None),
               lambda f: f"one of {f.choices}"),
    "name": (lambda f, v: isinstance(v, str) and bool(v.strip()),
             lambda f: "a non-empty string"),
    "text": (lambda f, v: v is None or isinstance(v, str), lambda f: "a string"),
    "seconds": (lambda f, v: _number(v) and math.isfinite(v) and v > 0,
                lambda f: "a finite number of seconds > 0"),
}


@dataclass(frozen=True, slots=True)
class _Field:
    """One plain value of the file: where it is, its kind (`_KINDS`), its default, the
    least or the values it may take; `Scenario`'s field named as the key's last part
    keeps it."""

    key: str  # "max_tokens", or "table.key" ("request.include_usage")
    kind: str
    default: Any = None  # when the file leaves it out; a function: of the fields before it
    minimum: int = 0  # "whole": the least allowed
    choices: tuple[str, ...] = ()  # "choice": the values allowed (None too if the default)

    def read(self, data: dict[str, Any], v: dict[str, Any], src: str | None) -> Any:
        """The checked value in `data` (`v`: the fields read so far, for a default)."""
        table, _, key = self.key.rpartition(".")
        d = _table(data, table, _TABLE_KEYS[table], src) if table else data
        value = d.get(key, self.default(v) if callable(self.default) else self.default)
        accepts, allowed = _KINDS[self.kind]
        if not accepts(self, value):
            raise _err(self.key, value, allowed(self), src)
        return value


def _distribution(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """`context_distribution`: planned sizes that fit; none: one size that fills the
    context, less max_tokens."""
    max_tokens, max_context = v["max_tokens"], v["max_context_tokens"]
    dist: dict[int, int] = {}
    for k, n in _table(data, "context_distribution", None, src).items():
        where = f"context_distribution.{k}"
        try:
            size = int(k)
        except (TypeError, ValueError):
            raise _err(where, n, "keys that are token counts", src) from None
        if size < 1:
            raise _err(where, n, "keys that are token counts >= 1", src)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise _err(where, n, "a request count >= 1", src)
        if size + max_tokens > max_context:
            raise _err(where, n, f"planned sizes with size + max_tokens ({max_tokens}) <= "
                       f"max_context_tokens ({max_context}); {size} + {max_tokens} = "
                       f"{size + max_tokens}", src)
        dist[size] = n
    v["context_distribution"] = dist or {
        max(1, min(v["context_tokens"], max_context) - max_tokens): 1}


def _load(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """The load's keys (`loadspec`): a request budget, a duration, a rate, a sweep."""
    duration = duration_of(data.get("duration"), src) if "duration" in data else None
    requests = None  # a None in the document: the wire's "no budget"
    if data.get("requests") is not None or (
            "requests" not in data and data.get("context_distribution") and duration is None):
        requests = _Field("requests", "whole", sum(v["context_distribution"].values()),
                          minimum=1).read(data, v, src)
    step_users, step_rates, step_s = steps_of(data, src)
    if step_rates is not None:  # a rate sweep's plan: the mean rate; each step has its own
        data = {**data, "rate": sum(step_rates) / len(step_rates)}
    v["arrivals"] = arrivals_of(data, src)
    if step_s is not None:
        if data.get("requests") is not None or "duration" in data:
            key = "requests" if data.get("requests") is not None else "duration"
            raise _err(key, data[key], "no request count or duration with steps (a sweep "
                       "lasts its steps × step_duration)", src)
        requests, duration = None, step_s * len(step_users or step_rates or ())
    v.update(requests=requests, duration_s=duration, step_users=step_users,
             step_rates=step_rates, step_duration_s=step_s)


def _goodput(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """`goodput`: criteria as text, kept as `parse_criteria` writes them back."""
    goodput = data.get("goodput")
    if goodput is not None:
        from anvil_metrics.load.criteria import parse_criteria

        if not isinstance(goodput, str):
            raise _err("goodput", goodput, 'criteria as text, e.g. "ttft_ms<=2000"', src)
        try:
            goodput = ",".join(c.text() for c in parse_criteria(goodput, "goodput"))
        except UsageError as e:
            raise _err("goodput", goodput, str(e).split(": ", 1)[-1], src) from None
    v["goodput"] = goodput


def _thinking(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """`serve_flags.no_thinking`, the older spelling of thinking_mode = "off"."""
    if v.pop("no_thinking"):
        if v["thinking_mode"] == "on":
            raise _err("serve_flags.no_thinking", True, "false when thinking_mode = 'on'", src)
        v["thinking_mode"] = "off"


def _shared_prefix(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """[shared_prefix], needed by serve_flags.shared_prefix_burst and only there: a prefix
    that leaves each request tokens of its own, groups of at most MAX_GROUP_SIZE."""
    sp = _table(data, "shared_prefix", _TABLE_KEYS["shared_prefix"], src)
    shared = v["shared_prefix_burst"]
    v["shared_prefix_tokens"] = v["shared_group_size"] = None
    if sp and not shared:
        raise _err("shared_prefix", sp, "only with serve_flags.shared_prefix_burst = true", src)
    if shared:
        if "prefix_tokens" not in sp:
            raise _err("shared_prefix.prefix_tokens", None, "a token count (required with "
                       "serve_flags.shared_prefix_burst = true)", src)
        prefix = _Field("shared_prefix.prefix_tokens", "whole",
                        minimum=MIN_SHARED_PREFIX_TOKENS).read(data, v, src)
        if "group_size" in sp:
            group = _Field("shared_prefix.group_size", "whole", minimum=1).read(data, v, src)
            if group > MAX_GROUP_SIZE:
                raise _err("shared_prefix.group_size", group,
                           f"a whole number from 1 to {MAX_GROUP_SIZE}", src)
            v["shared_group_size"] = group
        smallest = min(v["context_distribution"])
        if prefix + MIN_UNIQUE_TOKENS > smallest:
            raise _err("shared_prefix.prefix_tokens", prefix,
                       f"at most the smallest planned size ({smallest}) - {MIN_UNIQUE_TOKENS} "
                       f"= {smallest - MIN_UNIQUE_TOKENS}, so each request keeps some tokens "
                       "of its own", src)
        v["shared_prefix_tokens"] = prefix
        if v["arrivals"] is not None:
            rate = data.get("rate") if v["step_rates"] is None else (
                sum(v["step_rates"]) / len(v["step_rates"]))
            raise _err("rate", rate, "no rate with serve_flags.shared_prefix_burst = true "
                       "(bursts send groups back to back)", src)


def _conversation(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """[conversation] (`conversation.py`): each turn's prompt is its history and a new
    message, so no context distribution or shared-prefix bursts beside it, and the longest
    conversation must fit the context."""
    plan = parse_conversation(data.get("conversation"), src)
    v["conversation"] = plan
    if plan is None:
        return
    if data.get("context_distribution"):
        raise _err("context_distribution", data["context_distribution"], "none with "
                   "[conversation] (a turn's size is its history plus turn_tokens)", src)
    if v["shared_prefix_burst"]:
        raise _err("serve_flags.shared_prefix_burst", True, "false with [conversation] "
                   "(conversations share their own history; system_prompt_tokens is "
                   "the prefix all of them share)", src)
    if plan.conversations is not None and v["requests"] is not None:
        raise _err("conversation.conversations", plan.conversations, "no budget of "
                   f"conversations beside one of requests ({v['requests']}): give one", src)
    longest = plan.longest_tokens(v["max_tokens"])
    if longest > v["max_context_tokens"]:
        raise _err("conversation.turn_tokens", plan.turn_tokens,
                   f"sizes whose longest conversation fits max_context_tokens "
                   f"({v['max_context_tokens']}): system_prompt_tokens + prefix_tokens + "
                   f"{plan.max_turns} turns x (turn_tokens + max_tokens {v['max_tokens']}) "
                   f"= {longest}", src)


def _mix(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """[[request_class]] and [models] (`mix.py`): each class's size and answer fit the
    context; classes shape single-turn requests, so none beside a conversation or bursts."""
    mix = parse_mix(data.get("request_class"), data.get("models"), v["context_seed"], src)
    v["mix"] = mix
    if mix is None or not mix.classes:
        return
    if v["conversation"] is not None:
        raise _err("request_class", data["request_class"], "no request classes with "
                   "[conversation] (a conversation's turns have one shape; [models] does "
                   "assign each conversation a model)", src)
    if v["shared_prefix_burst"]:
        raise _err("serve_flags.shared_prefix_burst", True, "false with request classes",
                   src)
    largest = max(v["context_distribution"])
    for i, c in enumerate(mix.classes):
        size = c.context_tokens or largest
        answer = c.max_tokens or v["max_tokens"]
        if size + answer > v["max_context_tokens"]:
            key = "context_tokens" if c.context_tokens else "max_tokens"
            raise _err(f"request_class[{i}].{key}", getattr(c, key) or answer,
                       f"a size whose prompt + max_tokens fits max_context_tokens "
                       f"({v['max_context_tokens']}): {size} + {answer} = {size + answer}",
                       src)


def _cancel(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """[cancel] (`cancel.py`): the fraction of requests closed on purpose, and when."""
    v["cancel"] = parse_cancel(data.get("cancel"), v["context_seed"], src)


def _endpoint(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """`request.endpoint`: "completions" and "embeddings" post a text prompt, so nothing of
    a chat template: no system prompt, thinking switch, reasoning effort, conversation or
    request class that sets them; an embedding generates nothing, so no fixed output length
    nor cancellation after its first output. `conversation.previous_response_id` is the
    Responses API's."""
    endpoint = v["endpoint"]
    conversation = v["conversation"]
    if conversation is not None and conversation.previous_response_id and (
            endpoint != "responses"):
        raise _err("conversation.previous_response_id", True, "false unless "
                   "request.endpoint = \"responses\" (only that API keeps a response)", src)
    if endpoint == "embeddings":
        _embeddings(v, src)
    if v["prompt_ids"] and (endpoint not in TEXT_ENDPOINTS or v["shared_prefix_burst"]
                            or v["mix"] is not None):
        raise _err("request.prompt_ids", True, "false unless request.endpoint is "
                   "\"completions\" or \"embeddings\", with no shared-prefix bursts nor "
                   "request classes (token ids are a text prompt's)", src)
    if endpoint not in TEXT_ENDPOINTS:
        return
    chat_only = [("request.system_prompt", v["system_prompt"]),
                 ("serve_flags.reasoning_effort", v["reasoning_effort"]),
                 ("serve_flags.thinking_mode", None if v["thinking_mode"] == "default"
                  else v["thinking_mode"]),
                 ("conversation", v["conversation"] and "a [conversation] table")]
    if v["mix"] is not None:
        chat_only += [(f"request_class[{i}].{k}", getattr(c, k)) for i, c in
                      enumerate(v["mix"].classes) for k in ("reasoning_effort", "thinking_mode")]
    for key, value in chat_only:
        if value is not None:
            raise _err(key, value, f"none with request.endpoint = \"{endpoint}\" (a text "
                       "prompt has no chat template)", src)


def _embeddings(v: dict[str, Any], src: str | None) -> None:
    """An embedding is one answer with no output: nothing may ask for output tokens."""
    cancel = v["cancel"]
    if cancel is not None and cancel.after == "decode":
        raise _err("cancel.after", "decode", "\"prefill\" or a time in ms with "
                   "request.endpoint = \"embeddings\" (nothing is decoded)", src)
    if v["fixed_output_tokens"]:
        raise _err("request.fixed_output_tokens", True, "false with request.endpoint = "
                   "\"embeddings\" (nothing is generated)", src)


def _extra_body(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """`request.extra_body`: JSON fields merged into every body, none that anvil sets."""
    extra = _table(data, "request", _TABLE_KEYS["request"], src).get("extra_body", {})
    if not isinstance(extra, dict):
        raise _err("request.extra_body", extra, "a table of JSON fields", src)
    try:  # kept as the JSON the body will carry (a TOML date becomes its string): plain data
        extra = orjson.loads(orjson.dumps(extra))
    except orjson.JSONEncodeError as e:
        raise _err("request.extra_body", extra, f"a table of JSON fields ({e})", src) from None
    for k in extra:
        if k in _RESERVED_BODY_KEYS:
            raise _err(f"request.extra_body.{k}", extra[k],
                       f"no key anvil sets itself ({sorted(_RESERVED_BODY_KEYS)}); use the "
                       "scenario's own field or command-line flag", src)
    v["extra_body"] = dict(extra)


def _meta(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """[meta]: what was measured, each a string (or left out: unknown)."""
    meta = _table(data, "meta", _TABLE_KEYS["meta"], src)
    for k, value in meta.items():
        if value is not None and not isinstance(value, str):
            raise _err(f"meta.{k}", value, "a string", src)
    v["meta"] = dict(meta)


def _headers(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """[headers]: extra HTTP headers sent with every request (`headers.py`), name = text."""
    table = _table(data, "headers", None, src)
    for k, value in table.items():
        wrong = problem(k, value)
        if wrong is not None:
            raise _err(f"headers.{k}", REDACTED if is_credential(k) else value, wrong, src)
    v["headers"] = {k: value.strip() for k, value in table.items()}


def _timeouts(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """[timeouts]: the four limits, in seconds (a whole number too)."""
    v["timeouts"] = Timeouts(**{f.name: float(v.pop(f.name)) for f in fields(Timeouts)})


def _windows(data: dict[str, Any], v: dict[str, Any], src: str | None) -> None:
    """`warmup`/`cooldown`: with a duration, the stretches left out of the figures."""
    for key in ("warmup", "cooldown"):
        v[f"{key}_s"] = duration_of(data[key], src, key) if key in data else None


# (the document, the fields checked so far, its source): checks its keys, sets its fields
_Check = Callable[[dict[str, Any], dict[str, Any], str | None], None]
# The file's fields in the order they are checked (the first bad one is the one reported):
# a plain value is a `_Field`; a `_Check` the keys that depend on one another.
_RULES: tuple[_Field | _Check, ...] = (
    _Field("measurement_protocol", "name"),
    _Field("max_tokens", "whole", 256, minimum=1),
    _Field("context_tokens", "whole", 4096, minimum=1),
    _Field("max_context_tokens", "whole", lambda v: v["context_tokens"], minimum=1),
    _Field("context_seed", "whole", 0),
    _distribution,
    _load,
    _goodput,
    _Field("warmup_requests", "whole", 0),
    _Field("concurrency", "whole", 1, minimum=1),
    _Field("serve_flags.reasoning_effort", "choice", choices=REASONING_EFFORTS),
    _Field("serve_flags.thinking_mode", "choice", "default", choices=THINKING_MODES),
    _Field("serve_flags.no_thinking", "flag", False),
    _thinking,
    _Field("serve_flags.shared_prefix_burst", "flag", False),
    _shared_prefix,
    _conversation,
    _mix,
    _cancel,
    _Field("request.include_usage", "flag", True),
    _Field("request.fixed_output_tokens", "flag", False),
    _extra_body,
    _Field("request.system_prompt", "text"),
    _Field("request.endpoint", "choice", "chat", choices=ENDPOINTS),
    _Field("request.prompt_ids", "flag", False),
    _endpoint,
    _meta,
    _headers,
    *(_Field(f"timeouts.{f.name}", "seconds", f.default) for f in fields(Timeouts)),
    _timeouts,
    _windows,
)


def scenario_fields(data: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """`Scenario`'s fields (all but `source`) from a parsed TOML document; ScenarioError on
    the first bad field, in the order of `_RULES`."""
    for k in data:
        if k not in _TOP_KEYS:
            raise _err(k, data[k], f"one of the keys {sorted(_TOP_KEYS)}", source)
    v: dict[str, Any] = {}  # the fields checked so far
    for rule in _RULES:
        if isinstance(rule, _Field):
            v[rule.key.rpartition(".")[2]] = rule.read(data, v, source)
        else:
            rule(data, v, source)
    return v
