"""`runs/locustfix`: Locust's defaults are computed once per process, equal to Locust's own,
and a worker's spawn-message filter costs one computation, not one per option."""

from __future__ import annotations

from locust import argument_parser

from anvil_metrics.runs import locustfix, plugin  # noqa: F401  (the plugin installs it)


def test_the_plugin_installs_it_once_and_the_defaults_are_locusts_own() -> None:
    installed = argument_parser.default_args_dict
    locustfix.install()  # again: nothing changes
    assert argument_parser.default_args_dict is installed
    original = locustfix.uncached()
    assert original is not installed
    assert installed() == original()
    assert "host" in installed() and "num_users" in installed()


def test_each_call_gets_its_own_copy() -> None:
    first = argument_parser.default_args_dict()
    first["host"] = "changed"
    first["added"] = 1
    again = argument_parser.default_args_dict()
    assert again["host"] != "changed" and "added" not in again


def test_a_spawn_message_filter_builds_the_parser_once(monkeypatch) -> None:
    """The worker's comprehension (`WorkerRunner.handle_message`) calls the function once
    per option of the message: the parser is built once whatever their number."""
    built = []
    real_parser = argument_parser.get_empty_argument_parser

    def counting_parser(*args, **kwargs):
        built.append(1)
        return real_parser(*args, **kwargs)

    monkeypatch.setattr(argument_parser, "get_empty_argument_parser", counting_parser)
    monkeypatch.setattr(argument_parser, "default_args_dict", locustfix.uncached())
    locustfix.install()
    options = {**locustfix.uncached()(), **{f"anvil_option_{i}": i for i in range(150)}}
    built.clear()
    custom = {k: v for k, v in options.items() if k not in argument_parser.default_args_dict()}
    assert len(custom) == 150 and len(built) == 1



def test_a_csv_writer_whose_files_were_closed_ends_quietly(tmp_path, monkeypatch) -> None:
    """Locust's shutdown closes the CSV files without stopping the loop that writes them:
    with the repair the loop's next pass ends it quietly; Locust's own loop raised there."""
    import gevent
    from locust import stats
    from locust.env import Environment

    monkeypatch.setattr(stats, "CSV_STATS_INTERVAL_SEC", 0.01)
    env = Environment()
    env.create_local_runner()
    outcomes = {}
    for name, loop_of in (("repaired", lambda w: w.stats_writer),
                          ("locust", lambda w: locustfix.original_csv_writer().__get__(w))):
        writer = stats.StatsCSVFileWriter(env, stats.PERCENTILES_TO_REPORT,
                                          str(tmp_path / name))
        loop = gevent.spawn(loop_of(writer))
        gevent.sleep(0.05)  # a few passes
        writer.close_files()
        loop.join(timeout=2)
        assert loop.dead
        outcomes[name] = loop.exception
        assert (tmp_path / f"{name}_stats.csv").read_text().startswith("Type,Name")
    env.runner.quit()
    assert outcomes["repaired"] is None
    assert isinstance(outcomes["locust"], ValueError)


def test_a_stop_logs_the_caller_locust_names_without_reading_any_source(monkeypatch,
                                                                         caplog) -> None:
    """`Runner.stop`'s debug line names the same caller as with Locust's own `inspect`
    (`LocalRunner.stop`, which calls it), and no module's source is looked up for it
    (`inspect.getmodule` mapped every loaded module's file)."""
    import inspect
    import logging

    from locust import User, constant, runners
    from locust.env import Environment

    class Idle(User):
        wait_time = constant(1)

    def stop_line() -> str:
        runner = Environment(user_classes=[Idle]).create_local_runner()
        runner.state = "running"  # `stop` returns at once from "stopped"
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="locust.runners"):
            runner.stop()
        (line,) = [r.getMessage() for r in caplog.records if "called from" in r.getMessage()]
        return line

    assert runners.inspect is locustfix.CallerOnly
    repaired = stop_line()
    monkeypatch.setattr(runners, "inspect", inspect)
    assert stop_line() == repaired
    assert "locust/runners.py:" in repaired

    monkeypatch.setattr(runners, "inspect", locustfix.CallerOnly)
    looked_up = []
    monkeypatch.setattr(inspect, "getmodule", lambda *a, **k: looked_up.append(a))
    monkeypatch.setattr(inspect, "findsource", lambda *a, **k: looked_up.append(a))
    assert stop_line() == repaired
    assert looked_up == []
