"""A scenario's one field table: every key a scenario file may hold (what it may be, its
default, the `Scenario` field that keeps it), in the order the keys are checked, and the
flags that set keys (`anvil run`'s and Locust's, each with its help).

Why one table: a scenario is written two ways, as a TOML file and as flags over it (`anvil
run`, Locust's command line and its web form). Each key's kind, default and flag are
stated here once; from them come the file's checks (`scenariorules.scenario_fields`, one
loop over the rows), the flags and their help (`options.py` makes them `Option`s), the
keys a file may hold (the unknown ones refused), the defaults `Scenario` takes
(`default`), what `scenario.scenario_to_dict` writes back and the README's table. A flag's
text becomes the key's value in the same TOML-shaped document
(`scenario.scenario_with_flags`), checked by the same rows and rules as the file. What
depends on other keys is a rule (`scenariorules.py`, `loadspec.py`), run once the key it
follows is read. This module imports no rule and nothing heavy: `anvil`'s parsers are
made from it at start.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load import cancel
from anvil_metrics.load.arrivals import ARRIVALS, ArrivalPlan
from anvil_metrics.load.conversation import table_flag
from anvil_metrics.load.dataset import FORMATS as DATASET_FORMATS
from anvil_metrics.load.energyplan import INTERVAL_S, SOURCES, URLS
from anvil_metrics.load.mix import REASONING_EFFORTS, THINKING_MODES, assignment_flag
from anvil_metrics.load.optionvalues import (
    BOOL,
    NAME,
    TABLE,
    TEXT,
    Kind,
    Parse,
    choice,
    counts,
    criteria,
    names,
    number,
    positive,
    rates,
    seconds_or_off,
    seconds_or_zero,
    timespan,
    whole,
    window_text,
)
from anvil_metrics.load.trace import ALL_FORMATS as TRACE_FORMATS
from anvil_metrics.load.trace import TracePlan

# what a run's requests are posted to (`body.py`), under the API path; which of them answer
# with a stream (an embedding is one JSON answer); which take the prompt as text, no template
ENDPOINT_PATHS = {"chat": "/chat/completions", "completions": "/completions",
                  "responses": "/responses", "embeddings": "/embeddings",
                  "messages": "/messages"}
ENDPOINTS = tuple(ENDPOINT_PATHS)
STREAMED_ENDPOINTS = ("chat", "completions", "responses", "messages")
TEXT_ENDPOINTS = ("completions", "embeddings")
# how a run over several replicas (--host URL,URL) spreads its requests (`live/balance.py`)
BALANCES = ("round-robin", "least-in-flight")

META_KEYS = ("model", "engine", "gpu", "tier", "manifest", "source_recipe")
# the chat header and the group's head line alone are ~10-20 tokens: a shared prefix
# shorter than this would not be what the run reports
MIN_SHARED_PREFIX_TOKENS = 64


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Client timeouts, per request. The defaults fit a 393k-token prefill, which can take
    minutes: `first_byte_s` bounds each wait from the request's write until the stream's
    first output (headers, a role-only chunk and the prefill), `idle_s` each silence
    between two reads after that, `total_s` the whole request. A request that
    overruns one fails with kind `timeout` in the phase it was in. `stuck_after_s` ends
    nothing: a request that has waited this long for its first output, or sat this long
    without a byte mid-stream, is said to be stuck (`live/stuck.py`), in the log and the
    live display, again every further `stuck_after_s`; 0: never said."""

    connect_s: float = 30.0
    first_byte_s: float = 1800.0
    idle_s: float = 300.0
    total_s: float = 7200.0
    stuck_after_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Field:
    """One key of a scenario file: where it is ("max_tokens", or "table.key"), its kind,
    its default (when the file leaves it out; a function: of the fields before it), and
    `sets`: the `Scenario` field that keeps it as it is (None: a rule reads it)."""

    key: str
    kind: Kind
    default: Any = None
    sets: str | None = None
    required: bool = False

    def read(self, data: dict[str, Any], v: dict[str, Any], src: str | None) -> Any:
        """The checked value in `data` (`v`: the fields read so far, for a default)."""
        table, _, key = self.key.rpartition(".")
        d = table_of(data, table, src) if table else data
        value = d.get(key, self.default(v) if callable(self.default) else self.default)
        if value is None and self.default is None and not self.required:
            return None
        if not self.kind.accepts(value):
            raise ScenarioError(self.key, value, self.kind.allowed, source=src)
        return value


def _own(key: str, kind: Kind, default: Any = None, **kw: Any) -> Field:
    """A key whose `Scenario` field, named as the key's last part, keeps it as it is."""
    return Field(key, kind, default, sets=key.rpartition(".")[2], **kw)


# a replay's and an open loop's defaults are their plans'
_TRACE = {f.name: f.default for f in fields(TracePlan)}
_ARRIVAL = {f.name: f.default for f in fields(ArrivalPlan)}
# Every key of a file, in the order it is checked (the first bad one is the one reported;
# each rule of `scenariorules.RULES_AFTER` runs once the key it follows is read).
_ROWS: tuple[Field, ...] = (
    _own("measurement_protocol", NAME, required=True),
    _own("max_tokens", whole(1), 256),
    _own("context_tokens", whole(1), 4096),
    _own("max_context_tokens", whole(1), lambda v: v["context_tokens"]),
    _own("context_seed", whole(0), 0),
    Field("context_distribution", TABLE, {}),
    Field("requests", whole(1)),
    Field("duration", timespan),
    Field("steps", counts),
    Field("rates", rates),
    Field("step_duration", timespan),
    Field("rate", number("a number of requests per second > 0")),
    Field("arrival", choice(*ARRIVALS)),
    Field("burstiness", number("a number > 0 (gamma shape; 1 = Poisson)"),
          _ARRIVAL["burstiness"]),
    Field("arrival_seed", whole(0), _ARRIVAL["seed"]),
    _own("goodput", Kind('criteria as text, e.g. "ttft_ms<=2000"',
                         lambda v: isinstance(v, str))),
    _own("warmup_requests", whole(0), 0),
    _own("concurrency", whole(1), 1),
    _own("prefill_concurrency", whole(1)),
    _own("balance", choice(*BALANCES), BALANCES[0]),
    _own("serve_flags.reasoning_effort", choice(*REASONING_EFFORTS)),
    _own("serve_flags.thinking_mode", choice(*THINKING_MODES), "default"),
    Field("serve_flags.no_thinking", BOOL, False),
    _own("serve_flags.shared_prefix_burst", BOOL, False),
    Field("shared_prefix.prefix_tokens", whole(MIN_SHARED_PREFIX_TOKENS)),
    Field("shared_prefix.group_size", whole(1)),
    Field("conversation", TABLE, {}),
    Field("request_class", Kind("an array of tables ([[request_class]])",
                                lambda v: isinstance(v, list)), []),
    Field("models", TABLE, {}),
    Field("cancel", TABLE, {}),
    _own("request.include_usage", BOOL, True),
    _own("request.fixed_output_tokens", BOOL, False),
    Field("request.extra_body", Kind("a table of JSON fields", lambda v: isinstance(v, dict)),
          {}),
    _own("request.system_prompt", TEXT),
    _own("request.endpoint", choice(*ENDPOINTS), "chat"),
    _own("request.prompt_ids", BOOL, False),
    _own("request.max_line_bytes", whole(4096), 16 * 1024 * 1024),
    Field("trace.path", NAME),
    Field("trace.format", choice(*TRACE_FORMATS)),
    Field("trace.speed", positive, _TRACE["speed"]),
    Field("trace.limit", whole(1)),
    Field("trace.window", window_text),
    Field("trace.block_tokens", whole(1), _TRACE["block_tokens"]),
    Field("trace.model", TEXT),
    Field("trace.jobs", whole(1)),
    Field("trace.tool_speed", positive, _TRACE["tool_speed"]),
    Field("trace.max_tool_wait", seconds_or_zero),
    Field("trace.max_idle", seconds_or_zero, _TRACE["max_idle_s"]),
    Field("trace.start_at", choice("first", "sampled"), _TRACE["start_at"]),
    Field("trace.start_seed", whole(0), _TRACE["start_seed"]),
    Field("dataset.path", NAME),
    Field("dataset.format", choice(*DATASET_FORMATS)),
    *(Field(f"meta.{k}", TEXT) for k in META_KEYS),
    Field("meta.gpus", whole(1)),
    Field("meta.gpu_hour_price", positive),
    Field("headers", TABLE, {}),
    *(Field(f"timeouts.{f.name}", seconds_or_off if f.name == "stuck_after_s"
            else number("a finite number of seconds > 0"), f.default)
      for f in fields(Timeouts)),
    Field("warmup", timespan),
    Field("cooldown", timespan),
    Field("energy.source", choice(*SOURCES)),  # energyplan.py: the rule `energy`
    Field("energy.urls", URLS),
    Field("energy.metric", NAME),
    Field("energy.interval", positive, INTERVAL_S),
    Field("energy.idle", timespan),
    _own("probe_rate", number("a number of probes per second > 0")),  # live/probe.py
    _own("probe_idle", whole(1), 10),
)
FIELDS = {f.key: f for f in _ROWS}

# the file's keys: the top ones, and each table's whose keys are rows here (the others'
# keys are their own module's: conversation.py, mix.py, cancel.py, headers.py)
TOP_KEYS = tuple(dict.fromkeys(k.partition(".")[0] for k in FIELDS))
TABLE_KEYS = {t: tuple(k.partition(".")[2] for k in FIELDS if k.startswith(t + "."))
              for t in TOP_KEYS if any(k.startswith(t + ".") for k in FIELDS)}


def default(key: str) -> Any:
    """The value a file that leaves `key` out has (a function's: its default's, e.g.
    max_context_tokens' is context_tokens')."""
    d = FIELDS[key].default
    return default("context_tokens") if callable(d) else d


def table_of(data: dict[str, Any], table: str, src: str | None) -> dict[str, Any]:
    """`data`'s `table` ({} if none), with each of its keys one of the table's rows."""
    v = data.get(table, {})
    if not isinstance(v, dict):
        raise ScenarioError(table, v, "a table", source=src)
    allowed = TABLE_KEYS[table]
    for k in v:
        if k not in allowed:
            raise ScenarioError(f"{table}.{k}", v[k], f"one of the keys {sorted(allowed)}",
                                source=src)
    return v


@dataclass(frozen=True, slots=True)
class Flag:
    """A flag of `anvil run` and of Locust (its command line and start form) that sets a
    scenario key: its text, read by `kind` (None: the key's row's), is the value the file
    would hold there; a table's value (a dict) is its keys, over the file's (None: none)."""

    name: str
    key: str
    help: str
    kind: Parse | None = None
    short: str | None = None
    locust: bool = True  # False: Locust has the flag itself (-u)
    repeat: bool = False  # may be given many times: its lists (a kind's) joined into one

    @property
    def parse(self) -> Parse:
        return self.kind or FIELDS[self.key].kind

    def sets(self, value: Any) -> dict[str, Any]:
        """The keys `value` (as `parse` gives it) sets in the document."""
        if isinstance(value, dict):
            return {f"{self.key}.{k}": x for k, x in value.items()}
        return {self.key: value}


def _default(key: str) -> str:
    """A key's default as a flag's help says it (a whole number whole: 16777216)."""
    v = default(key)
    return str(v) if isinstance(v, int) else format(v, "g")


FLAGS: tuple[Flag, ...] = (
    Flag("--model", "meta.model", "model name to request (default: scenario's, else the "
         "server's first)"),
    Flag("--users", "concurrency", "concurrent streams (default: scenario's concurrency, "
         f"else {_default('concurrency')})", short="-u", locust=False),
    Flag("--requests", "requests", "stop after exactly this many measured requests "
         "(default: the scenario's; none without one: the run lasts --duration, or until "
         "stopped)"),
    Flag("--duration", "duration", "run the measured load this long, e.g. 90s, 5m, 1h "
         "(after the warm-ups; requests in flight then finish within --stop-timeout). "
         "Plain Locust's -t works too, but counts from the start, set-up included"),
    Flag("--warmup", "warmup", "with a duration: requests started in its first this long "
         "(e.g. 30s) are kept in requests.jsonl but left out of benchmark.json's figures"),
    Flag("--cooldown", "cooldown", "with a duration: likewise for requests started in its "
         "last this long (e.g. 10s)"),
    Flag("--prefill-concurrency", "prefill_concurrency", "at most this many requests "
         "between send and first token at once, per load process (a request waits at this "
         "gate before it is sent; its wait is the row's prefill_gate_wait_ms, not in TTFT); "
         "default: no gate"),
    Flag("--balance", "balance", "with replicas (--host URL,URL): round-robin (default: "
         "request i to replica i mod their count) or least-in-flight (to the replica with "
         "the fewest of this load process's requests in flight; one counted dead is "
         "skipped); ignored with one host"),
    Flag("--rate", "rate", "open loop: offer this many requests (with a [conversation]: "
         "conversation starts) per second on one seeded schedule (users are the pool that "
         "sends them; -u caps requests in flight); default: closed loop, -u streams back "
         "to back"),
    Flag("--arrival", "arrival", "open loop: gaps between arrivals: poisson (default), "
         "gamma (with --burstiness) or constant"),
    Flag("--burstiness", "burstiness", "open loop: gamma shape of the gaps, as vLLM's "
         "bench: 1 = Poisson, < 1 burstier, > 1 more regular (implies --arrival gamma)"),
    Flag("--arrival-seed", "arrival_seed", "open loop: the schedule's seed (default "
         f"{_default('arrival_seed')})"),
    Flag("--trace", "trace.path", "replay this recorded trace as the load (Mooncake JSONL, "
         "BurstGPT CSV or anvil's JSONL; its timestamps are the due times): see "
         "load/replay.py"),
    Flag("--trace-format", "trace.format", "the trace's format: mooncake, burstgpt or jsonl, "
         "or agent jobs: weka, otel or agent-jsonl (default: told by the file)"),
    Flag("--trace-speed", "trace.speed", "replay the trace this many times faster (default "
         f"{_default('trace.speed')}); agent jobs: start each at its recorded start divided "
         "by this (an open loop of job starts)"),
    Flag("--trace-limit", "trace.limit", "replay only the trace's first N requests"),
    Flag("--trace-window", "trace.window", "replay only the requests in this time window "
         "of the trace, START:END seconds after its first (60:120; 60: to the end); the "
         "first is due at once"),
    Flag("--trace-block", "trace.block_tokens", "tokens per hash id block of a Mooncake "
         f"trace (default {_default('trace.block_tokens')})"),
    Flag("--trace-model", "trace.model", "a BurstGPT trace: only this model's rows"),
    Flag("--agents", "concurrency", "agent jobs: this many jobs at once, a new one when one "
         "ends (each job's sub-agents run beside it, on connections of their own)",
         locust=False),
    Flag("--jobs", "trace.jobs", "agent jobs: measure this many jobs, then stop (the "
         "trace's jobs in order, again from its first; default: each job of the trace once)"),
    Flag("--tool-speed", "trace.tool_speed", "agent jobs: wait each tool's recorded time "
         f"divided by this (default {_default('trace.tool_speed')})"),
    Flag("--max-tool-wait", "trace.max_tool_wait", "agent jobs: wait at most this many "
         "seconds for one tool (default: no cap)"),
    Flag("--start-at", "trace.start_at", "agent jobs: start each job at its first turn, or "
         "(sampled) at a seeded random turn of its root, its history primed by one "
         "unmeasured request (default first)"),
    Flag("--start-seed", "trace.start_seed", "agent jobs: the seed of --start-at sampled "
         f"(default {_default('trace.start_seed')})"),
    Flag("--max-idle", "trace.max_idle", "agent jobs: replay at most this many seconds of "
         f"a recorded idle gap (default {_default('trace.max_idle')}; 0: none)"),
    Flag("--dataset", "dataset.path", "send prompts from this file (ShareGPT JSON, JSONL of "
         "prompt or messages, or plain text paragraphs): see load/dataset.py"),
    Flag("--dataset-format", "dataset.format", "the dataset's format: sharegpt, jsonl or "
         "text (default: told by the file)"),
    Flag("--conversation", "conversation", "multi-turn conversations: the [conversation] "
         "table's keys as key=value pairs over the scenario's, e.g. turns=4,turn_tokens="
         "256,think_time=2, a distribution as name:params (turns=uniform:2:6, think_time="
         "exponential:2) (conversations=N: a budget of N conversations): see "
         "load/conversation.py", table_flag),
    Flag("--steps", "steps", "a sweep of users: one step per count, e.g. 1,4,16,64, each "
         "--step-duration long (steps[] in benchmark.json)"),
    Flag("--rates", "rates", "a sweep of open-loop rates (requests/s), e.g. 1,2,4,8, each "
         "--step-duration long; -u caps requests in flight"),
    Flag("--step-duration", "step_duration", "how long each step of --steps / --rates "
         "lasts, e.g. 60s"),
    Flag("--goodput", "goodput", "per-request criteria, e.g. \"ttft_ms<=2000,mean_inter_"
         "token_latency_ms<=50\": benchmark.json then has goodput (met, fraction) and "
         "metrics.goodput_rps", criteria),
    Flag("--endpoint", "request.endpoint", "what the requests are posted to: chat "
         "(/v1/chat/completions, the default), completions (/v1/completions, a text "
         "prompt), responses (/v1/responses, streamed events), embeddings (/v1/embeddings, "
         "one answer) or messages (/v1/messages, the Anthropic Messages API, streamed)"),
    Flag("--prompt-ids", "request.prompt_ids", "send each completions or embeddings prompt "
         "as the server's token ids (its /tokenize), exactly the planned count, as vLLM's "
         "bench can"),
    Flag("--models", "models.names", "the models (LoRA adapters) requests name, "
         "comma-separated, each one the server serves; over the scenario's [models] names: "
         "see load/mix.py", names),
    Flag("--model-assignment", "models", "how --models (or [models]) are assigned: "
         "round-robin (default), random, or zipf:ALPHA (P(model i) ∝ (i + 1)^-ALPHA)",
         assignment_flag),
    Flag("--cancel-rate", "cancel.rate", "close this fraction of the measured requests on "
         "purpose, e.g. 0.1 (with --cancel-after; over the scenario's [cancel]): see "
         "load/cancel.py", cancel.RATE),
    Flag("--cancel-after", "cancel.after", "when --cancel-rate closes a request: prefill "
         "(once written), decode (at its first output) or a number of milliseconds after "
         "its start", cancel.AFTER),
    Flag("--probe-rate", "probe_rate", "send this many tiny probe requests per second "
         "(Poisson; one output token; their own connections, outside the budget and the "
         "figures) to measure how the load delays an unrelated request: the probe block, "
         "probe.jsonl (live/probe.py)"),
    Flag("--probe-idle", "probe_idle", "with --probe-rate: this many probes, one at a time, "
         "before the load: the idle baseline (default 10)"),
    Flag("--stuck-after", "timeouts.stuck_after_s", "say in the log (and the live display) "
         "when requests have waited this long for their first output, or sat this long "
         "silent mid-stream, e.g. 30s (the default), then again every further this long; "
         "0 = never (the timeouts still end them: [timeouts])"),
    Flag("--max-line-bytes", "request.max_line_bytes", "the longest SSE line or event (and "
         "plain JSON answer) the client holds; a longer one fails its request, bounding the "
         f"load process's memory (default {_default('request.max_line_bytes')})"),
    Flag("--max-tokens", "max_tokens", "completion cap per request (default: scenario's, "
         f"else {_default('max_tokens')})"),
    Flag("--warmup-requests", "warmup_requests", "warm-up requests before measuring "
         f"(default: scenario's, else {_default('warmup_requests')})"),
    Flag("--engine", "meta.engine", "what serves the model, e.g. vllm, sglang (default: "
         "discovered from the server)"),
    Flag("--gpu", "meta.gpu", "the GPU the server runs on, e.g. H100-80GB (recorded as "
         "given)"),
    Flag("--gpus", "meta.gpus", "how many GPUs serve the run, a whole number >= 1 "
         "(recorded as the run's gpus; the jobs block's per-GPU figures)"),
    Flag("--gpu-hour-price", "meta.gpu_hour_price", "the price of one GPU-hour in USD, a "
         "number > 0, with --gpus (gives $ per million output and input tokens)"),
    Flag("--energy", "energy.source", "read the GPUs' energy during the run: nvml (this "
         "host's GPUs; needs anvil-metrics[nvml]), dcgm (DCGM exporters, --energy-url) or "
         "metric (--energy-metric); energy.jsonl in the run folder (README: Energy)"),
    Flag("--energy-url", "energy.urls", "a DCGM exporter's (or --energy-metric's) /metrics, "
         "one per node: repeatable, or comma-separated, e.g. http://node1:9400/metrics "
         "(implies --energy dcgm)", repeat=True),
    Flag("--energy-metric", "energy.metric", "any Prometheus metric as the energy source, "
         'with its unit: NAME{label="value"}:W (power; or mW) or :J (an energy counter; '
         "or mJ, uJ), as its HELP line says, e.g. gpu_power_usage:W; one series per GPU "
         "(implies --energy metric)"),
    Flag("--energy-interval", "energy.interval", "seconds between two energy readings "
         f"(default {_default('energy.interval')})"),
    Flag("--energy-idle", "energy.idle", "read an idle baseline this long (e.g. 10s) before "
         "the load starts; the load waits for it"),
    Flag("--tier", "meta.tier", "the serving tier, as your team names it (recorded as "
         "given)"),
    Flag("--manifest", "meta.manifest", "the deployment manifest this server came from "
         "(recorded as given)"),
    Flag("--source-recipe", "meta.source_recipe", "the recipe the server was started from "
         "(recorded as given)"),
)
FLAG_OF = {f.key: f.name for f in reversed(FLAGS)}  # a key's first flag (-u, not --agents)

# A key a flag changes, and the file's keys it replaces: those the rules would refuse
# beside it, which a flag means to override (a key matches its table's entry too)
REPLACES: dict[str, tuple[str, ...]] = {
    "requests": ("conversation.conversations",),  # --requests counts turns
    "duration": ("requests", "conversation.conversations"),  # a duration run
    "steps": ("requests", "duration", "rates", "conversation.conversations"),
    "rates": ("requests", "duration", "steps", "rate", "conversation.conversations"),
    "arrival": ("burstiness",),  # a burstiness is a gamma's (or poisson's, 1)
    "burstiness": ("arrival",),  # and a burstiness alone means gamma
    "conversation": ("context_distribution",),  # a turn's size is its history's
    "conversation.conversations": ("requests",),
    "trace": ("requests", "duration", "rate", "arrival", "burstiness", "arrival_seed",
              "warmup_requests"),  # a replay's load is the trace's
}
