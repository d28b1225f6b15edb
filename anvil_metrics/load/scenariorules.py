"""A scenario's rules: what its keys may be beside one another, each written once.

Why apart from the table (`scenariofields.py`): a row there says what one key may be alone;
a rule here says what a key may be given the others (a planned size and `max_tokens`, a
shared prefix and the smallest planned size, a trace and a rate), and makes the objects a
run is planned from (`ConversationPlan`, `Mix`, `CancelPlan`, `TracePlan`). The table calls
each rule at its place in the order of checks, for a file and for the flags over it alike
(`scenario.scenario_with_flags`): a flag that breaks a rule is named by the error, not by
the rule. A rule reads the document (`data`, as given) and the fields checked so far (`v`:
each row's value under its key, and the `Scenario` fields made so far), and adds its own.
The first refusal is one `ScenarioError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

import orjson

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.headers import REDACTED, is_credential, problem
from anvil_metrics.load import loadspec
from anvil_metrics.load.agentread import is_agent_trace
from anvil_metrics.load.cancel import parse_cancel
from anvil_metrics.load.conversation import parse_conversation
from anvil_metrics.load.dataset import DatasetPlan
from anvil_metrics.load.energyplan import parse_energy
from anvil_metrics.load.loadspec import Doc
from anvil_metrics.load.mix import parse_mix
from anvil_metrics.load.optionvalues import window_of
from anvil_metrics.load.scenariofields import (
    FIELDS,
    TEXT_ENDPOINTS,
    TOP_KEYS,
    Timeouts,
    table_of,
)
from anvil_metrics.load.trace import TraceError, TracePlan
from anvil_metrics.prep.prompts import MAX_GROUP_SIZE, MIN_UNIQUE_TOKENS

# body fields that anvil sets and reports; extra_body may not silently change them
RESERVED_BODY_KEYS = ("model", "messages", "stream", "max_tokens", "max_completion_tokens",
                      "stream_options")


def _err(key: str, value: object, allowed: str, src: str | None) -> ScenarioError:
    return ScenarioError(key, value, allowed, source=src)


def distribution(data: Doc, v: Doc, src: str | None) -> None:
    """`context_distribution`: planned sizes that fit; none: one size that fills the
    context, less max_tokens."""
    max_tokens, max_context = v["max_tokens"], v["max_context_tokens"]
    dist: dict[int, int] = {}
    for k, n in v["context_distribution"].items():
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
                       f"{size + max_tokens} (max_tokens at most {max_context - size})", src)
        dist[size] = n
    v["context_distribution"] = dist or {
        max(1, min(v["context_tokens"], max_context) - max_tokens): 1}


def goodput(data: Doc, v: Doc, src: str | None) -> None:
    """`goodput`: criteria as text, kept as `parse_criteria` writes them back."""
    text = v["goodput"]
    if text is not None:
        from anvil_metrics.load.criteria import parse_criteria

        try:
            v["goodput"] = ",".join(c.text() for c in parse_criteria(text, "goodput"))
        except UsageError as e:
            raise _err("goodput", text, str(e).split(": ", 1)[-1], src) from None


def thinking(data: Doc, v: Doc, src: str | None) -> None:
    """`serve_flags.no_thinking`, the older spelling of thinking_mode = "off"."""
    if v["serve_flags.no_thinking"]:
        if v["thinking_mode"] == "on":
            raise _err("serve_flags.no_thinking", True, "false when thinking_mode = 'on'", src)
        v["thinking_mode"] = "off"


def shared_prefix_given(data: Doc, v: Doc, src: str | None) -> None:
    """[shared_prefix], needed by serve_flags.shared_prefix_burst and only there."""
    sp = table_of(data, "shared_prefix", src)
    if sp and not v["shared_prefix_burst"]:
        raise _err("shared_prefix", sp, "only with serve_flags.shared_prefix_burst = true", src)
    if v["shared_prefix_burst"] and "prefix_tokens" not in sp:
        raise _err("shared_prefix.prefix_tokens", None, "a token count (required with "
                   "serve_flags.shared_prefix_burst = true)", src)


def shared_prefix(data: Doc, v: Doc, src: str | None) -> None:
    """A shared prefix leaves each request tokens of its own, in groups of at most
    MAX_GROUP_SIZE; bursts send groups back to back, not at a rate."""
    v["shared_prefix_tokens"] = prefix = v["shared_prefix.prefix_tokens"]
    v["shared_group_size"] = group = v["shared_prefix.group_size"]
    if group is not None and group > MAX_GROUP_SIZE:
        raise _err("shared_prefix.group_size", group,
                   f"a whole number from 1 to {MAX_GROUP_SIZE}", src)
    if not v["shared_prefix_burst"]:
        return
    smallest = min(v["context_distribution"])
    if prefix + MIN_UNIQUE_TOKENS > smallest:
        raise _err("shared_prefix.prefix_tokens", prefix,
                   f"at most the smallest planned size ({smallest}) - {MIN_UNIQUE_TOKENS} "
                   f"= {smallest - MIN_UNIQUE_TOKENS}, so each request keeps some tokens "
                   "of its own", src)
    if v["arrivals"] is not None:
        raise _err("rate", v["arrivals"].rate_rps, "no rate with serve_flags."
                   "shared_prefix_burst = true (bursts send groups back to back)", src)


def conversation(data: Doc, v: Doc, src: str | None) -> None:
    """[conversation] (`conversation.py`): each turn's prompt is its history and a new
    message, so no context distribution or shared-prefix bursts beside it; its budget of
    conversations is the run's only one; the longest conversation must fit the context."""
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
    if plan.conversations is not None and (v["requests"] is not None
                                           or v["step_duration_s"] is not None):
        raise _err("conversation.conversations", plan.conversations, "no budget of "
                   "conversations beside one of requests or a sweep: give one", src)
    longest = plan.longest_tokens(v["max_tokens"])
    if longest > v["max_context_tokens"]:
        raise _err("conversation.turn_tokens", plan.turn_tokens,
                   f"sizes whose longest conversation fits max_context_tokens "
                   f"({v['max_context_tokens']}): system_prompt_tokens + prefix_tokens + "
                   f"{plan.max_turns} turns x (turn_tokens + max_tokens {v['max_tokens']}) "
                   f"= {longest} tokens", src)


def mix(data: Doc, v: Doc, src: str | None) -> None:
    """[[request_class]] and [models] (`mix.py`): each class's size and answer fit the
    context; classes shape single-turn requests, so none beside a conversation or bursts."""
    plan = parse_mix(data.get("request_class"), data.get("models"), v["context_seed"], src)
    v["mix"] = plan
    if plan is None or not plan.classes:
        return
    if v["conversation"] is not None:
        raise _err("request_class", data["request_class"], "no request classes with "
                   "[conversation] (a conversation's turns have one shape; [models] does "
                   "assign each conversation a model)", src)
    if v["shared_prefix_burst"]:
        raise _err("serve_flags.shared_prefix_burst", True, "false with request classes",
                   src)
    largest = max(v["context_distribution"])
    for i, c in enumerate(plan.classes):
        size = c.context_tokens or largest
        answer = c.max_tokens or v["max_tokens"]
        if size + answer > v["max_context_tokens"]:
            key = "context_tokens" if c.context_tokens else "max_tokens"
            raise _err(f"request_class[{i}].{key}", getattr(c, key) or answer,
                       f"a size whose prompt + max_tokens fits max_context_tokens "
                       f"({v['max_context_tokens']}): {size} + {answer} = {size + answer}",
                       src)


def cancel(data: Doc, v: Doc, src: str | None) -> None:
    """[cancel] (`cancel.py`): the fraction of requests closed on purpose, and when."""
    v["cancel"] = parse_cancel(data.get("cancel"), v["context_seed"], src)


def extra_body(data: Doc, v: Doc, src: str | None) -> None:
    """`request.extra_body`: JSON fields merged into every body, none that anvil sets."""
    extra = v["request.extra_body"]
    try:  # kept as the JSON the body will carry (a TOML date becomes its string): plain data
        extra = orjson.loads(orjson.dumps(extra))
    except orjson.JSONEncodeError as e:
        raise _err("request.extra_body", extra, f"a table of JSON fields ({e})", src) from None
    for k in extra:
        if k in RESERVED_BODY_KEYS:
            raise _err(f"request.extra_body.{k}", extra[k],
                       f"no key anvil sets itself ({sorted(RESERVED_BODY_KEYS)}); use the "
                       "scenario's own field or command-line flag", src)
    v["extra_body"] = dict(extra)


def endpoint(data: Doc, v: Doc, src: str | None) -> None:
    """`request.endpoint`: "completions" and "embeddings" post a text prompt, so nothing of
    a chat template: no system prompt, thinking switch, reasoning effort, conversation or
    request class that sets them; an embedding generates nothing, so no fixed output length
    nor cancellation after its first output. `conversation.previous_response_id` is the
    Responses API's; a fixed output length is not the Messages API's (`_messages_api`)."""
    kind = v["endpoint"]
    plan = v["conversation"]
    if plan is not None and plan.previous_response_id and kind != "responses":
        raise _err("conversation.previous_response_id", True, "false unless "
                   "request.endpoint = \"responses\" (only that API keeps a response)", src)
    if kind == "embeddings":
        if v["cancel"] is not None and v["cancel"].after == "decode":
            raise _err("cancel.after", "decode", "\"prefill\" or a time in ms with "
                       "request.endpoint = \"embeddings\" (nothing is decoded)", src)
        if v["fixed_output_tokens"]:
            raise _err("request.fixed_output_tokens", True, "false with request.endpoint = "
                       "\"embeddings\" (nothing is generated)", src)
    if kind == "messages":
        _messages_api(v, src)
    if v["prompt_ids"] and (kind not in TEXT_ENDPOINTS or v["shared_prefix_burst"]
                            or v["mix"] is not None):
        raise _err("request.prompt_ids", True, "false unless request.endpoint is "
                   "\"completions\" or \"embeddings\", with no shared-prefix bursts nor "
                   "request classes (token ids are a text prompt's)", src)
    if kind not in TEXT_ENDPOINTS:
        return
    chat_only = [("request.system_prompt", v["system_prompt"]),
                 ("serve_flags.reasoning_effort", v["reasoning_effort"]),
                 ("serve_flags.thinking_mode", None if v["thinking_mode"] == "default"
                  else v["thinking_mode"]),
                 ("conversation", plan and "a [conversation] table")]
    if v["mix"] is not None:
        chat_only += [(f"request_class[{i}].{k}", getattr(c, k)) for i, c in
                      enumerate(v["mix"].classes) for k in ("reasoning_effort", "thinking_mode")]
    for key, value in chat_only:
        if value is not None:
            raise _err(key, value, f"none with request.endpoint = \"{kind}\" (a text "
                       "prompt has no chat template)", src)


def _messages_api(v: Doc, src: str | None) -> None:
    """The Messages API (vLLM's, Anthropic's) has no `ignore_eos`: no fixed output length,
    neither the scenario's nor a fixed conversation history's nor a trace class's."""
    plan, mix = v["conversation"], v["mix"]
    fixed = [("request.fixed_output_tokens", True, "false") if v["fixed_output_tokens"]
             else None,
             ("conversation.history", "fixed", '"server"') if plan is not None
             and plan.history == "fixed" else None]
    fixed += [(f"request_class[{i}].trace", c.trace, "none") for i, c in
              enumerate(mix.classes if mix is not None else ()) if c.trace is not None]
    for key, value, allowed in filter(None, fixed):
        raise _err(key, value, f'{allowed} with request.endpoint = "messages" (the Messages '
                   "API has no ignore_eos: the model ends its answers)", src)


def inputs(data: Doc, v: Doc, src: str | None) -> None:
    """[trace] and [dataset] (`--trace`, `--dataset`): chat prompts from a file. A replay's
    arrivals, warm-ups and sizes are the trace's, so no rate, duration, sweep or warm-up
    beside it (`requests`, if given, replays only the first that many); neither beside what
    makes its own prompts (a conversation, shared-prefix bursts, a mix)."""
    v["trace"] = v["dataset"] = None
    for table in ("trace", "dataset"):
        if data.get(table) and v[f"{table}.path"] is None:
            raise _err(f"{table}.path", None, f"the file's path (required in [{table}])", src)
    path = v["trace.path"]
    agent = path is not None and _agent_trace(path, v["trace.format"])
    _agent_keys(data, agent, src)
    if path is not None:
        for key in ("duration", "rate", "rates", "steps", "warmup_requests"):
            if data.get(key) and not (agent and key in ("duration", "rate")):
                raise _err(key, data[key], "none with a trace: a replay's arrivals, warm-ups, "
                           "request count and sizes are the trace's (use trace.limit, "
                           "trace.speed)" if not agent else "none with agent jobs (a job's "
                           "requests are the trace's; --rate offers job starts, --duration "
                           "limits the run)", src)
        if v["conversation"] is not None or v["shared_prefix_burst"]:
            raise _err("trace.path", path, "none beside a [conversation] or shared-prefix "
                       "bursts: each makes the load itself", src)
        _chat_only("trace.path", path, v, src)
        window = v["trace.window"]
        wait = v["trace.max_tool_wait"]
        job_times = agent and "speed" in (data.get("trace") or {})
        if job_times and data.get("rate"):
            raise _err("trace.speed", v["trace.speed"], "none beside rate: the jobs start "
                       "at the trace's own times (trace.speed) or at --rate, not both", src)
        v["trace"] = TracePlan(path, v["trace.format"], float(v["trace.speed"]),
                               v["trace.limit"], v["trace.block_tokens"], v["trace.model"],
                               None if window is None else window_of(window), agent=agent,
                               jobs=v["trace.jobs"], tool_speed=float(v["trace.tool_speed"]),
                               max_tool_wait_s=None if wait is None else float(wait),
                               max_idle_s=float(v["trace.max_idle"]),
                               start_at=v["trace.start_at"],
                               start_seed=v["trace.start_seed"], job_times=job_times)
    path = v["dataset.path"]
    if path is not None:
        if v["trace"] is not None or v["shared_prefix_burst"]:
            raise _err("dataset.path", path, "none beside a trace or shared-prefix bursts: "
                       "those make their own prompts", src)
        _chat_only("dataset.path", path, v, src)
        v["dataset"] = DatasetPlan(path, v["dataset.format"])


# a request trace's keys an agent trace has no use for, and the agent replay's own
# (`speed` is both: agent jobs start at their recorded starts ÷ it, `TracePlan.job_times`)
_REQUEST_TRACE_KEYS = ("limit", "window", "model", "block_tokens")
_AGENT_KEYS = ("jobs", "tool_speed", "max_tool_wait", "max_idle", "start_at", "start_seed")


def _agent_trace(path: str, fmt: str | None) -> bool:
    """Whether the trace holds agent jobs (a missing file: not said here; its reading will)."""
    try:
        return is_agent_trace(path, fmt)
    except (UsageError, TraceError):
        return False


def _agent_keys(data: Doc, agent: bool, src: str | None) -> None:
    """An agent replay's keys only with agent jobs; a request trace's only without them."""
    table = data.get("trace") or {}
    for key in _REQUEST_TRACE_KEYS if agent else _AGENT_KEYS:
        if key in table:
            raise _err(f"trace.{key}", table[key], "none with agent jobs (use trace.jobs, "
                       "--jobs)" if agent else "none without a trace of agent jobs (weka, "
                       "otel, agent-jsonl)", src)


def _chat_only(key: str, path: str, v: Doc, src: str | None) -> None:
    """A trace's or a dataset's prompts are chat messages, each request's own: none beside
    another endpoint or a mix, which shape each request themselves."""
    if v["endpoint"] != "chat":
        raise _err(key, path, f'none unless request.endpoint = "chat" (not '
                   f'"{v["endpoint"]}"): the file\'s prompts are chat completions', src)
    if v["mix"] is not None:
        raise _err(key, path, "none beside [[request_class]] or [models]: they shape each "
                   "request, as the file does", src)


def meta(data: Doc, v: Doc, src: str | None) -> None:
    """[meta]: what was measured, each a string (gpus: a whole number >= 1; gpu_hour_price:
    USD > 0, only beside gpus; any left out: unknown), as given."""
    v["meta"] = dict(data.get("meta", {}))
    price = v["meta"].get("gpu_hour_price")
    if price is not None and v["meta"].get("gpus") is None:
        raise _err("meta.gpu_hour_price", price, "a price only beside meta.gpus (--gpus N): "
                   "$ per million tokens is price × gpus × hours ÷ tokens", src)


def headers(data: Doc, v: Doc, src: str | None) -> None:
    """[headers]: extra HTTP headers sent with every request (`headers.py`), name = text."""
    table = v["headers"]
    for k, value in table.items():
        wrong = problem(k, value)
        if wrong is not None:
            raise _err(f"headers.{k}", REDACTED if is_credential(k) else value, wrong, src)
    v["headers"] = {k: value.strip() for k, value in table.items()}


def timeouts(data: Doc, v: Doc, src: str | None) -> None:
    """[timeouts]: the four limits and the stuck threshold, in seconds (a whole number
    too)."""
    v["timeouts"] = Timeouts(**{f.name: float(v[f"timeouts.{f.name}"])
                                for f in fields(Timeouts)})


def energy(data: Doc, v: Doc, src: str | None) -> None:
    """[energy] (`energyplan.py`): the energy source, where, how often, an idle baseline."""
    v["energy"] = parse_energy(v, src)


def probe(data: Doc, v: Doc, src: str | None) -> None:
    """`probe_idle` only beside `probe_rate` (the idle baseline is the probe's)."""
    if "probe_idle" in data and v["probe_rate"] is None:
        raise _err("probe_idle", data["probe_idle"], "only beside probe_rate (--probe-rate "
                   "R): the idle baseline is the head-of-line probe's", src)


# (the document, the fields checked so far, its source): checks its keys, sets its fields
Rule = Callable[[Doc, Doc, str | None], None]
# Each rule, after the key it follows in the table's order: by then every key it reads is
# checked (the first bad value, alone or beside the others, is the one reported)
RULES_AFTER: dict[str, tuple[Rule, ...]] = {
    "context_distribution": (distribution,),
    "arrival_seed": (loadspec.load,),
    "goodput": (goodput,),
    "serve_flags.no_thinking": (thinking,),
    "serve_flags.shared_prefix_burst": (shared_prefix_given,),
    "shared_prefix.group_size": (shared_prefix,),
    "conversation": (conversation,),
    "models": (mix,),
    "cancel": (cancel,),
    "request.extra_body": (extra_body,),
    "request.prompt_ids": (endpoint,),
    "dataset.format": (inputs,),
    "meta.source_recipe": (meta,),
    "headers": (headers,),
    "timeouts.stuck_after_s": (timeouts,),  # the table's last key
    "cooldown": (loadspec.windows,),
    "energy.idle": (energy,),
    "probe_idle": (probe,),
}
assert set(RULES_AFTER) <= set(FIELDS), set(RULES_AFTER) - set(FIELDS)


def scenario_fields(data: Doc, source: str | None = None) -> Doc:
    """What a parsed TOML document holds, checked in the table's order: each key's value
    under its key, and `Scenario`'s fields (all but `source`) under theirs; ScenarioError on
    the first bad value."""
    for k in data:
        if k not in TOP_KEYS:
            raise _err(k, data[k], f"one of the keys {sorted(TOP_KEYS)}", source)
    v: Doc = {}
    for key, row in FIELDS.items():
        v[key] = value = row.read(data, v, source)
        if row.sets:
            v[row.sets] = value
        for rule in RULES_AFTER.get(key, ()):
            rule(data, v, source)
    return v
