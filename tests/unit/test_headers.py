"""`anvil_metrics.headers`: each header checked, merged, sent and shown redacted."""

from __future__ import annotations

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.headers import (
    REDACTED,
    checked,
    head_lines,
    is_credential,
    merged,
    parse_flag,
    problem,
    shown,
    with_api_key,
)


def test_a_flag_is_split_at_its_first_equals_sign() -> None:
    assert parse_flag("--header", "X-Tenant=team-a") == ("X-Tenant", "team-a")
    assert parse_flag("--header", " X-Route = a=b ") == ("X-Route", "a=b")
    assert parse_flag("--header", "X-Empty=") == ("X-Empty", "")


@pytest.mark.parametrize("text, says", [
    ("X-Tenant", "'X-Tenant' is not allowed; use KEY=VALUE"),
    ("=v", "'=…' is not allowed; use KEY=VALUE"),
    ("Bad Name=1", "'Bad Name=1' is not allowed; use a header name of letters"),
    ("Host=example", "'Host=example' is not allowed; use no header anvil writes itself"),
    ("content-length=3", "no header anvil writes itself"),
    ("X-A=line\nX-B: smuggled", "use text without line breaks"),
    ("X-A=中", "use text in Latin-1"),
])
def test_a_bad_flag_is_one_line_naming_it(text: str, says: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_flag("--header", text)
    msg = str(e.value)
    assert msg.startswith("--header ") and says in msg and "\n" not in msg, msg


def test_a_bad_credential_never_shows_its_value() -> None:
    for text in ("Authorization: Bearer sk-123", "X-Api-Key=sk-123\n", "Cookie=sk-123\x00"):
        with pytest.raises(UsageError) as e:
            parse_flag("--header", text)
        assert "sk-123" not in str(e.value), str(e.value)
    with pytest.raises(UsageError, match=r"'X-Api-Key=\[redacted\]'"):
        checked("--header", "X-Api-Key", "a\rb")


@pytest.mark.parametrize("name, secret", [
    ("Authorization", True), ("Proxy-Authorization", True), ("X-Api-Key", True),
    ("api_key", True), ("X-Auth-Token", True), ("X-Client-Secret", True), ("Cookie", True),
    ("X-Password", True), ("X-Tenant", False), ("X-Route", False), ("Accept-Language", False),
])
def test_credentials_are_told_by_their_name(name: str, secret: bool) -> None:
    assert is_credential(name) is secret
    assert shown({name: "v"}) == {name: REDACTED if secret else "v"}


def test_flags_go_over_the_table_names_compared_without_case() -> None:
    table = {"X-Tenant": "file", "X-Team": "blue"}
    got = merged(table, [("x-tenant", "flag-1"), ("X-Extra", "e"), ("X-TENANT", "flag-2")])
    assert got == {"X-TENANT": "flag-2", "X-Team": "blue", "X-Extra": "e"}
    assert merged({}, []) == {}


def test_head_lines_and_the_api_key_rule() -> None:
    assert head_lines({"X-A": "1", "X-B": "é"}) == b"X-A: 1\r\nX-B: \xe9\r\n"
    assert head_lines({}) == b""
    assert with_api_key({"Authorization": "Basic abc"}, None) == {"Authorization": "Basic abc"}
    assert with_api_key({"X-A": "1"}, "sk") == {"X-A": "1"}
    with pytest.raises(UsageError, match="both given; use one"):
        with_api_key({"authorization": "Basic abc"}, "sk")
    assert problem("X-A", "ok") is None and problem(3, "x") is not None
