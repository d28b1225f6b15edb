"""jsonio.read_json: the one reader of JSON files a user names. Each way a file can be
wrong is one line (exit 2) that names the file, says what is wrong — with the OS's reason,
or orjson's line and column — and what was expected.

Why: `verify`, `report`, `summarize` and the campaign commands used to say each of these in
words of their own, with exit codes of their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import JsonFileError, read_json

WHAT = "a benchmark.json"


def _fault(path: Path, **kw: str) -> JsonFileError:
    with pytest.raises(JsonFileError) as e:
        read_json(path, WHAT, **kw)
    assert isinstance(e.value, UsageError) and e.value.exit_code == 2
    text = str(e.value)
    assert "\n" not in text and str(path) in text and text.endswith(f"; expected {WHAT}")
    assert e.value.path == str(path) and e.value.expected == WHAT
    return e.value


def test_a_json_file_gives_its_value(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(b' [1, {"b": null}, 2.5] \n')
    assert read_json(tmp_path / "a.json", WHAT) == [1, {"b": None}, 2.5]
    assert read_json(str(tmp_path / "a.json"), WHAT) == [1, {"b": None}, 2.5]


def test_a_missing_file(tmp_path: Path) -> None:
    e = _fault(tmp_path / "b.json")
    assert str(e) == f"{tmp_path / 'b.json'} does not exist; expected {WHAT}"
    assert e.reason == "does not exist"


def test_a_folder_is_not_a_file(tmp_path: Path) -> None:
    assert _fault(tmp_path).reason == "is a folder, not a file"


def test_a_file_that_cannot_be_read_gives_the_os_reason(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("{}")
    assert _fault(tmp_path / "f" / "b.json").reason == "cannot be read (Not a directory)"


@pytest.mark.parametrize("text, at", [
    (b'{"a": 1,', "line 1 column 9"),
    (b'{"a":\n  NaN}', "line 2 column 3"),
    (b'{"a": Infinity}', "line 1 column 7"),
    (b"", "empty"),
    (b'{"a": "\xff"}', "UTF-8"),
])
def test_what_is_not_strict_json_says_where(tmp_path: Path, text: bytes, at: str) -> None:
    (tmp_path / "b.json").write_bytes(text)
    e = _fault(tmp_path / "b.json")
    assert e.reason.startswith("is not strict JSON (") and at in e.reason, e.reason


def test_a_command_starts_the_line(tmp_path: Path) -> None:
    e = _fault(tmp_path / "b.json", command="report")
    assert str(e) == f"report: {tmp_path / 'b.json'} does not exist; expected {WHAT}"
