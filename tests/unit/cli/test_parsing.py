"""The parsers' pieces: a mistake is one line naming the command, exit 2; an option's
check becomes an argparse type whose message is the check's own."""

from __future__ import annotations

import argparse

import pytest

from anvil_metrics.cli.parsing import Parser, argtype
from anvil_metrics.load.optionvalues import timespan, whole


def test_a_parse_error_is_one_line_naming_the_command(capsys) -> None:
    p = Parser(prog="anvil thing")
    p.add_argument("--n", type=argtype(whole(1), "--n"))
    with pytest.raises(SystemExit) as ei:
        p.parse_args(["--n", "0"])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not err.startswith("usage")
    assert err.startswith("anvil: argument --n: --n '0' is not allowed; ")
    assert err.endswith(" (see 'anvil thing --help')\n")


def test_an_options_check_converts_and_refuses_as_argparse_expects() -> None:
    conv = argtype(timespan, "--timeout")
    assert conv("2m") == 120.0
    with pytest.raises(argparse.ArgumentTypeError, match=r"^--timeout 'soon' is not allowed"):
        conv("soon")
