"""Scenarios: what one run asks of the server, loaded from TOML and validated up front.

A scenario file mirrors the names of the `anvil-serving.benchmark/v1` run fields, so what a
user writes is what the result reports. Every value is checked before any load starts; a
bad one raises `ScenarioError` naming the field, the value and what is allowed.

    measurement_protocol = "smoke"        # -> benchmark.measurement_protocol
    concurrency = 2                       # Locust users (-u); --users overrides
    requests = 8                          # measured requests; --requests overrides
                                          # (default: the distribution's total if one is
                                          # given and no duration; else no budget)
    duration = "5m"                       # or run this long (measured load, after the
                                          # warm-ups); --duration overrides
    rate = 20.0                           # open loop: requests/s offered (default: closed
                                          # loop, `concurrency` streams back to back)
    arrival = "poisson"                   # "poisson" | "gamma" | "constant"
    burstiness = 1.0                      # gamma shape (1 = Poisson), as vLLM's bench
    arrival_seed = 0                      # the schedule's seed
    goodput = "ttft_ms<=2000"             # per-request criteria (goodput.py); --goodput
    warmup = "30s"                        # with a duration: requests started in its first
    cooldown = "10s"                      # / last this long stay out of the figures
    steps = [1, 4, 16]                    # a sweep: users per step (or rates = [1.0, 2.0]
    step_duration = "60s"                 # requests/s), each this long (steps.py)
    warmup_requests = 1                   # run first, recorded, left out of the figures
    max_tokens = 128
    context_tokens = 4096                 # the context window under test
    max_context_tokens = 4096             # its limit; planned + max_tokens must fit
    context_seed = 0

    [context_distribution]                # planned prompt tokens -> request count
    3072 = 8

    [serve_flags]                         # request-side switches, reported as given
    reasoning_effort = "low"              # omit for none
    thinking_mode = "default"             # "default" | "on" | "off"

    [shared_prefix]                       # only with serve_flags.shared_prefix_burst = true
    prefix_tokens = 2048                  # the shared text sized as a lone chat prompt (>= 64):
                                          # members share it minus the template's closing
                                          # tokens (~5), chat header included
    group_size = 8                        # requests per group (default: concurrency)

    [request]
    include_usage = true                  # stream_options.include_usage
    fixed_output_tokens = false           # ignore_eos + min_tokens = max_tokens
    extra_body = {}                       # merged into every request body

    [timeouts]                            # per request, seconds (defaults fit 393k prefills)
    connect_s = 30                        # TCP connect
    first_byte_s = 1800                   # each wait until the first output (prefill)
    idle_s = 300                          # silence between reads once streaming
    total_s = 7200                        # the whole request

    [conversation]                        # multi-turn: see conversation.py
    turns = 4
    turn_tokens = 256

    [meta]                                # what was measured; unknown stays null
    model = "..."                         # else --model, else the server's /v1/models

    [headers]                             # sent with every request (headers.py); --header
    X-Tenant = "team-a"                   # KEY=VALUE wins; credentials are never shown
"""

from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.errors import UsageError
from anvil_metrics.load.arrivals import ArrivalPlan
from anvil_metrics.load.cancel import CancelPlan
from anvil_metrics.load.conversation import ConversationPlan, dist_from_text
from anvil_metrics.load.dataset import DatasetPlan
from anvil_metrics.load.mix import Mix
from anvil_metrics.load.scenariofields import Timeouts, scenario_fields
from anvil_metrics.load.trace import TracePlan


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario. Sizes in tokens; `context_distribution` maps planned prompt
    tokens to a request count (its order is the order sizes are handed out)."""

    measurement_protocol: str
    concurrency: int = 1
    requests: int | None = None  # the request budget; None: none (a duration, or until stopped)
    warmup_requests: int = 0
    max_tokens: int = 256
    context_tokens: int = 4096
    max_context_tokens: int = 4096
    context_seed: int = 0
    context_distribution: dict[int, int] = field(default_factory=dict)
    reasoning_effort: str | None = None
    thinking_mode: str = "default"
    shared_prefix_burst: bool = False
    shared_prefix_tokens: int | None = None
    shared_group_size: int | None = None
    include_usage: bool = True
    fixed_output_tokens: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    endpoint: str = "chat"  # "chat": /v1/chat/completions; "completions": /v1/completions
    prompt_ids: bool = False  # a text endpoint's prompt as the server's token ids
    meta: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # sent with every request
    timeouts: Timeouts = field(default_factory=Timeouts)
    duration_s: float | None = None  # measured load time, after the warm-ups
    arrivals: ArrivalPlan | None = None  # open loop; None: closed loop
    goodput: str | None = None  # goodput criteria as text (`criteria.parse_criteria`)
    step_users: tuple[int, ...] | None = None  # a sweep of users, one per step
    step_rates: tuple[float, ...] | None = None  # a sweep of open-loop rates
    step_duration_s: float | None = None
    warmup_s: float | None = None  # with a duration: the first/last stretch left out of
    cooldown_s: float | None = None  # the figures (`--warmup`/`--cooldown`)
    conversation: ConversationPlan | None = None  # multi-turn (`conversation.py`)
    trace: TracePlan | None = None  # a replayed trace (`replay.py`; set by --trace)
    dataset: DatasetPlan | None = None  # prompts from a file (`dataset.py`; --dataset)
    mix: Mix | None = None  # request classes and models (`mix.py`)
    cancel: CancelPlan | None = None  # requests closed on purpose (`cancel.py`)
    source: str | None = None

    @property
    def load_mode(self) -> str:
        """"budget" (a count of requests, or of conversations, ends the run; a duration, if
        any, is a time limit),
        "duration", or "until_stopped" (the web UI's Stop, Ctrl-C)."""
        if self.requests is not None or (self.conversation is not None
                                         and self.conversation.conversations is not None):
            return "budget"
        return "duration" if self.duration_s is not None else "until_stopped"

    @property
    def no_thinking(self) -> bool:
        return self.thinking_mode == "off"

    def serve_flags(self) -> dict[str, Any]:
        return {
            "no_thinking": self.no_thinking,
            "reasoning_effort": self.reasoning_effort,
            "shared_prefix_burst": self.shared_prefix_burst,
            "thinking_mode": self.thinking_mode,
        }

    def shared_prefix(self, users: int | None = None) -> dict[str, int] | None:
        """The benchmark's `shared_prefix` field: `{prefix_tokens, group_size}` or None.
        Without a `group_size`, a group is as large as the run's users (default: the
        scenario's concurrency)."""
        if not self.shared_prefix_burst or self.shared_prefix_tokens is None:
            return None
        return {"prefix_tokens": self.shared_prefix_tokens,
                "group_size": self.shared_group_size or users or self.concurrency}

    def planned_sizes(self) -> list[int]:
        """The distribution expanded and shuffled with `context_seed` (so a run shorter
        than the distribution still mixes its sizes): request i gets sizes[i % len]."""
        out: list[int] = []
        for size, count in self.context_distribution.items():
            out.extend([size] * count)
        random.Random(self.context_seed).shuffle(out)
        return out


def scenario_from_dict(data: dict[str, Any], source: str | None = None) -> Scenario:
    """Validate a parsed TOML document into a `Scenario`; raise ScenarioError on the first
    bad field (the rules: `scenariofields`)."""
    return Scenario(**scenario_fields(data, source), source=source)


def scenario_to_dict(sc: Scenario) -> dict[str, Any]:
    """The TOML-shaped document `scenario_from_dict` reads back into an equal Scenario
    (`source` apart: pass it along). Plain data only: `context_distribution`'s keys are
    strings, as in TOML, and keep their order (the order sizes are handed out in)."""
    flags: dict[str, Any] = {"thinking_mode": sc.thinking_mode,
                             "shared_prefix_burst": sc.shared_prefix_burst}
    if sc.reasoning_effort is not None:
        flags["reasoning_effort"] = sc.reasoning_effort
    request: dict[str, Any] = {"include_usage": sc.include_usage, "endpoint": sc.endpoint,
                               "fixed_output_tokens": sc.fixed_output_tokens,
                               "extra_body": orjson.loads(orjson.dumps(sc.extra_body))}
    if sc.system_prompt is not None:
        request["system_prompt"] = sc.system_prompt
    if sc.prompt_ids:
        request["prompt_ids"] = True
    doc: dict[str, Any] = {
        "measurement_protocol": sc.measurement_protocol,
        "concurrency": sc.concurrency,
        "requests": sc.requests,  # None (no budget) only on the wire: TOML has no null
        "warmup_requests": sc.warmup_requests,
        "max_tokens": sc.max_tokens,
        "context_tokens": sc.context_tokens,
        "max_context_tokens": sc.max_context_tokens,
        "context_seed": sc.context_seed,
        "context_distribution": {str(k): v for k, v in sc.context_distribution.items()},
        "serve_flags": flags,
        "request": request,
        "meta": dict(sc.meta),
        "headers": dict(sc.headers),
        "timeouts": {f.name: getattr(sc.timeouts, f.name) for f in fields(Timeouts)},
    }
    if sc.duration_s is not None:
        doc["duration"] = sc.duration_s
    if sc.goodput is not None:
        doc["goodput"] = sc.goodput
    for key, value in (("warmup", sc.warmup_s), ("cooldown", sc.cooldown_s)):
        if value is not None:
            doc[key] = value
    if sc.step_duration_s is not None:  # a sweep: its plan and duration follow from it
        doc.pop("duration", None)
        doc["step_duration"] = sc.step_duration_s
        if sc.step_users is not None:
            doc["steps"] = list(sc.step_users)
        else:
            doc["rates"] = list(sc.step_rates or ())
            doc.pop("rate", None)
    if sc.arrivals is not None:
        doc.update(arrival=sc.arrivals.arrival, burstiness=sc.arrivals.burstiness,
                   arrival_seed=sc.arrivals.seed)
        if sc.step_rates is None:  # a rate sweep's rate is its steps'
            doc["rate"] = sc.arrivals.rate_rps
    if sc.conversation is not None:
        doc["conversation"] = sc.conversation.to_table()
        del doc["context_distribution"]  # the default one, which a conversation ignores
    if sc.mix is not None:  # its seed is context_seed's
        if sc.mix.classes:
            doc["request_class"] = [c.to_table() for c in sc.mix.classes]
        if sc.mix.models is not None:
            doc["models"] = sc.mix.models.to_table()
    if sc.cancel is not None:  # its seed is context_seed's
        doc["cancel"] = sc.cancel.to_table()
    if sc.shared_prefix_burst:
        sp: dict[str, Any] = {"prefix_tokens": sc.shared_prefix_tokens}
        if sc.shared_group_size is not None:
            sp["group_size"] = sc.shared_group_size
        doc["shared_prefix"] = sp
    return doc


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"scenario file {str(p)!r} does not exist; pass a .toml path") from None
    except OSError as e:
        raise UsageError(f"scenario file {str(p)!r} cannot be read: {e.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(
            f"{p}: not valid TOML ({e}); see scenarios/smoke.toml for the format") from None
    return scenario_from_dict(data, source=str(p))


def with_overrides(
    sc: Scenario,
    *,
    requests: int | None = None,
    concurrency: int | None = None,
    max_tokens: int | None = None,
    model: str | None = None,
    warmup_requests: int | None = None,
    duration_s: float | None = None,
    arrivals: ArrivalPlan | None = None,
    goodput: str | None = None,
) -> Scenario:
    """Apply command-line overrides (None: keep the scenario's), re-checking what they can
    break."""

    meta = dict(sc.meta)
    if model:
        meta["model"] = model
    new = replace(
        sc,
        requests=sc.requests if requests is None else requests,
        concurrency=sc.concurrency if concurrency is None else concurrency,
        max_tokens=sc.max_tokens if max_tokens is None else max_tokens,
        warmup_requests=sc.warmup_requests if warmup_requests is None else warmup_requests,
        duration_s=sc.duration_s if duration_s is None else duration_s,
        arrivals=sc.arrivals if arrivals is None else arrivals,
        goodput=sc.goodput if goodput is None else goodput,
        meta=meta,
    )
    if requests is not None and new.conversation is not None:  # --requests counts turns
        new = replace(new, conversation=replace(new.conversation, conversations=None))
    if new.arrivals is not None and new.shared_prefix_burst:
        raise UsageError(f"--rate is not allowed with {sc.source or 'the scenario'}: its "
                         "shared-prefix bursts send groups back to back, not at a rate")
    if max_tokens is not None and new.conversation is not None:
        longest = new.conversation.longest_tokens(new.max_tokens)
        if longest > new.max_context_tokens:
            raise UsageError(
                f"--max-tokens {max_tokens} is not allowed with {sc.source or 'the scenario'}: "
                f"its longest conversation would need {longest} tokens, over "
                f"max_context_tokens {new.max_context_tokens}")
    elif max_tokens is not None:
        for size in new.context_distribution:
            if size + new.max_tokens > new.max_context_tokens:
                raise UsageError(
                    f"--max-tokens {max_tokens} is not allowed with {sc.source or 'the scenario'}: "
                    f"planned size {size} + {max_tokens} exceeds max_context_tokens "
                    f"{new.max_context_tokens}; use at most {new.max_context_tokens - size}"
                )
    return new


def with_conversation(sc: Scenario, given: dict[str, Any]) -> Scenario:
    """`--conversation key=value,...` over the scenario's `[conversation]` table (none: a
    new one), checked as the file's own table is; a value `name:p1:p2` is a distribution
    (`conversation.dist_from_text`); `conversations=N` (a budget of conversations) replaces
    the scenario's request count."""
    doc = scenario_to_dict(sc)
    tables = {k: dist_from_text(v) if isinstance(v, str) else v for k, v in given.items()}
    doc["conversation"] = {**(doc.get("conversation") or {}), **tables}
    doc.pop("context_distribution", None)  # a turn's size is its history and turn_tokens
    if given.get("conversations") is not None:
        doc.pop("requests", None)
    flag = "--conversation " + ",".join(f"{k}={v}" for k, v in given.items())
    # checked under the flag's name: a bad value names the flag, not the file
    return replace(scenario_from_dict(doc, source=flag), source=sc.source)
