"""anvil's options are declared once (`options.OPTIONS`): `anvil run`'s argparse and the
Locust plugin's parser are both made from it, and one function types their values. Also the
pieces that replaced module globals and log scraping: the run context on Locust's
`Environment`, `error.json`, and the API key's environment lookup."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import write_scenario
from locust.argument_parser import get_empty_argument_parser
from locust.env import Environment

from anvil_metrics.cli import main as cli
from anvil_metrics.cluster.wire import WorkerSetup
from anvil_metrics.cluster.worker import WorkerSession
from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.runctx import RunContext, TicketSource, latest_run, run_in_progress, set_run
from anvil_metrics.live.runerror import ERROR_FILE, ErrorFile, read_error
from anvil_metrics.live.session import RunSession
from anvil_metrics.live.users import ChatUser
from anvil_metrics.load.body import BodyBuilder
from anvil_metrics.load.options import OPTIONS, RunOptions, locust_args, run_options
from anvil_metrics.load.scenario import Scenario, scenario_from_dict
from anvil_metrics.prep.prompts import NO_CALIBRATION, PromptFactory
from anvil_metrics.runs import plugin
from anvil_metrics.urls import Endpoint, api_key_from_env

SCENARIO = """\
measurement_protocol = "options"
concurrency = 2
requests = 4
max_tokens = 64
context_tokens = 8192
max_context_tokens = 8192
[context_distribution]
300 = 4
"""


def _run_parser() -> argparse.ArgumentParser:
    sub = next(a for a in cli.build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return sub.choices["run"]


def _locust_parser() -> Any:
    parser = get_empty_argument_parser(add_help=False)
    plugin.add_options(parser)
    return parser


def _by_flag(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.option_strings[0]: a for a in parser._actions if a.option_strings}


# --- one table, two parsers ----------------------------------------------------------------


def test_anvil_run_parser_is_the_table() -> None:
    actions = _by_flag(_run_parser())
    for o in OPTIONS:
        if not o.run:
            assert o.flag not in actions, o.flag
            continue
        a = actions.pop(o.flag)
        assert a.option_strings == [o.flag, *([o.short] if o.short else [])]
        assert (a.dest, a.default, a.help, a.required) == (o.dest, o.default, o.help,
                                                           o.required), o.flag
        assert (a.nargs == 0) == o.switch, o.flag
    assert set(actions) == {"-h"}  # nothing declared beside the table


def test_locust_parser_is_the_table() -> None:
    parser = _locust_parser()
    actions = _by_flag(parser)
    web = parser.args_included_in_web_ui
    secret = parser.secret_args_included_in_web_ui
    for o in OPTIONS:
        if not o.locust:
            assert o.flag not in actions or not hasattr(actions[o.flag], "include_in_web_ui")
            continue
        a = actions[o.flag]
        assert (a.dest, a.default, a.help) == (o.dest, o.locust_default, o.help), o.flag
        assert (o.dest in web) == o.web_ui, o.flag
        assert (o.dest in secret) == (o.secret and o.web_ui), o.flag
        assert getattr(a, "is_secret", False) == o.secret, o.flag
        assert getattr(a, "env_var", None) == o.env_var, o.flag
        assert (a.nargs == 0) == o.switch, o.flag
        assert (type(a).__name__ == "_AppendAction") == o.repeat, o.flag
    anvil_dests = {o.dest for o in OPTIONS if o.locust}
    assert set(web) & anvil_dests == {o.dest for o in OPTIONS if o.locust and o.web_ui}
    assert set(secret) == {"api_key"}


def test_options_in_both_parsers_share_default_and_help() -> None:
    run, loc = _by_flag(_run_parser()), _by_flag(_locust_parser())
    both = [o for o in OPTIONS if o.run and o.locust]
    assert {o.flag for o in both} >= {"--model", "--requests", "--max-tokens", "--api-key",
                                      "--warmup-requests", "--results-dir", "--run-nonce",
                                      "--recalibrate", "--tokenizer"}
    for o in both:
        assert run[o.flag].help == loc[o.flag].help == o.help
        assert run[o.flag].default in (loc[o.flag].default, None), o.flag
        assert (run[o.flag].default or "") == (loc[o.flag].default or ""), o.flag


# --- one conversion --------------------------------------------------------------------------


def _argparse_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(argv)
    return capsys.readouterr().err


@pytest.mark.parametrize("dest,flag,value", [
    ("requests", "--requests", "abc"), ("requests", "--requests", "2.5"),
    ("max_tokens", "--max-tokens", "0"), ("warmup_requests", "--warmup-requests", "-1"),
    ("run_nonce", "--run-nonce", "no spaces"), ("run_nonce", "--run-nonce", "a" * 33),
    ("tokenizer", "--tokenizer", "/nonexistent/tokenizer.json"),
    ("stuck_after", "--stuck-after", "-1"), ("stuck_after", "--stuck-after", "soon"),
])
def test_a_bad_value_reads_the_same_on_both_roads(capsys, tmp_path: Path, dest: str,
                                                  flag: str, value: str) -> None:
    with pytest.raises(UsageError) as e:  # Locust's parser or form: strings
        run_options({dest: value}, host="http://127.0.0.1:9", users=1, api_key=None)
    assert str(e.value).startswith(f"{flag} {value!r} is not")
    err = _argparse_error(capsys, ["run", "s.toml", "-H", "http://x", flag, value])
    assert str(e.value) in err and err.startswith("anvil: ") and len(err.splitlines()) == 1


def test_typed_and_text_values_give_the_same_run_options(tmp_path: Path) -> None:
    sc = str(write_scenario(tmp_path / "s.toml", SCENARIO))
    tok = write_scenario(tmp_path / "tokenizer.json", "{}")
    argv = ["run", sc, "-H", "http://h:1", "--requests", "7", "--max-tokens", "5",
            "--warmup-requests", "0", "--model", "m", "--run-nonce", "abc", "--recalibrate",
            "--tokenizer", str(tok), "--results-dir", str(tmp_path / "r"), "-u", "3"]
    a = cli.build_parser().parse_args(argv)
    typed = run_options({o.dest: getattr(a, o.dest) for o in OPTIONS if o.run} |
                        {"scenario": a.scenario}, host=a.host, users=a.users, api_key=None)
    form = {"scenario": sc, "requests": "7", "max_tokens": " 5 ", "warmup_requests": "0",
            "model": "m", "run_nonce": "abc", "recalibrate": True, "tokenizer": str(tok),
            "results_dir": str(tmp_path / "r"), "run_dir": "", "api_key": ""}
    text = run_options(form, host="http://h:1", users=3, api_key=None)
    assert typed == text
    assert isinstance(text, RunOptions) and text.users == 3 == text.scenario.concurrency
    assert (text.scenario.requests, text.scenario.max_tokens, text.scenario.warmup_requests,
            text.scenario.meta["model"]) == (7, 5, 0, "m")
    assert (text.run_nonce, text.recalibrate, text.tokenizer_path, text.run_dir) == (
        "abc", True, str(tok), None)

    # what `anvil run` hands Locust parses back, through the plugin's options, to the same
    parsed = _locust_parser().parse_args(locust_args(vars(a) | {"scenario": sc}))
    again = run_options(vars(parsed), host="http://h:1", users=3, api_key=None)
    assert again == typed
    assert "--api-key" not in locust_args({"api_key": "sk-x", "warmup_requests": 0})
    assert "--header" not in locust_args({"header": [("X-Api-Key", "sk-x")]})
    assert locust_args({"warmup_requests": 0, "recalibrate": False}) == [
        "--warmup-requests", "0"]


def test_empty_form_fields_are_the_defaults() -> None:
    opts = run_options({o.dest: o.locust_default for o in OPTIONS if o.locust},
                       host="http://h:1", users=1, api_key="k")
    assert opts.scenario.source == "built-in defaults" and opts.results_dir == "results"
    assert (opts.run_nonce, opts.tokenizer_path, opts.recalibrate, opts.api_key) == (
        None, None, False, "k")
    with pytest.raises(UsageError, match="no host: pass -H/--host"):
        run_options({}, host="", users=1, api_key=None)


# --- the run context on the Environment ------------------------------------------------------


def _scenario() -> Scenario:
    return scenario_from_dict({"measurement_protocol": "t"})


def test_run_session_and_worker_session_are_run_contexts(tmp_path: Path) -> None:
    sc = _scenario()
    bodies = BodyBuilder(sc, "m", PromptFactory(NO_CALIBRATION, 0, "n", None, None))
    opts = RunOptions(scenario=sc, host="http://127.0.0.1:1", users=1)
    session = RunSession(opts, Endpoint.parse(opts.host), "m", NO_CALIBRATION, "run-1",
                         tmp_path, None, bodies, RequestBudget(2, 0, [4096]), {})
    session.recorder.stop()
    setup = WorkerSetup("run-1", sc, "http://127.0.0.1:1", None, "m", NO_CALIBRATION, "n",
                        None, {4096: 10}, None, [4096])
    worker = WorkerSession(setup, lambda *_: None)
    try:
        for run in (session, worker):
            assert isinstance(run, RunContext), type(run)
            assert isinstance(run.budget, TicketSource)
            assert isinstance(run.endpoint, Endpoint) and isinstance(run.scenario, Scenario)
            assert isinstance(run.bodies, BodyBuilder) and isinstance(run.worker, str)
        assert not isinstance(SimpleNamespace(budget=None), RunContext)
    finally:
        worker.finish()


def test_users_read_the_run_from_their_environment() -> None:
    env = Environment(user_classes=[ChatUser])
    user = ChatUser(env)
    user.on_start()  # no run on this Environment: the user idles, no client
    assert user.run is None and user.client is None and run_in_progress(env) is None
    stand_in = SimpleNamespace(name="run")
    set_run(env, stand_in)
    assert run_in_progress(env) is stand_in and latest_run(env) is stand_in
    set_run(env, None)  # ended: no longer in progress, still the latest (the web UI's)
    assert run_in_progress(env) is None and latest_run(env) is stand_in
    assert latest_run(Environment(user_classes=[ChatUser])) is None  # per Environment


# --- error.json and the API key -----------------------------------------------------------


def test_error_file_keeps_the_first_error_only(tmp_path: Path) -> None:
    assert read_error(tmp_path) is None
    log = logging.getLogger("anvil.test-options")
    handler = ErrorFile(tmp_path)
    log.addHandler(handler)
    try:
        log.warning("anvil: only a warning")
        assert not (tmp_path / ERROR_FILE).exists()
        log.error("anvil: cannot reach %s; check --host", "http://127.0.0.1:9/v1/models")
        log.error("anvil: a later error")
        ErrorFile(tmp_path).emit(logging.makeLogRecord({"msg": "another process",
                                                        "levelno": logging.ERROR}))
    finally:
        log.removeHandler(handler)
    assert read_error(tmp_path) == "anvil: cannot reach http://127.0.0.1:9/v1/models; " \
        "check --host"
    assert [p.name for p in tmp_path.iterdir()] == [ERROR_FILE]  # no temp file left
    (tmp_path / ERROR_FILE).write_text("{not json")
    assert read_error(tmp_path) is None


def test_api_key_from_env(monkeypatch) -> None:
    for var in ("ANVIL_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert api_key_from_env() is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert api_key_from_env() == "sk-openai"
    monkeypatch.setenv("ANVIL_API_KEY", "")
    assert api_key_from_env() == "sk-openai"  # empty is not set
    monkeypatch.setenv("ANVIL_API_KEY", "sk-anvil")
    assert api_key_from_env() == "sk-anvil"


def test_a_budget_of_conversations_is_a_budget_for_windows_sweeps_and_duration() -> None:
    """`conversations=N` ends a run as `--requests` does: no measured windows beside it;
    a sweep or `--duration` replaces the file's, not a flag's (as `--requests`), and
    `--duration` beside the flag's own budget is a time limit on it."""
    base = {"scenario": "scenarios/conversation.toml", "conversation": "conversations=4"}
    sc = run_options(base, host="http://h", users=2, api_key=None).scenario
    assert (sc.load_mode, sc.requests, sc.conversation.conversations) == ("budget", None, 4)
    with pytest.raises(UsageError, match=r"^--warmup '1s': warmup = 1.0 is not allowed; use "
                                         r"a duration run around it"):
        run_options({**base, "warmup": "1s", "duration": "5s"}, host="http://h", users=2,
                    api_key=None)
    with pytest.raises(UsageError, match=r"^--conversation 'conversations=4': conversation."
                                         r"conversations = 4 is not allowed; use no budget"):
        run_options({**base, "steps": "1,2", "step_duration": "2s"}, host="http://h",
                    users=2, api_key=None)
    limited = run_options({**base, "duration": "9s"}, host="http://h", users=2,
                          api_key=None).scenario
    assert (limited.load_mode, limited.duration_s, limited.conversation.conversations) == (
        "budget", 9.0, 4)
    file_budget = {"scenario": "scenarios/conversation.toml", "conversation": "turns=2"}
    for flags, mode in (({"duration": "9s"}, "duration"),
                        ({"steps": "1,2", "step_duration": "2s"}, "duration")):
        got = run_options({**file_budget, **flags}, host="http://h", users=2,
                          api_key=None).scenario
        assert got.load_mode == mode and got.requests is None, flags


def test_header_flags_go_over_the_scenarios_table(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO + '\n[headers]\nX-Tenant = "file"\n'
                        'X-Team = "blue"\n')
    a = cli.build_parser().parse_args(["run", str(sc), "-H", "http://h:1", "--header",
                                       "x-tenant=flag", "--header", "X-Api-Key=sk-1"])
    assert a.header == [("x-tenant", "flag"), ("X-Api-Key", "sk-1")]
    opts = run_options({o.dest: getattr(a, o.dest) for o in OPTIONS if o.run} |
                       {"scenario": a.scenario}, host=a.host, users=None, api_key=None,
                       headers=a.header)
    assert opts.scenario.headers == {"x-tenant": "flag", "X-Team": "blue", "X-Api-Key": "sk-1"}
    with pytest.raises(UsageError, match="both given; use one"):
        run_options({"scenario": str(sc)}, host="http://h:1", users=None, api_key="sk",
                    headers=[("Authorization", "Basic x")])


@pytest.mark.parametrize("text,seconds", [("1s", 1.0), ("45", 45.0), ("2m", 120.0),
                                          ("0", 0.0), ("0s", 0.0), ("", 30.0)])
def test_stuck_after_is_a_timespan_or_0_for_off(text: str, seconds: float) -> None:
    """--stuck-after sets [timeouts] stuck_after_s (30 s when not given), on both roads;
    a file holds it as seconds, and refuses anything else naming the key."""
    opts = run_options({"stuck_after": text}, host="http://h:1", users=1, api_key=None)
    assert opts.scenario.timeouts.stuck_after_s == seconds
    parsed = _locust_parser().parse_args(locust_args({"stuck_after": seconds}))
    again = run_options(vars(parsed), host="http://h:1", users=1, api_key=None)
    assert again.scenario.timeouts.stuck_after_s == seconds


def test_a_files_stuck_after_is_seconds(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO + "\n[timeouts]\nstuck_after_s = 5\n")
    opts = run_options({"scenario": str(sc)}, host="http://h:1", users=1, api_key=None)
    assert opts.scenario.timeouts.stuck_after_s == 5.0
    bad = write_scenario(tmp_path / "b.toml", SCENARIO + '\n[timeouts]\nstuck_after_s = "5s"\n')
    with pytest.raises(ScenarioError) as e:
        run_options({"scenario": str(bad)}, host="http://h:1", users=1, api_key=None)
    assert e.value.field == "timeouts.stuck_after_s"
    assert "a finite number of seconds >= 0 (0: off)" in str(e.value)
