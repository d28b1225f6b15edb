"""The pieces every command's parser is made of: a parser whose mistakes are one line, and
argparse types from the options' own checks.

Why its own module: each command group (`run.py`, `verify.py`, ...) builds its parsers
from these, so a bad flag reads the same in every command: one line naming the flag, the
value and what is allowed, then exit 2, with no usage block.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from anvil_metrics.errors import UsageError
from anvil_metrics.load.optionvalues import Parse

# what `add_subparsers` returns: each command group adds its commands to it
Commands = argparse._SubParsersAction


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        self.exit(2, f"anvil: {message} (see '{self.prog} --help')\n")


def argtype(parse: Parse, flag: str) -> Callable[[str], Any]:
    """An argparse type from an option's check: its UsageError becomes argparse's error
    (one line naming the flag, the value and what is allowed)."""
    def conv(v: str) -> Any:
        try:
            return parse(flag, v)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv
