"""`anvil`'s dispatch: every command listed has what runs it, in `--help`'s order; an
AnvilError is one line per problem and its exit code, Ctrl-C is 130, and `sim` is handed
its own command line."""

from __future__ import annotations

import subprocess

import pytest

from anvil_metrics.cli import main as cli
from anvil_metrics.errors import AnvilError, Terminated, UsageError


def commands() -> list[str]:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return list(sub.choices)


def test_every_command_but_sim_has_a_handler() -> None:
    assert set(commands()) == set(cli.HANDLERS) | {"sim"}
    assert commands()[:3] == ["run", "postprocess", "verify"]  # --help's order
    assert "{" + ",".join(commands()) + "}" in cli.build_parser().format_help()


@pytest.mark.parametrize("error,code,lines", [
    (UsageError("c.toml: name: missing\nc.toml: order: bad"), 2,
     "anvil: c.toml: name: missing\nanvil: c.toml: order: bad\n"),
    (AnvilError("the server could not be reached"), 1,
     "anvil: the server could not be reached\n"),
    (KeyboardInterrupt(), 130, "\nanvil: interrupted (Ctrl-C)\n"),  # after the echoed ^C
    (Terminated(), 143, "\nanvil: terminated (SIGTERM)\n"),
    (subprocess.TimeoutExpired("locust", 5), 1,
     "anvil: Command 'locust' timed out after 5 seconds\n"),
])
def test_a_failure_is_its_lines_and_its_exit_code(monkeypatch, capsys, error: BaseException,
                                                   code: int, lines: str) -> None:
    def fails(a: object) -> int:
        raise error
    monkeypatch.setitem(cli.HANDLERS, "metrics", fails)
    assert cli.main(["metrics"]) == code
    captured = capsys.readouterr()
    assert captured.err == lines and captured.out == ""


def test_sim_gets_its_own_command_line(monkeypatch) -> None:
    import anvil_metrics.sim.server as server

    seen: list[list[str]] = []
    monkeypatch.setattr(server, "main", lambda argv: seen.append(argv) or 7)
    assert cli.main(["sim", "--port", "0", "--help"]) == 7
    assert seen == [["--port", "0", "--help"]]


def test_every_commands_help_renders() -> None:
    """argparse formats each help with %: a bare % in an option's help (e.g. "within 2 %")
    makes `--help` crash, and nothing else would show it. Every command and sub-command's
    help is rendered here, each naming its own options."""
    import argparse

    from anvil_metrics.cli.main import build_parser

    def walk(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        found = [parser]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found += walk(sub)
        return found

    parsers = walk(build_parser())
    assert len(parsers) > 10
    for parser in parsers:
        text = parser.format_help()
        assert parser.prog in text


def test_every_run_options_help_formats_as_argparse_does() -> None:
    """Locust's own parser (`locust --help`, the web UI's options) gets the same help texts:
    each must survive argparse's `%` formatting too."""
    from anvil_metrics.load.options import OPTIONS

    for o in OPTIONS:
        assert isinstance(o.help % {"default": o.default, "dest": o.dest}, str), o.flag
