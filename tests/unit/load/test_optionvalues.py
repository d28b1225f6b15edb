"""The options' value parsers (`load/optionvalues.py`): `pairs`, the newest; the others are
tested through the options that use them (`test_options.py`, `cli/test_parsing.py`)."""

from __future__ import annotations

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.load.optionvalues import pairs


def test_pairs_are_typed_whole_number_number_or_text() -> None:
    assert pairs("--conversation", "turns=4, turn_tokens=256,think_time=0.5,history=fixed") \
        == {"turns": 4, "turn_tokens": 256, "think_time": 0.5, "history": "fixed"}
    assert type(pairs("--x", "a=4")["a"]) is int
    assert pairs("--x", "a=true,b=false,c=True") == {"a": True, "b": False, "c": "True"}


@pytest.mark.parametrize("text", ["turns", "turns=4,,", "Turns=4", "turns=4,turns=5",
                                  "turns=4=5", "=4"])
def test_a_malformed_pair_is_one_line_naming_the_flag(text: str) -> None:
    with pytest.raises(UsageError) as e:
        pairs("--conversation", text)
    assert str(e.value) == (f"--conversation {text!r} is not allowed; expected key=value pairs "
                            "separated by commas, each key once, e.g. turns=4,turn_tokens=256")
    assert e.value.exit_code == 2


def test_a_window_is_start_colon_end_seconds() -> None:
    from anvil_metrics.load.optionvalues import window

    assert window("--trace-window", "60:120") == (60.0, 120.0)
    assert window("--trace-window", "0.5:") == (0.5, None)
    for bad in ("60", "120:60", "-1:5", "a:b", "5:5"):
        with pytest.raises(UsageError, match=r"^--trace-window .* is not allowed; expected "
                                             r"START:END in seconds"):
            window("--trace-window", bad)
