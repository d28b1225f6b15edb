"""`--reset-prefix-cache`'s value: auto, a URL or cmd:COMMAND, a trailing ? optional."""

from __future__ import annotations

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.load.hookspec import HookSpec, hook_spec, hook_text

F = "--reset-prefix-cache"


@pytest.mark.parametrize(("text", "spec"), [
    ("auto", HookSpec("auto", (), False)),
    (" auto? ", HookSpec("auto", (), True)),
    ("http://h:8000/reset_prefix_cache", HookSpec("url", ("http://h:8000/reset_prefix_cache",))),
    ("https://h/flush_cache?", HookSpec("url", ("https://h/flush_cache",), True)),
    ("cmd:curl -X POST 'http://h/x y'", HookSpec("cmd", ("curl", "-X", "POST", "http://h/x y"))),
])
def test_each_form_reads_as_given(text: str, spec: HookSpec) -> None:
    assert hook_spec(F, text) == spec


@pytest.mark.parametrize("text", ["", "Auto", "ftp://h/x", "http://", "cmd:", "cmd:'open",
                                  "/reset_prefix_cache"])
def test_a_bad_value_is_one_line_naming_the_flag_and_what_is_allowed(text: str) -> None:
    with pytest.raises(UsageError) as e:
        hook_text(F, text)
    assert str(e.value).startswith(f"{F} {text!r} is not allowed")
    assert "expected auto, an http:// or https:// URL, or cmd:COMMAND" in str(e.value)


def test_the_option_keeps_the_text_and_run_options_reads_it() -> None:
    from anvil_metrics.load.options import run_options

    assert hook_text(F, " auto? ") == "auto?"
    opts = run_options({"reset_prefix_cache": "auto", "hook_optional": True},
                       host="http://h:8000", users=1, api_key=None)
    assert opts.reset_prefix_cache == HookSpec("auto", (), True)
    assert run_options({}, host="http://h:8000", users=1,
                       api_key=None).reset_prefix_cache is None
