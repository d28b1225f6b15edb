"""anvil's options, declared once: `anvil run`'s flags and the Locust plugin's are made here.

Why one table: the same option reaches anvil by two roads — `anvil run`'s argparse, and
Locust's own parser (configargparse; its custom arguments are also the fields of the web
UI's start form). Declared twice, the names, defaults, help and checks drift apart. So
`OPTIONS` holds one frozen `Option` per flag: the run's own (host, results folder, API
key, ...) here, and one for each flag of the scenario's table (`scenariofields.FLAGS`: the
key it sets, its kind, its help). `cli/run.py` and `runs/plugin.py` only walk it, and
`run_options` is the one conversion of parsed values (typed by argparse, or strings from
Locust's parser and form) into the `RunOptions` a run starts from: the scenario flags
become keys of the scenario's document, over the file's, checked with it
(`scenario.scenario_with_flags`).

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
from anvil_metrics.load.hookspec import HookSpec, hook_spec, hook_text
from anvil_metrics.load.optionvalues import (
    BOOL,
    Parse,
    error_share,
    metrics_target,
    metrics_targets,
    nonce,
    otlp_endpoint,
    ratio,
    seconds,
    text,
    timespan,
    tokenizer_file,
    whole,
)
from anvil_metrics.load.scenariofields import FLAGS, Flag

if TYPE_CHECKING:  # the scenario module only when a run is actually made
    from anvil_metrics.load.scenario import Given, Scenario

# Locust's --stop-timeout as anvil sets its default: after a duration (or Stop), requests in
# flight get this long to finish and count; those still open are recorded as `cancelled`.
# Locust's own default (0) would cut every stream in flight, and the longest requests would
# be the ones lost (a bias towards short ones); AIPerf's grace period after its
# --benchmark-duration is 30 s by default too. Set --stop-timeout to change it.
STOP_TIMEOUT_S = 30
OTLP_INTERVAL_S = 5.0  # --otlp-interval's default (the SDK's own, 60 s, is a whole short run)
PROGRESS_EVERY_S = 10.0  # the live progress's plain line, off a terminal (--progress-every)


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
    key: str | None = None  # the scenario key it sets (`scenariofields.FLAGS`); None: the run's

    @classmethod
    def of(cls, flag: Flag) -> Option:
        """The option of a scenario flag (a `BOOL` one is a switch, off by default)."""
        switch = flag.parse is BOOL
        return cls(flag.name, flag.help, flag.parse, False if switch else None,
                   short=flag.short, switch=switch, locust=flag.locust, key=flag.key,
                   repeat=flag.repeat, web_ui=not flag.repeat)

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
        if self.repeat and self.key is not None and isinstance(raw, list):
            # a scenario flag given many times: each text checked, its lists joined
            parts = [self.parse(self.flag, x.strip()) if isinstance(x, str) else x
                     for x in raw]
            return [v for part in parts for v in part] or self.default
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
    Option("--host", "endpoint, e.g. http://127.0.0.1:8000; replicas with no router in "
           "front: URL,URL (requests round-robin by request index)", short="-H", required=True,
           locust=False),
    *(Option.of(f) for f in FLAGS),
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
           "scraped by a separate process during the run: benchmark.json's server block; "
           "ROLE=URL for each server of a topology (repeatable: prefill=URL decode=URL): "
           "server.roles", metrics_target, repeat=True,
           # no form field: Locust's form turns a list default's text into ints (POST
           # /swarm answered 500; test_plugin holds every repeated flag out of the form)
           web_ui=False),
    Option("--no-server-metrics", "do not scrape the server's metrics", switch=True,
           default=False),
    Option("--server-metrics-interval", "seconds between metrics scrapes (default 1)", seconds),
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
    Option("--progress-every", "off a terminal (a pipe, a file, CI), print the run's "
           "progress as one plain line this often, e.g. 30s (default 10s; on a terminal it "
           "is redrawn in place)", timespan, default=PROGRESS_EVERY_S, web_ui=False),
    Option("--quiet", "no live progress (neither the display nor the plain lines)",
           switch=True, default=False, web_ui=False),
    Option("--fail-on-error-rate", "exit 4 when more than this fraction of the measured "
           "requests failed (the server's failures; cancelled ones are not), e.g. 0.05; a run "
           "whose every measured request failed exits 4 without it", error_share),
    Option("--exit-code-on-error", "Locust's own: exit with this code when any request "
           "Locust counted failed, warm-ups included (anvil's default: 0; exit codes 3 and 4 "
           "come first)", whole(0, 255), locust=False),
    Option("--reset-prefix-cache", "reset the server's prefix cache before the measured "
           "load and before each sweep step: auto (vLLM POST /reset_prefix_cache, SGLang "
           "POST /flush_cache), a URL to POST, or cmd:COMMAND; a trailing ? = optional",
           hook_text),
    Option("--server-profile", "profile the measured load on the server: vLLM/SGLang POST "
           "/start_profile once the warm-ups are done, /stop_profile when the measured load "
           "ends (before the requests in flight drain)", switch=True, default=False),
    Option("--profile-when-running", "with --server-profile: start the profile only once the "
           "server reports at least this many requests running (its metrics' newest sample)",
           whole(1)),
    Option("--profile-max-s", "with --profile-when-running: stop the profile after this "
           "many seconds at most (default 30)", seconds),
    Option("--hook-optional", "a failing hook is recorded and the run goes on (default: it "
           "stops the run before load)", switch=True, default=False),
    Option("--otlp-endpoint", "push the live figures as OpenTelemetry metrics (OTLP over "
           "HTTP/protobuf) to this receiver, e.g. http://127.0.0.1:4318 (/v1/metrics is "
           "added); default $OTEL_EXPORTER_OTLP_ENDPOINT; needs anvil-metrics[otlp]",
           otlp_endpoint),
    Option("--otlp-interval", "with --otlp-endpoint: seconds between pushes, e.g. 10s "
           "(default 5s; one more when benchmark.json is written)", timespan,
           default=OTLP_INTERVAL_S),
    Option("--processes", "load processes on this host (Locust's --processes: a master and "
           "this many workers, one exact result); default 1", whole(1), default=1,
           locust=False),
)

RUN_OPTIONS = tuple(o for o in OPTIONS if o.run)
SCENARIO_OPTIONS = tuple(o for o in OPTIONS if o.key is not None)
LOCUST_OPTIONS = tuple(o for o in OPTIONS if o.locust)


FLAGS_BY_NAME = {f.name: f for f in FLAGS}


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
        elif o.repeat:  # once per value given (a value's list comma-separated)
            for x in v:
                out += [o.flag, ",".join(map(str, x)) if isinstance(x, list) else str(x)]
        elif isinstance(v, tuple | list):  # --steps, --rates: as typed, comma-separated
            out += [o.flag, ",".join(map(str, v))]
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
    server_metrics_roles: tuple[tuple[str, str], ...] = ()  # (role, URL): one child each
    server_metrics_interval_s: float = 1.0
    abort: AbortRule = DEFAULT_ABORT  # when the run ends itself: the server is not answering
    fail_on_error_rate: float | None = None  # exit 4 above this error rate (`post.outcome`)
    # derive the running figures of the web UI's LLM tab and /anvil/metrics as records come
    # in (`live.figures`): only a process with a web UI shows them, and at high open-loop
    # rates their derivation competes with due requests for the event loop
    live_figures: bool = True
    # the live progress (`live.progresswatch`): its plain line's interval; None: --quiet
    progress_every_s: float | None = PROGRESS_EVERY_S
    reset_prefix_cache: HookSpec | None = None  # --reset-prefix-cache (`live/hooks.py`)
    profile: bool = False  # --server-profile: /start_profile, /stop_profile around the load
    hook_optional: bool = False  # --hook-optional: a failing hook does not stop the run
    profile_when_running: int | None = None  # --profile-when-running: its start's trigger
    profile_max_s: float | None = None  # --profile-max-s: the triggered profile's bound
    otlp_endpoint: str | None = None  # --otlp-endpoint (`live/otlp.py`); None: no push
    otlp_interval_s: float = OTLP_INTERVAL_S


def scenario_flags(values: Mapping[str, Any]) -> list[Given]:
    """The scenario flags in `values` (dest -> raw or typed value), each checked and as
    given: its text (what its errors show) and the keys it sets (a switch: only when on)."""
    from anvil_metrics.load.scenario import Given

    out = []
    for o in SCENARIO_OPTIONS:
        raw = values.get(o.dest)
        value = o.value(raw)
        if value is not None and value is not False:
            shown = (None if o.switch else raw.strip() if isinstance(raw, str) else
                     ",".join(map(str, value)) if o.repeat else str(raw))
            out.append(Given(o.flag, shown, FLAGS_BY_NAME[o.flag].sets(value)))
    return out


# Locust's -t: the scenario's duration (its budget, if any, then has a time limit) unless it
# has one, or a sweep or trace that makes its own
_ENDS = ("duration", "steps", "rates", "trace")


def run_options(values: Mapping[str, Any], *, host: str, users: int | str | None,
                api_key: str | None, run_time_s: float | None = None,
                stop_timeout_s: float | None = None,
                headers: Sequence[tuple[str, str]] = ()) -> RunOptions:
    """The one conversion, for `anvil run` and for Locust (CLI or web form): check every
    option in `values` (dest -> raw or typed value), read the scenario (none: the built-in
    defaults) and put the scenario flags' keys over it, checked as one document; `users`
    (None: the scenario's) is its concurrency; `run_time_s` (Locust's own -t) its duration
    when it has none. `api_key` and `headers` (each `--header`, checked) are resolved by
    the caller (they never travel in `values`); the headers go over the scenario's
    `[headers]`. Raises UsageError naming the bad option."""
    from anvil_metrics.load.replay import read_inputs
    from anvil_metrics.load.scenario import read_scenario, scenario_with_flags

    v = {o.dest: o.value(values.get(o.dest)) for o in OPTIONS
         if not o.secret and o.key is None}
    given = scenario_flags({**values, "users": values.get("users") if users is None
                            else users})
    doc = read_scenario(v["scenario"]) if v["scenario"] else {"measurement_protocol": "adhoc"}
    if run_time_s and not any(k in doc or any(g.gave(k) for g in given) for k in _ENDS):
        doc = {**doc, "duration": run_time_s}  # the file's own, not a flag over its budget
    sc = scenario_with_flags(doc, given, v["scenario"] or "built-in defaults")
    sc = read_inputs(sc)
    if headers or sc.headers:
        sc = replace(sc, headers=with_api_key(merged(sc.headers, headers), api_key))
    metrics_urls = metrics_targets("--server-metrics-url", v["server_metrics_url"])
    if not host:
        raise UsageError("no host: pass -H/--host URL, e.g. -H http://127.0.0.1:8000")
    return RunOptions(
        scenario=sc, host=host, users=sc.concurrency, results_dir=v["results_dir"],
        run_dir=v["run_dir"], api_key=api_key, run_nonce=v["run_nonce"],
        recalibrate=v["recalibrate"], tokenizer_path=v["tokenizer"],
        stop_timeout_s=stop_timeout_s, server_metrics=not v["no_server_metrics"],
        server_metrics_url=metrics_urls[0], server_metrics_roles=metrics_urls[1],
        server_metrics_interval_s=v["server_metrics_interval"] or 1.0,
        abort=AbortRule(v["abort_after_failures"], v["abort_failure_ratio"],
                        v["abort_window"], v["stop_overloaded"]),
        progress_every_s=None if v["quiet"] else v["progress_every"],
        fail_on_error_rate=v["fail_on_error_rate"],
        reset_prefix_cache=_optional(v["reset_prefix_cache"], v["hook_optional"]),
        profile=v["server_profile"] or v["profile_when_running"] is not None,
        hook_optional=v["hook_optional"], profile_when_running=v["profile_when_running"],
        profile_max_s=v["profile_max_s"],
        otlp_endpoint=_otlp(v["otlp_endpoint"]),
        otlp_interval_s=v["otlp_interval"])


OTLP_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"  # the SDK's own variable, used when the flag is absent
OTLP_EXTRA = ("opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp.proto.http")


def _otlp(url: str | None) -> str | None:
    """--otlp-endpoint's URL (the `[otlp]` extra must be installed: a UsageError before any
    load if not), else $OTEL_EXPORTER_OTLP_ENDPOINT's when it is a URL anvil can push to and
    the extra is installed: the variable may be set for other software on the host, so a
    value anvil cannot use is one warning line and no push, never a refused run."""
    import importlib.util
    import logging
    import os

    def installed() -> bool:
        try:
            return all(importlib.util.find_spec(m) is not None for m in OTLP_EXTRA)
        except ImportError:  # a parent package is missing
            return False

    if url is not None:
        if not installed():
            raise UsageError("--otlp-endpoint needs the OpenTelemetry SDK: "
                             "pip install 'anvil-metrics[otlp]'")
        return url
    text = os.environ.get(OTLP_ENV, "").strip()
    if not text:
        return None
    try:
        url = otlp_endpoint(f"${OTLP_ENV}", text)
    except UsageError as e:
        logging.getLogger("anvil").warning("anvil: no OTLP push: %s", e)
        return None
    if not installed():
        logging.getLogger("anvil").warning(
            "anvil: $%s is set but the OpenTelemetry SDK is not installed (pip install "
            "'anvil-metrics[otlp]'): no OTLP push", OTLP_ENV)
        return None
    return url


def _optional(text: str | None, optional: bool) -> HookSpec | None:
    """The hook given as `text`, marked optional by --hook-optional too (its own `?` marks
    it anyway)."""
    if text is None:
        return None
    spec = hook_spec("--reset-prefix-cache", text)
    return replace(spec, optional=True) if optional else spec
