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
