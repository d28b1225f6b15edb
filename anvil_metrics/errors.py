"""anvil's exceptions: one small hierarchy so the CLI can turn any of them into one line.

Library code never prints and never calls `sys.exit`; it raises one of these, and the CLI
prints `str(exc)` on one line and exits with `exc.exit_code`. Every message says what was
attempted, why it failed, and how to fix it, so that line is enough on its own.

    AnvilError                    base class; exit code 1
    ├── UsageError                bad user input (flags, paths, values); exit code 2
    │   ├── ScenarioError         a scenario field with a bad value: names the field, the
    │   │                         value, and what is allowed
    │   ├── TransportUnsupported  the installed geventhttpclient lacks an internal anvil's
    │   │                         transport reads (names the version, the attribute, the range)
    │   ├── JsonFileError         (in `jsonio`) a JSON file a user named is missing, unreadable
    │   │                         or not strict JSON (names the file, the fault, and what
    │   │                         was expected)
    │   ├── CampaignError         (in `campaign.spec`) a campaign file's problems, one line
    │   │                         each, every line naming the file
    │   └── InputEntryError       an entry of an input file that cannot be used (names the
    │       │                     file, the line or index, the field, the value, and what is
    │       │                     allowed)
    │       ├── TraceError        (in `load.trace`) a trace's line
    │       └── DatasetError      (in `load.dataset`) a dataset's entry
    ├── RawFileError              `requests.jsonl` unreadable or invalid (names file and line)
    ├── WireError                 a message between a distributed master and worker with a
    │                             bad field: names the message, the field, the value and what
    │                             is allowed
    └── VerifyError               a benchmark document failed `verify` (carries every mismatch)

Every subclass of `AnvilError` in the package is in this tree, under its base, with the
module it lives in when that is not this one (`tests/unit/test_errors.py` reads the tree and
the package's classes and compares them). `Terminated`, also here, is no `AnvilError`: it
is SIGTERM, unwinding as Ctrl-C does (exit 143).

Bugs in anvil itself (a NaN reaching a writer, a negative clock difference) are not
`AnvilError`s: they raise `ValueError`/`TypeError` and keep their traceback.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ExitCode(enum.IntEnum):
    """What every `anvil` command exits with: one table (the README's, tested command by
    command). A run's Locust process exits with the same codes, so `anvil run` and plain
    `locust -f` agree."""

    OK = 0  # done, and nothing wrong was found
    PROBLEM = 1  # a check or verify found a problem; a campaign's run failed; a bug
    USAGE = 2  # usage: a bad flag, field or value, or an input file missing or unreadable
    ABORTED = 3  # a run ended itself: the server stopped answering (`benchmark.json` says why)
    FAILED = 4  # a run's measured requests failed: all of them, or over --fail-on-error-rate
    SIGINT = 130  # interrupted (Ctrl-C): what was measured is kept, marked partial
    SIGTERM = 143  # terminated (SIGTERM): as for Ctrl-C


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises `KeyboardInterrupt` (`cli.main` installs the
    handler): it unwinds the same way, and whoever passes a signal on (`runs.launch`) or
    picks the exit code (143, not 130) can tell the two apart."""


class AnvilError(Exception):
    """Base of every error anvil raises on purpose. `exit_code` is what the CLI exits with."""

    exit_code: int = ExitCode.PROBLEM


class UsageError(AnvilError):
    """The user asked for something anvil cannot do as given (the CLI exits 2)."""

    exit_code = ExitCode.USAGE


class ScenarioError(UsageError):
    """A scenario field holds a value that is not allowed.

    >>> str(ScenarioError("concurrency", 0, "an integer >= 1", source="scenarios/a.toml"))
    'scenarios/a.toml: concurrency = 0 is not allowed; use an integer >= 1'
    """

    def __init__(self, field: str, value: Any, allowed: str, *, source: str | None = None):
        self.field = field
        self.value = value
        self.allowed = allowed
        self.source = source
        where = f"{source}: " if source else "scenario: "
        super().__init__(f"{where}{field} = {value!r} is not allowed; use {allowed}")


class InputEntryError(UsageError):
    """An entry of a file the user named (a trace's line, a dataset's entry) that cannot be
    used: `path:where: field = value is not allowed; use allowed` (long values cut).

    >>> str(InputEntryError("t.jsonl", 2, "timestamp", -1, "a number >= 0"))
    't.jsonl:2: timestamp = -1 is not allowed; use a number >= 0'
    """

    def __init__(self, path: str, where: int | str, field: str, value: Any,
                 allowed: str) -> None:
        shown = repr(value) if not isinstance(value, str) or len(value) < 60 else (
            repr(value[:57]) + "...")
        super().__init__(f"{path}:{where}: {field} = {shown} is not allowed; use {allowed}")


class TransportUnsupported(UsageError):
    """The installed geventhttpclient (or gevent) lacks a private attribute anvil's transport
    reads, so streams cannot be stamped as anvil stamps them (the CLI exits 2).

    >>> e = TransportUnsupported("9.0", "HTTPClient.pool", ">=2.6,<2.7")
    >>> e.exit_code, str(e)[:70]
    (2, "geventhttpclient 9.0 is installed, but anvil's transport needs its int")
    """

    def __init__(self, version: str, attribute: str, supported: str):
        self.version = version
        self.attribute = attribute
        self.supported = supported
        super().__init__(
            f"geventhttpclient {version} is installed, but anvil's transport needs its "
            f"internal {attribute}, which it lacks; install a supported version: "
            f"pip install 'geventhttpclient{supported}'")


class RawFileError(AnvilError):
    """A raw `requests.jsonl` cannot be read back into records.

    `line` is the 1-based line number when one line is at fault, else None.
    """

    def __init__(self, path: str | Path, reason: str, *, line: int | None = None,
                 fix: str | None = None):
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        text = f"cannot read raw records {where}: {reason}"
        if fix:
            text += f"; {fix}"
        super().__init__(text)


class _Missing:
    def __repr__(self) -> str:
        return "missing"


MISSING: Any = _Missing()  # a message field that is absent


def shorten(value: Any, limit: int = 60) -> str:
    """`value` as it may appear in one log line: bytes and dicts by their size only (a
    message's bytes may hold anything, a secret included), anything else as a repr cut to
    `limit` characters."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if isinstance(value, dict):
        return f"<a dict of {len(value)} field{'' if len(value) == 1 else 's'}>"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class WireError(AnvilError):
    """A message from a distributed run's master or worker with a field that is not allowed
    (a damaged message, or a peer of another anvil version). `value` is `MISSING` for an
    absent field; `secret` shows only its type.

    >>> str(WireError("anvil_take", "seq", "7", "a whole number >= 1"))
    "anvil_take: seq = '7' is not allowed; expected a whole number >= 1"
    """

    def __init__(self, message: str, field: str, value: Any, allowed: str, *,
                 secret: bool = False):
        self.message_type = message
        self.field = field
        self.value = value
        self.allowed = allowed
        if value is MISSING:
            super().__init__(f"{message}: {field} is missing; expected {allowed}")
        else:
            shown = f"<a {type(value).__name__}>" if secret else shorten(value)
            super().__init__(f"{message}: {field} = {shown} is not allowed; expected {allowed}")


class VerifyError(AnvilError):
    """A benchmark document does not reproduce from its own rows (or is not strict JSON).

    `problems` holds every mismatch, each naming a field path; the message shows the first
    and the count so the CLI's one line stays short.
    """

    def __init__(self, problems: Sequence[str], *, source: str | None = None):
        self.problems = list(problems)
        self.source = source
        what = source or "benchmark document"
        n = len(self.problems)
        first = self.problems[0] if self.problems else "no details"
        more = f" (and {n - 1} more)" if n > 1 else ""
        super().__init__(
            f"{what} failed verification: {first}{more}; rebuild it with "
            f"`anvil postprocess` from its requests.jsonl"
        )
