"""Scenarios: what one run asks of the server, loaded from TOML, with the flags over it,
and validated up front.

A scenario file mirrors the names of the `anvil-serving.benchmark/v1` run fields, so what a
user writes is what the result reports. Its keys, their kinds, defaults and flags are one
table (`scenariofields.py`); the flags of `anvil run` and Locust become keys of the same
document, over the file's (`scenario_with_flags`), checked by the same rules. Every value
is checked before any load starts; a bad one is one line naming the key (or the flag that
gave it), the value and what is allowed.

    measurement_protocol = "smoke"        # -> benchmark.measurement_protocol
    concurrency = 2                       # Locust users (-u); --users overrides
    prefill_concurrency = 2               # at most 2 requests between send and first
                                          # token, per process; --prefill-concurrency
    balance = "least-in-flight"           # over replicas (-H URL,URL); or "round-robin"
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
    max_line_bytes = 16777216             # longest SSE line the client holds (memory)

    [timeouts]                            # per request, seconds (defaults fit 393k prefills)
    connect_s = 30                        # TCP connect
    first_byte_s = 1800                   # each wait until the first output (prefill)
    idle_s = 300                          # silence between reads once streaming
    total_s = 7200                        # the whole request
    stuck_after_s = 30                    # say which requests wait this long (0: never)

    [conversation]                        # multi-turn: see conversation.py
    turns = 4
    turn_tokens = 256

    [meta]                                # what was measured; unknown stays null
    model = "..."                         # else --model, else the server's /v1/models

    [headers]                             # sent with every request (headers.py); --header
    X-Tenant = "team-a"                   # KEY=VALUE wins; credentials are never shown

    [trace]                               # replay a recorded trace (replay.py; --trace)
    path = "mooncake_trace.jsonl"         # format, speed, limit, window = "60:120",
                                          # block_tokens, model: as the --trace-* flags
    [dataset]                             # prompts from a file (dataset.py; --dataset)
    path = "prompts.jsonl"                # format: as --dataset-format
"""

from __future__ import annotations

import copy
import random
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.arrivals import ArrivalPlan
from anvil_metrics.load.cancel import CancelPlan
from anvil_metrics.load.conversation import ConversationPlan
from anvil_metrics.load.dataset import DatasetPlan
from anvil_metrics.load.energyplan import EnergyPlan
from anvil_metrics.load.loadspec import load_mode
from anvil_metrics.load.mix import Mix
from anvil_metrics.load.scenariofields import FIELDS, FLAG_OF, REPLACES, Timeouts, default
from anvil_metrics.load.scenariorules import scenario_fields
from anvil_metrics.load.trace import TracePlan


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario. Sizes in tokens; `context_distribution` maps planned prompt
    tokens to a request count (its order is the order sizes are handed out). Its defaults
    are the table's (`scenariofields.default`)."""

    measurement_protocol: str
    concurrency: int = default("concurrency")
    # at most this many requests between send and first token (per process); None: no gate
    prefill_concurrency: int | None = None
    balance: str = default("balance")  # over replicas (--host URL,URL): `live/balance.py`
    requests: int | None = None  # the request budget; None: none (a duration, or until stopped)
    warmup_requests: int = default("warmup_requests")
    max_tokens: int = default("max_tokens")
    context_tokens: int = default("context_tokens")
    max_context_tokens: int = default("max_context_tokens")
    context_seed: int = default("context_seed")
    context_distribution: dict[int, int] = field(default_factory=dict)
    reasoning_effort: str | None = None
    thinking_mode: str = default("serve_flags.thinking_mode")
    shared_prefix_burst: bool = False
    shared_prefix_tokens: int | None = None
    shared_group_size: int | None = None
    include_usage: bool = default("request.include_usage")
    fixed_output_tokens: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    endpoint: str = default("request.endpoint")  # what requests are posted to (`ENDPOINTS`)
    prompt_ids: bool = False  # a text endpoint's prompt as the server's token ids
    max_line_bytes: int = default("request.max_line_bytes")  # the client's line cap
    probe_rate: float | None = None  # --probe-rate: head-of-line probes per second
    probe_idle: int = default("probe_idle")  # probes before the load (the idle baseline)
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
    trace: TracePlan | None = None  # a replayed trace (`replay.py`; [trace], --trace)
    dataset: DatasetPlan | None = None  # prompts from a file (`dataset.py`; --dataset)
    mix: Mix | None = None  # request classes and models (`mix.py`)
    cancel: CancelPlan | None = None  # requests closed on purpose (`cancel.py`)
    energy: EnergyPlan | None = None  # the GPUs' energy source (`energyplan.py`; --energy)
    source: str | None = None

    @property
    def load_mode(self) -> str:
        """`loadspec.load_mode`: "budget", "duration" or "until_stopped"."""
        conversation = self.conversation
        starts = (conversation.conversations if conversation is not None else
                  self.trace.jobs if self.trace is not None and self.trace.agent else None)
        return load_mode(self.requests, starts, self.duration_s)

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


_SCENARIO_FIELDS = tuple(f.name for f in fields(Scenario) if f.name != "source")


def scenario_from_dict(data: dict[str, Any], source: str | None = None) -> Scenario:
    """Validate a parsed TOML document into a `Scenario`; raise ScenarioError on the first
    bad field (the table and its rules: `scenariofields`)."""
    v = scenario_fields(data, source)
    return Scenario(**{name: v[name] for name in _SCENARIO_FIELDS}, source=source)


def scenario_to_dict(sc: Scenario) -> dict[str, Any]:
    """The TOML-shaped document `scenario_from_dict` reads back into an equal Scenario
    (`source` apart: pass it along). Plain data only: `context_distribution`'s keys are
    strings, as in TOML, and keep their order (the order sizes are handed out in). The
    keys a `Scenario` field keeps as they are come from the table; the others are written
    from what was made of them."""
    doc: dict[str, Any] = {}
    for f in FIELDS.values():
        if f.sets is not None and getattr(sc, f.sets) is not None:
            _put(doc, f.key, getattr(sc, f.sets))
    if sc.probe_rate is None:  # the probe's idle baseline only beside it (scenariorules)
        doc.pop("probe_idle", None)
    doc["requests"] = sc.requests  # None (no budget) only on the wire: TOML has no null
    doc["request"]["extra_body"] = orjson.loads(orjson.dumps(sc.extra_body))
    doc.update(meta=dict(sc.meta), headers=dict(sc.headers),
               timeouts={f.name: getattr(sc.timeouts, f.name) for f in fields(Timeouts)})
    if sc.conversation is not None:  # (its distribution is none: a turn's is its history)
        doc["conversation"] = sc.conversation.to_table()
    else:
        doc["context_distribution"] = {str(k): n for k, n in sc.context_distribution.items()}
    doc.update(_load_keys(sc))
    if sc.mix is not None:  # its seed is context_seed's
        if sc.mix.classes:
            doc["request_class"] = [c.to_table() for c in sc.mix.classes]
        if sc.mix.models is not None:
            doc["models"] = sc.mix.models.to_table()
    if sc.cancel is not None:  # its seed is context_seed's
        doc["cancel"] = sc.cancel.to_table()
    if sc.shared_prefix_burst:
        doc["shared_prefix"] = {"prefix_tokens": sc.shared_prefix_tokens,
                                "group_size": sc.shared_group_size}
    if sc.trace is not None:
        t = sc.trace
        window = None if t.window_s is None else ":".join(
            "" if x is None else repr(x) for x in t.window_s)
        doc["trace"] = ({"path": t.path, "format": t.fmt, "jobs": t.jobs,
                         "tool_speed": t.tool_speed, "max_tool_wait": t.max_tool_wait_s,
                         "max_idle": t.max_idle_s, "start_at": t.start_at,
                         "start_seed": t.start_seed,
                         "speed": t.speed if t.job_times else None} if t.agent else
                        {"path": t.path, "format": t.fmt, "speed": t.speed, "limit": t.limit,
                         "block_tokens": t.block_tokens, "model": t.model, "window": window})
    if sc.dataset is not None:
        doc["dataset"] = {"path": sc.dataset.path, "format": sc.dataset.fmt}
    if sc.energy is not None:
        doc["energy"] = sc.energy.to_table()
    return _no_nulls(doc)


def _load_keys(sc: Scenario) -> dict[str, Any]:
    """The load's keys of `sc`: its duration (a sweep's follows from its steps), its
    open-loop plan (a rate sweep's rate is its steps'), its sweep and windows."""
    doc: dict[str, Any] = {"warmup": sc.warmup_s, "cooldown": sc.cooldown_s}
    if sc.step_duration_s is not None:
        doc.update(step_duration=sc.step_duration_s, steps=sc.step_users, rates=sc.step_rates)
    else:
        doc["duration"] = sc.duration_s
    if sc.arrivals is not None:
        doc.update(arrival=sc.arrivals.arrival, burstiness=sc.arrivals.burstiness,
                   arrival_seed=sc.arrivals.seed)
        if sc.step_rates is None:
            doc["rate"] = sc.arrivals.rate_rps
    return {k: list(x) if isinstance(x, tuple) else x for k, x in doc.items()}


def _no_nulls(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` without the None values TOML cannot hold (a table's, one level down), but
    `requests`' (the wire's "no budget")."""
    out = {}
    for k, x in doc.items():
        if isinstance(x, dict) and k in ("trace", "dataset", "shared_prefix"):
            x = {kk: xx for kk, xx in x.items() if xx is not None}
        if x is not None or k == "requests":
            out[k] = x
    return out


def read_scenario(path: str | Path) -> dict[str, Any]:
    """A scenario TOML file's document, unchecked (`scenario_from_dict` checks it)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"scenario file {str(p)!r} does not exist; pass a .toml path") from None
    except OSError as e:
        raise UsageError(f"scenario file {str(p)!r} cannot be read: {e.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(
            f"{p}: not valid TOML ({e}); see scenarios/smoke.toml for the format") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file."""
    return scenario_from_dict(read_scenario(path), source=str(path))


# --- flags over a file -----------------------------------------------------------------------

_ABSENT = object()


def _get(doc: dict[str, Any], key: str) -> Any:
    """The value at a dotted `key` of `doc` (`_ABSENT`: none there)."""
    table, _, last = key.rpartition(".")
    d = doc.get(table, {}) if table else doc
    return d.get(last, _ABSENT) if isinstance(d, dict) else _ABSENT


def _put(doc: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted `key` of `doc` (None: remove it); a table that is not one (the file's
    mistake) is left for the checks to name."""
    table, _, last = key.rpartition(".")
    if value is None:
        d = doc.get(table) if table else doc
        if isinstance(d, dict):
            d.pop(last, None)
        return
    d = doc.setdefault(table, {}) if table else doc
    if isinstance(d, dict):
        d[last] = value


@dataclass(frozen=True, slots=True)
class Given:
    """One flag as the user gave it: its name and text (what its errors show) and the keys
    of the scenario it sets (`scenariofields.Flag.sets`)."""

    flag: str
    text: str | None  # None: a switch
    keys: dict[str, Any]

    @property
    def said(self) -> str:
        return self.flag if self.text is None else f"{self.flag} {self.text!r}"

    def gave(self, key: str) -> bool:
        """Whether the flag gave `key`, a table it is in, or one of its own keys."""
        return any(key == k or key.startswith((k + ".", k + "[")) or k.startswith(key + ".")
                   for k in self.keys)


def with_flags(doc: dict[str, Any], given: Sequence[Given]) -> dict[str, Any]:
    """`doc` with the flags' keys over it: a key a flag changes replaces the file's keys the
    rules would refuse beside it (`scenariofields.REPLACES`); a flag that says what the
    file says changes nothing."""
    changed = {k: x for g in given for k, x in g.keys.items() if _get(doc, k) != x}
    out = copy.deepcopy(doc)
    for key in changed:
        for table, replaced in REPLACES.items():
            if key == table or key.startswith(table + "."):
                for gone in replaced:
                    if gone not in changed:
                        _put(out, gone, None)
    for key, x in changed.items():
        _put(out, key, x)
    return out


def scenario_with_flags(doc: dict[str, Any], given: Sequence[Given],
                        source: str | None) -> Scenario:
    """The scenario of `doc` (a file's, or the built-in one) with the flags over it, checked
    as one document. A refusal's source is the flag that gave the key refused, else the
    one flag without which the scenario holds; else the file (with the flags, if the file
    alone holds)."""
    try:
        return scenario_from_dict(with_flags(doc, given), source)
    except ScenarioError as e:
        raise _named(e, doc, given, source) from None


def _holds(doc: dict[str, Any], given: Sequence[Given], source: str | None) -> bool:
    try:
        scenario_fields(with_flags(doc, given), source)
    except ScenarioError:
        return False
    return True


def _named(e: ScenarioError, doc: dict[str, Any], given: Sequence[Given],
           source: str | None) -> UsageError:
    """`e` as the one line that names what to change: the flag is its source (with the
    file's, where the key refused is the file's)."""
    g = next((g for g in given if g.gave(e.field)), None)
    if g is None:
        g = next((g for g in given if _holds(doc, [x for x in given if x is not g], source)),
                 None)
    if g is None:
        if not given or not _holds(doc, (), source):
            return e
        flags = " ".join(x.said for x in given)
        return ScenarioError(e.field, e.value, e.allowed, source=f"{flags} with {source}")
    if g.gave(e.field):
        return ScenarioError(e.field, e.value, e.allowed, source=g.said)
    if e.value is None:
        other = f" ({FLAG_OF[e.field]})" if e.field in FLAG_OF else ""
        return UsageError(f"{g.said} needs {e.field}{other} too: {e.allowed}")
    return ScenarioError(e.field, e.value, e.allowed, source=f"{g.said} with {source}")
