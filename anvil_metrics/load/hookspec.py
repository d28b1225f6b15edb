"""A control hook as the user gives it: `--reset-prefix-cache [auto|URL|cmd:COMMAND]`.

Why apart from the call (`live/hooks.py`): the value is checked when the options are read,
so a bad one is one line naming the flag before anything is sent; the call needs gevent
and the server's engine, known only once the run asks the server who it is.

- `auto`: by the engine the server says it is (`prep/provenance.py`): vLLM's
  `POST /reset_prefix_cache`, SGLang's `POST /flush_cache` (`AUTO_PATHS`);
- an `http://` or `https://` URL: `POST` to it;
- `cmd:COMMAND`: the command run (split as a shell would, never through a shell).

A trailing `?` marks the hook optional (as `--hook-optional` does): its failure is
recorded and the run goes on; otherwise a failing hook stops the run before load.
"""

from __future__ import annotations

import shlex
import urllib.parse
from dataclasses import dataclass

from anvil_metrics.errors import UsageError

__all__ = ["AUTO", "AUTO_PATHS", "HookSpec", "hook_spec", "hook_text"]



@dataclass(frozen=True, slots=True)
class HookSpec:
    """One hook: `kind` "auto", "url" or "cmd"; `target` the URL or the command's words
    (empty for auto); `optional`: its failure does not stop the run."""

    kind: str
    target: tuple[str, ...] = ()
    optional: bool = False


# each hook's path on each engine that has it, by the engine name provenance.py gives
# (vLLM's OpenAI server and SGLang's HTTP server define these routes)
_PROFILE = {"vllm": "/start_profile", "sglang": "/start_profile"}
AUTO_PATHS: dict[str, dict[str, str]] = {
    "reset_prefix_cache": {"vllm": "/reset_prefix_cache", "sglang": "/flush_cache"},
    "start_profile": _PROFILE,
    "stop_profile": {k: "/stop_profile" for k in _PROFILE},
}
AUTO = HookSpec("auto")  # --server-profile's: the engine's own endpoints


def hook_spec(flag: str, text: str) -> HookSpec:
    """`text` as given to `flag`, checked (a `Parse` of `optionvalues`)."""
    raw = text.strip()
    optional = raw.endswith("?")
    raw = raw.removesuffix("?").strip()
    allowed = "expected auto, an http:// or https:// URL, or cmd:COMMAND (a trailing ? = optional)"
    if raw == "auto":
        return HookSpec("auto", (), optional)
    if raw.startswith("cmd:"):
        try:
            words = tuple(shlex.split(raw[4:]))
        except ValueError as e:
            raise UsageError(f"{flag} {text!r} is not allowed ({e}); {allowed}") from None
        if not words:
            raise UsageError(f"{flag} {text!r} is not allowed (no command); {allowed}")
        return HookSpec("cmd", words, optional)
    url = urllib.parse.urlsplit(raw)
    if url.scheme in ("http", "https") and url.netloc:
        return HookSpec("url", (raw,), optional)
    raise UsageError(f"{flag} {text!r} is not allowed; {allowed}")


def hook_text(flag: str, text: str) -> str:
    """`text` checked as a hook and kept as text (an option's value travels to Locust's
    command line as text: `options.locust_args`)."""
    hook_spec(flag, text)
    return text.strip()
