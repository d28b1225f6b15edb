"""plugin: the API key taken out of Locust's options and argv before any page is served,
Locust's parsed options typed into a run's options, the first error kept in the run
folder, and a run that cannot start ended with one log line and exit code 2.

Why: Locust's web UI re-parses argv to fill its form, so a key left there is served in
the page; and a run that fails to start must end rather than leave users idling forever.
"""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import pytest
from locust.argument_parser import get_empty_argument_parser

from anvil_metrics.errors import UsageError
from anvil_metrics.live.runctx import run_in_progress
from anvil_metrics.live.runerror import read_error
from anvil_metrics.load.options import LOCUST_OPTIONS, STOP_TIMEOUT_S
from anvil_metrics.runs import plugin


@pytest.fixture(autouse=True)
def _fresh_argv_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    for k in ("ANVIL_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(k, raising=False)


def _parsed(*argv: str) -> Any:
    parser = get_empty_argument_parser(add_help=False)
    plugin.add_options(parser)
    return parser.parse_args(list(argv))


def test_every_option_is_on_locusts_parser_with_anvils_stop_timeout() -> None:
    parser = get_empty_argument_parser(add_help=False)
    plugin.add_options(parser)
    flags = {a.option_strings[0] for a in parser._actions if a.option_strings}
    assert {o.flag for o in LOCUST_OPTIONS} <= flags
    assert parser.get_default("stop_timeout") == STOP_TIMEOUT_S
    key = next(a for a in parser._actions if "--api-key" in a.option_strings)
    assert getattr(key, "is_secret", False) is True


def test_the_key_leaves_the_options_and_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["locust", "--api-key", "sk-1", "--api-key=sk-2", "-u",
                                      "3"])
    env = SimpleNamespace(parsed_options=SimpleNamespace(api_key=" sk-1 "))
    plugin.take_secrets(env)
    assert env.parsed_options.api_key == "" and plugin.plugin_state(env).api_key == "sk-1"
    assert sys.argv == ["locust", "--api-key", "", "--api-key=", "-u", "3"]


def test_header_flags_leave_the_options_and_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """`locust --header`: a header may be a credential, so every value leaves argv (Locust's
    web UI re-parses it) and the options; they are checked when the run starts."""
    monkeypatch.setattr(sys, "argv", ["locust", "--header", "X-Api-Key=sk-1",
                                      "--header=X-Tenant=a", "-u", "3"])
    env = SimpleNamespace(parsed_options=SimpleNamespace(header=["X-Api-Key=sk-1",
                                                                 "X-Tenant=a"]))
    plugin.take_secrets(env)
    assert env.parsed_options.header == []
    state = plugin.plugin_state(env)
    assert state.header_flags == ["X-Api-Key=sk-1", "X-Tenant=a"]
    assert sys.argv == ["locust", "--header", "", "--header=", "-u", "3"]
    monkeypatch.setenv("ANVIL_HEADERS", '{"X-Team": "blue"}')  # `anvil run`'s flags
    assert plugin._header_flags(state) == [("X-Team", "blue"), ("X-Api-Key", "sk-1"),
                                           ("X-Tenant", "a")]
    state.header_flags = ["X-Tenant"]
    with pytest.raises(UsageError, match="'X-Tenant' is not allowed; use KEY=VALUE"):
        plugin._header_flags(state)
    monkeypatch.setenv("ANVIL_HEADERS", "[1]")
    with pytest.raises(UsageError, match=r"\$ANVIL_HEADERS is not allowed as set"):
        plugin._header_flags(state)


def _environment(parsed: Any, host: str = "http://127.0.0.1:9",
                 web_ui: Any = None) -> SimpleNamespace:
    return SimpleNamespace(parsed_options=parsed, runner=SimpleNamespace(target_user_count=5),
                           host=host, stop_timeout=12, shape_class=None, web_ui=web_ui)


def test_options_from_locust_types_the_form() -> None:
    parsed = _parsed("--requests", "7", "--model", "m", "--api-key", "sk-typed")
    parsed.num_users, parsed.run_time = 1, None
    opts = plugin.options_from_locust(_environment(parsed))
    assert (opts.users, opts.host, opts.stop_timeout_s) == (5, "http://127.0.0.1:9", 12.0)
    assert (opts.scenario.requests, opts.scenario.meta["model"]) == (7, "m")
    assert opts.api_key == "sk-typed" and parsed.api_key == ""  # typed in the form: moved
    assert opts.live_figures is True  # --headless: the live progress shows them


def test_the_running_figures_are_derived_under_a_web_ui_or_the_progress() -> None:
    parsed = _parsed("--requests", "7")
    parsed.num_users, parsed.run_time = 1, None
    assert plugin.options_from_locust(_environment(parsed, web_ui=object())).live_figures
    assert plugin.options_from_locust(_environment(parsed, web_ui=None)).live_figures
    quiet = _parsed("--requests", "7", "--quiet")
    quiet.num_users, quiet.run_time = 1, None
    assert not plugin.options_from_locust(_environment(quiet, web_ui=None)).live_figures
    assert plugin.options_from_locust(_environment(quiet, web_ui=object())).live_figures


def test_the_first_error_goes_to_the_run_folder(tmp_path: Path) -> None:
    env = SimpleNamespace(parsed_options=SimpleNamespace(run_dir=str(tmp_path)))
    plugin.report_errors(env)
    try:
        logging.getLogger("anvil").error("anvil: first")
        logging.getLogger("anvil").error("anvil: second")
    finally:
        logging.getLogger("anvil").removeHandler(plugin.plugin_state(env).error_file)
    assert read_error(tmp_path) == "anvil: first"


def test_a_run_that_cannot_start_ends_with_exit_code_2(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    with socket.socket() as s:  # a port on 127.0.0.1 that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    parsed = _parsed("--requests", "1")
    parsed.num_users, parsed.run_time, parsed.headless = 1, None, True
    quit_calls: list[bool] = []
    env = _environment(parsed, host=f"http://127.0.0.1:{port}")
    env.runner.quit = lambda: quit_calls.append(True)
    with caplog.at_level(logging.ERROR, logger="anvil"):
        plugin.on_test_start(env)
        gevent.sleep(0)  # the spawned quit runs
    assert env.process_exit_code == 2 and quit_calls == [True]
    assert run_in_progress(env) is None
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith(
        f"anvil: cannot reach http://127.0.0.1:{port}/v1/models")


def test_the_listeners_share_one_state_per_environment(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setattr(sys, "argv", ["locust"])
    parsed = _parsed("--requests", "2", "--api-key", "sk-init")
    parsed.num_users, parsed.run_time = 1, None
    env, other = _environment(parsed), _environment(_parsed("--requests", "2"))
    other.parsed_options.num_users, other.parsed_options.run_time = 1, None
    plugin.take_secrets(env)  # init: the key leaves the options for the state
    assert parsed.api_key == "" and getattr(env, plugin.PLUGIN_ATTR).api_key == "sk-init"
    assert plugin.options_from_locust(env).api_key == "sk-init"  # read back at the start
    assert plugin.plugin_state(env) is plugin.plugin_state(env)
    assert plugin.options_from_locust(other).api_key is None  # another process's own
    assert "global " not in Path(plugin.__file__).read_text()


def test_the_user_controls_start_the_runner_and_read_its_target() -> None:
    started: list[tuple[int, float]] = []
    runner = SimpleNamespace(target_user_count=3, start=lambda n, r: started.append((n, r)))
    env = SimpleNamespace(runner=runner, parsed_options=SimpleNamespace(spawn_rate=2),
                          shape_class=None)
    controls = plugin._user_controls(env)
    assert controls.users_now is not None and controls.set_users is not None
    assert controls.users_now() == 3 and controls.shaped is False
    runner.target_user_count = 8
    assert controls.users_now() == 8
    controls.set_users(5)
    gevent.sleep(0)  # the spawned start runs
    assert started == [(5, 5.0)]  # every user within a second (at least the spawn rate)
    env.shape_class = object
    assert plugin._user_controls(env).shaped is True


def test_init_brings_the_loops_clock_up_to_now() -> None:
    """Locust sets its `-t` timer from the loop's cached clock right after `init`: blocking
    work since the loop last turned (a process's imports) must not come off the run time."""
    from gevent.monkey import get_original

    blocking_sleep = get_original("time", "sleep")  # Locust's patching made time.sleep yield
    loop = gevent.get_hub().loop
    loop.update_now()
    before = loop.now()
    blocking_sleep(0.05)  # as imports block: the loop does not turn
    assert loop.now() == before  # cached
    plugin.fresh_loop_clock()
    assert loop.now() - before >= 0.05


ALL_FAILED = {"requests": 2, "failures": [{"kind": "timeout"}, {"kind": "timeout"}]}
ONE_FAILED = {"requests": 4, "failures": [{"kind": "http_error"}]}


@pytest.mark.parametrize("ended_by,summary,rate,set_before,exceptions,want", [
    ("requests", ALL_FAILED, None, None, {}, 4),
    ("requests", ONE_FAILED, None, None, {}, None),  # some failed: Locust's default, 0
    ("requests", ONE_FAILED, 0.2, None, {}, 4),
    ("requests", ONE_FAILED, 0.25, None, {}, None),
    ("signal", ALL_FAILED, None, 130, {}, 130),  # a signal's code stays
    ("aborted", ALL_FAILED, None, 3, {}, 3),  # `_finish` set 3 before the file was written
    ("requests", None, None, None, {"x": 1}, 1),  # a user's task raised: a bug
])  # fmt: skip
def test_a_runs_end_sets_the_exit_code_the_table_says(ended_by: str, summary: dict | None,
                                                      rate: float | None, set_before: int | None,
                                                      exceptions: dict, want: int | None) -> None:
    session = SimpleNamespace(ended_by=ended_by, summary=summary,
                              opts=SimpleNamespace(fail_on_error_rate=rate))
    env = SimpleNamespace(process_exit_code=set_before,
                          runner=SimpleNamespace(exceptions=exceptions))
    plugin._exit_code(env, session)  # type: ignore[arg-type]
    assert env.process_exit_code == want


def test_no_form_field_has_a_list_default() -> None:
    """Locust's start form turns a field's text into its default's type, a list's items
    into ints: a repeated flag there made POST /swarm answer 500 (its "" is no int)."""
    from locust.argument_parser import LocustArgumentParser

    from anvil_metrics.runs.plugin import add_options

    parser = LocustArgumentParser()
    add_options(parser)
    shown = [a for a in parser._actions
             if a.option_strings and getattr(a, "include_in_web_ui", True)]
    assert shown and not [a.dest for a in shown if isinstance(a.default, list)]
    assert any(a.dest == "server_metrics_url" for a in parser._actions)
