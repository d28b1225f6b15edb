"""errors: each exception's one line and exit code, as the CLI prints them.

Why: the CLI prints `str(exc)` and exits with `exc.exit_code`; a message that loses the
field, the value or the fix leaves the user with nothing to act on.
"""

from __future__ import annotations

import pytest

from anvil_metrics.errors import (
    MISSING,
    AnvilError,
    RawFileError,
    ScenarioError,
    TransportUnsupported,
    UsageError,
    VerifyError,
    WireError,
    shorten,
)


def test_exit_codes_follow_the_hierarchy() -> None:
    assert AnvilError("x").exit_code == 1
    assert UsageError("x").exit_code == 2
    assert ScenarioError("f", 1, "y").exit_code == 2
    assert TransportUnsupported("1", "a", ">=2").exit_code == 2
    assert isinstance(RawFileError("p", "r"), AnvilError)
    assert not isinstance(RawFileError("p", "r"), UsageError)


def test_scenario_error_names_source_field_value_and_what_is_allowed() -> None:
    e = ScenarioError("rate", "fast", "a number > 0")
    assert str(e) == "scenario: rate = 'fast' is not allowed; use a number > 0"
    assert (e.field, e.value, e.allowed, e.source) == ("rate", "fast", "a number > 0", None)


def test_raw_file_error_names_the_line_and_the_fix() -> None:
    assert str(RawFileError("r.jsonl", "bad json", line=3, fix="rerun")) == (
        "cannot read raw records r.jsonl:3: bad json; rerun")
    assert str(RawFileError("r.jsonl", "empty")) == "cannot read raw records r.jsonl: empty"


@pytest.mark.parametrize(("value", "want"), [
    (b"secret", "<6 bytes>"),
    ({"a": 1}, "<a dict of 1 field>"),
    ({}, "<a dict of 0 fields>"),
    ("ab", "'ab'"),
    ("x" * 100, "'" + "x" * 56 + "..."),
])
def test_shorten(value: object, want: str) -> None:
    assert shorten(value) == want


def test_wire_error_shows_a_missing_field_and_hides_a_secret() -> None:
    assert str(WireError("anvil_hello", "key", MISSING, "a string")) == (
        "anvil_hello: key is missing; expected a string")
    assert str(WireError("anvil_hello", "key", "hunter2", "a string", secret=True)) == (
        "anvil_hello: key = <a str> is not allowed; expected a string")


def test_verify_error_shows_the_first_problem_and_the_count() -> None:
    e = VerifyError(["a differs", "b differs", "c differs"], source="b.json")
    assert str(e).startswith("b.json failed verification: a differs (and 2 more); rebuild")
    assert e.problems == ["a differs", "b differs", "c differs"]
    assert "no details" in str(VerifyError([]))


def test_the_readmes_exit_code_table_is_the_exit_code_enum() -> None:
    """One table: the README's rows are exactly `ExitCode`'s values, in order."""
    import re
    from pathlib import Path

    from anvil_metrics.errors import ExitCode

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme.split("| exit code | meaning", 1)[1].split("\n\n", 1)[0]
    codes = [int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)]
    assert codes == [int(c) for c in ExitCode]
