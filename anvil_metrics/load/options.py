"""anvil's options, declared once: `anvil run`'s flags and the Locust plugin's are made here.

Why one table: the same option reaches anvil by two roads — `anvil run`'s argparse, and
Locust's own parser (configargparse; its custom arguments are also the fields of the web
UI's start form). Declared twice, the names, defaults, help and checks drift apart. So
`OPTIONS` holds one frozen `Option` per flag; `cli/run.py` and `runs/plugin.py` only walk it, and
`run_options` is the one conversion of parsed values (typed by argparse, or strings from
Locust's parser and form) into the `RunOptions` a run starts from.

On Locust's side every non-switch option is a string defaulting to "": the form posts text
and Locust keeps an option's type when it fills in posted values, and there is no None in
a form (an empty field means "not set"). Its values are checked by `run_options`, so a bad
value typed into the form is one `UsageError` naming the flag, the value and what is
allowed — the same words argparse prints for `anvil run`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from anvil_metrics.errors import UsageError
from anvil_metrics.headers import merged, with_api_key
from anvil_metrics.headers import parse_flag as parse_header
from anvil_metrics.load.optionvalues import (
    Parse,
    arrival,
    choice,
    counts,
    criteria,
    http_url,
    nonce,
    pairs,
    positive,
    rates,
    ratio,
    seconds,
    text,
    timespan,
    tokenizer_file,
    whole,
    window,
)

if TYPE_CHECKING:  # the scenario module (and numpy) only when a run is actually made
    from anvil_metrics.load.arrivals import ArrivalPlan
    from anvil_metrics.load.scenario import Scenario

# Locust's --stop-timeout as anvil sets its default: after a duration (or Stop), requests in
# flight get this long to finish and count; those still open are recorded as `cancelled`.
# Locust's own default (0) would cut every stream in flight, and the longest requests would
# be the ones lost (a bias towards short ones); AIPerf's grace period after its
# --benchmark-duration is 30 s by default too. Set --stop-timeout to change it.
STOP_TIMEOUT_S = 30


@dataclass(frozen=True, slots=True)
class Option:
    """One option. `run`: `anvil run` has it; `locust`: the plugin adds it to Locust's
    parser (False for options Locust has itself, e.g. -u, which `anvil run` translates);
    `web_ui`: shown in Locust's start form; `secret`: masked there, and never passed on a
    command line; `env_var`: read by Locust's parser when the flag is absent; `repeat`: the
    flag may be given many times (a list of values, each checked by `parse`)."""

    flag: str
    help: str
    parse: Parse = text
    default: Any = None  # None: not set (the scenario's, the server's, ...)
    short: str | None = None
    switch: bool = False  # a store_true flag
    required: bool = False
    run: bool = True
    locust: bool = True
    web_ui: bool = True
    secret: bool = False
    env_var: str | None = None
    repeat: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def locust_default(self) -> Any:
        """The default on Locust's side: a form has no None, an empty field is "not set";
        a repeated flag's is no value yet."""
        if self.repeat:
            return []
        return "" if self.default is None else self.default

    def value(self, raw: Any) -> Any:
        """`raw` as parsed by either parser, typed: None or blank text is the default,
        text is checked by `parse`, anything else was already typed by argparse."""
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return self.default
        if self.switch:
            return bool(raw)
        if isinstance(raw, str):
            parsed = self.parse(self.flag, raw.strip())
            return self.default if parsed is None else parsed
        return raw


@dataclass(frozen=True, slots=True)
class AbortRule:
    """When a run ends itself because the server is not answering (`live/abort.py` applies
    it): `after_failures` requests per user in a row (per arrival in an open loop) failed to
    reach the server (0: never); or `failure_ratio` of the requests that ended in the last
    `window_s` failed, any kind, once at least `ABORT_MIN_WINDOW_REQUESTS` did; or, when
    `overload_window_s` is set, the server is over capacity (`live/overload.py`)."""

    after_failures: int = 10
    failure_ratio: float = 1.0
    window_s: float = 30.0
    overload_window_s: float | None = None  # --stop-overloaded (`live/overload.py`); None: off


DEFAULT_ABORT = AbortRule()
ABORT_MIN_WINDOW_REQUESTS = 10  # fewer in the window say too little to end a run on


OPTIONS: tuple[Option, ...] = (
    Option("--scenario", "scenario TOML file (see scenarios/); empty = built-in defaults",
           run=False, env_var="ANVIL_SCENARIO"),  # `anvil run`: its positional argument
    Option("--host", "endpoint, e.g. http://127.0.0.1:8000", short="-H", required=True,
           locust=False),
    Option("--model", "model name to request (default: scenario's, else the server's first)"),
    Option("--users", "concurrent streams (default: scenario's concurrency)", whole(1),
           short="-u", locust=False),
    Option("--requests", "stop after exactly this many measured requests (default: the "
           "scenario's; none without one: the run lasts --duration, or until stopped)",
           whole(1)),
    Option("--duration", "run the measured load this long, e.g. 90s, 5m, 1h (after the "
           "warm-ups; requests in flight then finish within --stop-timeout). Plain Locust's "
           "-t works too, but counts from the start, set-up included", timespan),
    Option("--warmup", "with a duration: requests started in its first this long (e.g. "
           "30s) are kept in requests.jsonl but left out of benchmark.json's figures",
           timespan),
    Option("--cooldown", "with a duration: likewise for requests started in its last this "
           "long (e.g. 10s)", timespan),
    Option("--rate", "open loop: offer this many requests (with a [conversation]: "
           "conversation starts) per second on one seeded schedule (users are the pool that "
           "sends them; -u caps requests in flight); default: closed loop, -u streams back "
           "to back", positive),
    Option("--arrival", "open loop: gaps between arrivals: poisson (default), gamma (with "
           "--burstiness) or constant", arrival),
    Option("--burstiness", "open loop: gamma shape of the gaps, as vLLM's bench: 1 = Poisson, "
           "< 1 burstier, > 1 more regular (implies --arrival gamma)", positive),
    Option("--arrival-seed", "open loop: the schedule's seed (default 0)", whole(0)),
    Option("--trace", "replay this recorded trace as the load (Mooncake JSONL, BurstGPT CSV "
           "or anvil's JSONL; its timestamps are the due times): see load/replay.py"),
    Option("--trace-format", "the trace's format: mooncake, burstgpt or jsonl (default: "
           "told by the file)"),
    Option("--trace-speed", "replay the trace this many times faster (default 1)", positive),
    Option("--trace-limit", "replay only the trace's first N requests", whole(1)),
    Option("--trace-window", "replay only the requests in this time window of the trace, "
           "START:END seconds after its first (60:120; 60: to the end); the first is due "
           "at once", window),
    Option("--trace-block", "tokens per hash id block of a Mooncake trace (default 512)",
           whole(1)),
    Option("--trace-model", "a BurstGPT trace: only this model's rows"),
    Option("--dataset", "send prompts from this file (ShareGPT JSON, JSONL of prompt or "
           "messages, or plain text paragraphs): see load/dataset.py"),
    Option("--dataset-format", "the dataset's format: sharegpt, jsonl or text (default: told "
           "by the file)"),
    Option("--conversation", "multi-turn conversations: the [conversation] table's keys as "
           "key=value pairs over the scenario's, e.g. turns=4,turn_tokens=256,think_time=2, "
           "a distribution as name:params (turns=uniform:2:6, think_time=exponential:2) "
           "(conversations=N: a budget of N conversations): see load/conversation.py", pairs),
    Option("--steps", "a sweep of users: one step per count, e.g. 1,4,16,64, each "
           "--step-duration long (steps[] in benchmark.json)", counts),
    Option("--rates", "a sweep of open-loop rates (requests/s), e.g. 1,2,4,8, each "
           "--step-duration long; -u caps requests in flight", rates),
    Option("--step-duration", "how long each step of --steps / --rates lasts, e.g. 60s",
           timespan),
    Option("--goodput", "per-request criteria, e.g. \"ttft_ms<=2000,mean_inter_token_"
           "latency_ms<=50\": benchmark.json then has goodput (met, fraction) and "
           "metrics.goodput_rps", criteria),
    Option("--endpoint", "what the requests are posted to: chat (/v1/chat/completions, "
           "the default), completions (/v1/completions, a text prompt), responses "
           "(/v1/responses, streamed events) or embeddings (/v1/embeddings, one answer)",
           choice("chat", "completions", "responses", "embeddings")),
    Option("--prompt-ids", "send each completions or embeddings prompt as the server's token "
           "ids (its /tokenize), exactly the planned count, as vLLM's bench can",
           switch=True, default=False),
    Option("--models", "the models (LoRA adapters) requests name, comma-separated, each one "
           "the server serves; over the scenario's [models] names: see load/mix.py"),
    Option("--model-assignment", "how --models (or [models]) are assigned: round-robin "
           "(default), random, or zipf:ALPHA (P(model i) ∝ (i + 1)^-ALPHA)"),
    Option("--cancel-rate", "close this fraction of the measured requests on purpose, e.g. "
           "0.1 (with --cancel-after; over the scenario's [cancel]): see load/cancel.py",
           ratio),
    Option("--cancel-after", "when --cancel-rate closes a request: prefill (once written), "
           "decode (at its first output) or a number of milliseconds after its start"),
    Option("--max-tokens", "completion cap per request (default: scenario's)", whole(1)),
    Option("--warmup-requests", "warm-up requests before measuring (default: scenario's)",
           whole(0)),
    Option("--results-dir", "where run folders are created", default="results"),
    Option("--run-dir", "use this (already created) run folder instead of a new one",
           run=False, web_ui=False),
    Option("--run-time", "safety limit in seconds (the run normally ends by request count)",
           seconds, locust=False),
    Option("--api-key", "API key (default: $ANVIL_API_KEY or $OPENAI_API_KEY); never stored "
           "or shown", secret=True),
    Option("--header", "an HTTP header sent with every request, KEY=VALUE (repeatable; over "
           "the scenario's [headers]); a credential's value (Authorization, *key*, *token*, "
           "*secret*) is never stored or shown", parse_header, secret=True, repeat=True,
           web_ui=False),
    Option("--run-nonce", "reuse a previous run's run_nonce: its prompts then hit the "
           "server's prefix cache on purpose (default: a new random nonce)", nonce),
    Option("--recalibrate", "ignore the cached prompt calibration for this endpoint and model "
           "(results/.cache) and redo it", switch=True, default=False),
    Option("--tokenizer", "count prompt tokens with this tokenizer.json (the served model's) "
           "instead of asking the server; needs anvil-metrics[tokenizer]", tokenizer_file),
    Option("--server-metrics-url", "the server's Prometheus metrics (default: <host>/metrics), "
           "scraped by a separate process during the run: benchmark.json's server block",
           http_url),
    Option("--no-server-metrics", "do not scrape the server's metrics", switch=True,
           default=False),
    Option("--server-metrics-interval", "seconds between metrics scrapes (default 1)", seconds),
    Option("--engine", "what serves the model, e.g. vllm, sglang (default: discovered from "
           "the server)"),
    Option("--gpu", "the GPU the server runs on, e.g. H100-80GB (recorded as given)"),
    Option("--tier", "the serving tier, as your team names it (recorded as given)"),
    Option("--manifest", "the deployment manifest this server came from (recorded as given)"),
    Option("--source-recipe", "the recipe the server was started from (recorded as given)"),
    Option("--abort-after-failures", "end the run (exit 3) when this many requests per user "
           "in a row (per arrival, open loop) could not reach the server (connection, lost "
           "stream, timeout), none answered between them; 0 = never (default 10)", whole(0),
           default=DEFAULT_ABORT.after_failures),
    Option("--abort-failure-ratio", "end the run (exit 3) when this fraction of the requests "
           "that ended within --abort-window failed, any kind (default 1: all of them, "
           f"at least {ABORT_MIN_WINDOW_REQUESTS})", ratio,
           default=DEFAULT_ABORT.failure_ratio),
    Option("--abort-window", "the window of --abort-failure-ratio, e.g. 30s (default 30s)",
           timespan, default=DEFAULT_ABORT.window_s),
    Option("--stop-overloaded", "end the run (exit 3) when the server is over capacity: "
           "over this window (e.g. 10s) the median TTFT of the requests that ended doubled "
           "beyond noise while the requests in flight grew, at two checks in a row (off by "
           "default; see live/overload.py)", timespan),
    Option("--processes", "load processes on this host (Locust's --processes: a master and "
           "this many workers, one exact result); default 1", whole(1), default=1,
           locust=False),
)

RUN_OPTIONS = tuple(o for o in OPTIONS if o.run)
# what was measured, as the user states it: flags override the scenario's [meta] of the
# same names, and both override what the server says of itself (`provenance.py`)
PROVENANCE = ("engine", "gpu", "tier", "manifest", "source_recipe")
LOCUST_OPTIONS = tuple(o for o in OPTIONS if o.locust)


def option(dest: str) -> Option:
    return next(o for o in OPTIONS if o.dest == dest)


def locust_args(values: Mapping[str, Any]) -> list[str]:
    """The Locust command-line arguments for `values` (dest -> typed value) of the options
    the plugin declares; unset ones are left out, secrets never appear."""
    out: list[str] = []
    for o in LOCUST_OPTIONS:
        v = values.get(o.dest)
        if o.secret or v is None or v is False or v == "":
            continue
        if o.switch:
            out.append(o.flag)
        elif isinstance(v, tuple):  # --steps, --rates: as typed, comma-separated
            out += [o.flag, ",".join(map(str, v))]
        elif isinstance(v, dict):  # --conversation: key=value pairs, as typed
            out += [o.flag, ",".join(f"{k}={str(x).lower() if isinstance(x, bool) else x}"
                                     for k, x in v.items())]
        else:
            out += [o.flag, str(v)]
    return out


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What the user asked for on the command line / start form, already typed."""

    scenario: Scenario
    host: str
    users: int
    results_dir: str = "results"
    run_dir: str | None = None
    api_key: str | None = None
    run_nonce: str | None = None
    calibrate: bool = True
    recalibrate: bool = False  # ignore a cached calibration (and store a fresh one)
    tokenizer_path: str | None = None  # a local tokenizer.json to count with
    stop_timeout_s: float | None = None  # Locust's --stop-timeout (recorded in the load block)
    server_metrics: bool = True  # scrape the server's /metrics (telemetry/sampler.py)
    server_metrics_url: str | None = None  # None: <host>/metrics
    server_metrics_interval_s: float = 1.0
    abort: AbortRule = DEFAULT_ABORT  # when the run ends itself: the server is not answering
    # derive the running figures of the web UI's LLM tab and /anvil/metrics as records come
    # in (`live.figures`): only a process with a web UI shows them, and at high open-loop
    # rates their derivation competes with due requests for the event loop
    live_figures: bool = True


def _arrivals(v: Mapping[str, Any], plan: ArrivalPlan | None) -> ArrivalPlan | None:
    """The open-loop plan of `--rate`, `--arrival`, `--burstiness`, `--arrival-seed` over
    the scenario's `plan` (None when none is given: keep it)."""
    from anvil_metrics.load.arrivals import ArrivalPlan

    rate, kind, burst, seed = v["rate"], v["arrival"], v["burstiness"], v["arrival_seed"]
    if rate is None and kind is None and burst is None and seed is None:
        return None
    if rate is None and plan is None:
        flag, given = next((f, g) for f, g in (("--arrival", kind), ("--burstiness", burst),
                                               ("--arrival-seed", seed)) if g is not None)
        raise UsageError(f"{flag} {given} needs --rate (requests/s): it shapes an open-loop "
                         "schedule")
    if kind is None:
        kind = ("poisson" if burst == 1 else "gamma") if burst is not None else (
            plan.arrival if plan is not None else "poisson")
    if burst is None:
        burst = plan.burstiness if plan is not None and kind == plan.arrival else 1.0
    if kind == "poisson" and burst != 1:
        raise UsageError(f"--burstiness {burst} is not allowed with --arrival poisson "
                         "(burstiness 1); use --arrival gamma")
    return ArrivalPlan(rate if rate is not None else plan.rate_rps,  # type: ignore[union-attr]
                       kind, burst, seed if seed is not None else (plan.seed if plan else 0))


def _windows(sc: Scenario, warmup: float | None, cooldown: float | None) -> Scenario:
    """`--warmup` / `--cooldown` over the scenario's: windows inside a duration."""
    warm = sc.warmup_s if warmup is None else warmup
    cool = sc.cooldown_s if cooldown is None else cooldown
    if not warm and not cool:
        return sc
    flag = "--warmup" if warm else "--cooldown"
    if sc.duration_s is None or sc.load_mode == "budget":
        raise UsageError(f"{flag} needs a duration run (--duration, or --steps/--rates): "
                         "the windows lie inside it")
    if (warm or 0) + (cool or 0) >= sc.duration_s:
        raise UsageError(f"--warmup {warm or 0:g} s + --cooldown {cool or 0:g} s leave nothing "
                         f"of the {sc.duration_s:g} s duration; shorten them")
    return replace(sc, warmup_s=warm, cooldown_s=cool)


def _endpoint(sc: Scenario, endpoint: str | None, prompt_ids: bool) -> Scenario:
    """`--endpoint` and `--prompt-ids` over the scenario's `[request]`, checked as the
    file's would be (before `--conversation`, which is then checked against them)."""
    if (endpoint is None or endpoint == sc.endpoint) and not prompt_ids:
        return sc
    from anvil_metrics.load.scenario import scenario_from_dict, scenario_to_dict

    doc = scenario_to_dict(sc)
    doc["request"]["endpoint"] = endpoint or sc.endpoint
    doc["request"]["prompt_ids"] = prompt_ids or sc.prompt_ids
    flags = " ".join(f for f, on in ((f"--endpoint {endpoint}", endpoint is not None),
                                     ("--prompt-ids", prompt_ids)) if on)
    checked = scenario_from_dict(doc, source=flags)
    return replace(sc, endpoint=checked.endpoint, prompt_ids=checked.prompt_ids)


def _cancel(sc: Scenario, rate: float | None, after: str | None) -> Scenario:
    """`--cancel-rate` and `--cancel-after` over the scenario's `[cancel]`."""
    if rate is None and after is None:
        return sc
    from anvil_metrics.load.cancel import cancel_from_flags

    sc = replace(sc, cancel=cancel_from_flags(sc.cancel, rate, after, sc.context_seed))
    if sc.endpoint == "embeddings" and sc.cancel is not None and sc.cancel.after == "decode":
        raise UsageError("--cancel-after 'decode' is not allowed with --endpoint "
                         "embeddings (nothing is decoded); use prefill or a time in ms")
    return sc


def _no_budget(plan: Any) -> Any:
    """A `[conversation]` without its budget of conversations (a duration or a sweep ends
    the run instead)."""
    return plan if plan is None else replace(plan, conversations=None)


def _sweep(v: Mapping[str, Any], sc: Scenario) -> Scenario:
    """`--steps` / `--rates` / `--step-duration` over the scenario's sweep (if any)."""
    users, step_rates, step_s = v["steps"], v["rates"], v["step_duration"]
    if users is None and step_rates is None:
        if step_s is not None and sc.step_duration_s is None:
            raise UsageError(f"--step-duration {step_s:g} needs --steps or --rates")
        if step_s is None:
            return sc
        users, step_rates = sc.step_users, sc.step_rates
    if users is not None and step_rates is not None:
        raise UsageError("--steps and --rates exclude each other: a sweep changes users or "
                         "a rate")
    step_s = step_s if step_s is not None else sc.step_duration_s
    if step_s is None:
        raise UsageError("--steps/--rates need --step-duration, e.g. --step-duration 60s")
    for flag, dest in (("--requests", "requests"), ("--duration", "duration"),
                       ("--rate", "rate")):
        if v[dest] is not None and not (dest == "rate" and users is not None):
            raise UsageError(f"{flag} {v[dest]} is not allowed with a sweep: it lasts its "
                             "steps × --step-duration" + (", each step at its own rate"
                                                          if dest == "rate" else ""))
    n = len(users or step_rates or ())
    arrivals = sc.arrivals if users is not None else None
    if step_rates is not None:
        mean = sum(step_rates) / len(step_rates)
        arrivals = _arrivals({**v, "rate": mean}, sc.arrivals)
    return replace(sc, step_users=users, step_rates=step_rates, step_duration_s=step_s,
                   requests=None, duration_s=step_s * n, arrivals=arrivals,
                   conversation=_no_budget(sc.conversation))


def run_options(values: Mapping[str, Any], *, host: str, users: int | None,
                api_key: str | None, run_time_s: float | None = None,
                stop_timeout_s: float | None = None,
                headers: Sequence[tuple[str, str]] = ()) -> RunOptions:
    """The one conversion, for `anvil run` and for Locust (CLI or web form): check every
    plugin option in `values` (dest -> raw or typed value), load the scenario (none: the
    built-in defaults) and apply the overrides; `users` (None: the scenario's) becomes its
    concurrency; `run_time_s` (Locust's own -t) is the duration when --duration is not
    given. `api_key` and `headers` (each `--header`, checked) are resolved by the caller
    (they never travel in `values`); the headers go over the scenario's `[headers]`. Raises
    UsageError naming the bad option."""
    from anvil_metrics.load.scenario import (
        load_scenario,
        scenario_from_dict,
        with_conversation,
        with_overrides,
    )

    v = {o.dest: o.value(values.get(o.dest)) for o in LOCUST_OPTIONS if not o.secret}
    if v["scenario"]:
        sc = load_scenario(v["scenario"])
    else:
        sc = scenario_from_dict({"measurement_protocol": "adhoc"}, source="built-in defaults")
    sc = _endpoint(sc, v["endpoint"], v["prompt_ids"])
    if v["conversation"]:
        sc = with_conversation(sc, v["conversation"])
    sc = with_overrides(sc, requests=v["requests"], concurrency=users,
                        max_tokens=v["max_tokens"], model=v["model"],
                        warmup_requests=v["warmup_requests"],
                        duration_s=v["duration"] or run_time_s,
                        arrivals=_arrivals(v, sc.arrivals) if v["rates"] is None else None,
                        goodput=v["goodput"])
    sc = _sweep(v, sc)
    if v["duration"] is not None and v["requests"] is None and sc.load_mode == "budget" and (
            (v["conversation"] or {}).get("conversations") is None):
        # --duration asks for a duration run: the scenario's request count does not end it
        # (give --requests too for a budget with a time limit; Locust's own -t stays a
        # time limit on the scenario's budget)
        sc = replace(sc, requests=None, conversation=_no_budget(sc.conversation))
    sc = _windows(sc, v["warmup"], v["cooldown"])
    if v["trace"] is not None:
        from anvil_metrics.load.replay import replay_scenario

        sc = replay_scenario(sc, v)
    if v["dataset"] is not None:
        from anvil_metrics.load.replay import dataset_scenario

        sc = dataset_scenario(sc, v)
    if v["models"] is not None or v["model_assignment"] is not None:
        from anvil_metrics.load.mix import models_from_flags

        sc = replace(sc, mix=models_from_flags(sc.mix, v["models"], v["model_assignment"],
                                               sc.context_seed))
    sc = _cancel(sc, v["cancel_rate"], v["cancel_after"])
    if headers or sc.headers:
        sc = replace(sc, headers=with_api_key(merged(sc.headers, headers), api_key))
    given = {key: v[key] for key in PROVENANCE if v[key] is not None}
    if given:  # the flags override the scenario's [meta]
        sc = replace(sc, meta={**sc.meta, **given})
    if not host:
        raise UsageError("no host: pass -H/--host URL, e.g. -H http://127.0.0.1:8000")
    return RunOptions(
        scenario=sc, host=host, users=sc.concurrency, results_dir=v["results_dir"],
        run_dir=v["run_dir"], api_key=api_key, run_nonce=v["run_nonce"],
        recalibrate=v["recalibrate"], tokenizer_path=v["tokenizer"],
        stop_timeout_s=stop_timeout_s, server_metrics=not v["no_server_metrics"],
        server_metrics_url=v["server_metrics_url"],
        server_metrics_interval_s=v["server_metrics_interval"] or 1.0,
        abort=AbortRule(v["abort_after_failures"], v["abort_failure_ratio"],
                        v["abort_window"], v["stop_overloaded"]))
