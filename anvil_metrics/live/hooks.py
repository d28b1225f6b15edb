"""The run's control hooks: the server's prefix cache reset before what is measured.

Why: a prefix cache warmed by an earlier run, the warm-ups or the previous sweep step makes
the next figures better than a cold server's (vLLM #52884: up to 86 % more throughput), so
`--reset-prefix-cache` (`load/hookspec.py`) empties it: in the set-up, before any load
(so a hook that fails stops the run before load, with one line naming the hook, its target
and its answer, exit 2, unless it is optional); again once the warm-up requests are done
(when there are any); and before each sweep step after the first (`runclock.py`). Each
call is one `"hook"` line of the raw file — its name, its target (credentials stripped),
its answer (HTTP status or exit code, and a few words), its time on the run's clock,
whether it went well and whether it was optional — which `post/hooksblock.py` makes the
document's `hooks` list.
"""

from __future__ import annotations

import logging
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from anvil_metrics.errors import UsageError
from anvil_metrics.live.recorder import RawWriter
from anvil_metrics.load.hookspec import AUTO_PATHS, HookSpec
from anvil_metrics.urls import strip_credentials
from anvil_metrics.wire.plainhttp import OPENER, BodyError, read_body

__all__ = ["HOOK_WAIT_S", "Hook", "HookFailed"]

log = logging.getLogger("anvil")
HOOK_WAIT_S = 30.0  # the longest a hook may take (a cache reset answers in milliseconds)
ANSWER_CHARS = 200  # how much of an answer's body the record keeps


class HookFailed(Exception):
    """A required hook failed after the load began: the run ends (aborted) with `str()`."""


@dataclass(frozen=True, slots=True)
class Hook:
    """One hook bound to the server: `name` (the record's), what to call, and where."""

    name: str
    spec: HookSpec
    engine: str | None
    root_url: str
    headers: Mapping[str, str]

    def target(self) -> str | None:
        """What is called, safe to record: the URL (no credentials) or the command; None
        for auto on a server whose engine has no cache reset anvil knows."""
        if self.spec.kind == "auto":
            path = AUTO_PATHS.get(self.engine or "")
            return None if path is None else self.root_url + path
        if self.spec.kind == "url":
            return strip_credentials(self.spec.target[0])
        return " ".join(strip_credentials(w) if "://" in w else w for w in self.spec.target)

    def call(self, writer: RawWriter, step: int | None = None) -> dict[str, Any]:
        """Call the hook once and write its raw line (returned): `status` the HTTP status
        or the command's exit code (None: no answer), `answer` a few words of it."""
        t_ns = time.perf_counter_ns()
        target = self.target()
        if target is None:
            status, answer = None, (f"the server's engine ({self.engine or 'unknown'}) has no "
                                    "known cache reset: give a URL or cmd:COMMAND")
        elif self.spec.kind == "cmd":
            status, answer = _run(self.spec.target)
        else:
            status, answer = _post(target, self.headers)
        ok = status is not None and (200 <= status < 300 if self.spec.kind != "cmd"
                                     else status == 0)
        line = {"type": "hook", "name": self.name, "target": target, "status": status,
                "answer": answer, "t_ns": t_ns, "ok": ok, "optional": self.spec.optional,
                "step": step}
        writer.write(line)
        if not ok:
            log.warning("anvil: hook %s (%s) failed: %s", self.name, target, answer)
        return line

    def must(self, writer: RawWriter, step: int | None = None) -> None:
        """Call it; a required hook that failed raises `HookFailed` with one line naming
        the hook, its target and its answer."""
        line = self.call(writer, step)
        if not line["ok"] and not self.spec.optional:
            raise HookFailed(f"--{self.name.replace('_', '-')} failed: {line['target']} "
                             f"answered {line['status']}: {line['answer']} (mark it optional "
                             "with --hook-optional or a trailing ?)")

    def during(self, writer: RawWriter, abort: Callable[[str], None],
               step: int | None = None) -> None:
        """A call once the load has begun: a required hook's failure `abort`s the run
        with its line (exit 3)."""
        try:
            self.must(writer, step)
        except HookFailed as e:
            abort(str(e))

    def before_load(self, writer: RawWriter) -> None:
        """The set-up's call: a required hook's failure is a `UsageError` (exit 2)."""
        try:
            self.must(writer)
        except HookFailed as e:
            raise UsageError(str(e)) from None


def _post(url: str, headers: Mapping[str, str]) -> tuple[int | None, str]:
    request = urllib.request.Request(url, data=b"", method="POST",
                                     headers={**headers, "Content-Type": "application/json"})
    try:
        with OPENER.open(request, timeout=HOOK_WAIT_S) as response:
            body = read_body(response, f"POST {url}", HOOK_WAIT_S)
            return response.status, _words(body)
    except urllib.error.HTTPError as e:
        return e.code, _words(e.read(ANSWER_CHARS) if e.fp is not None else b"")
    except (OSError, BodyError) as e:  # refused, unreachable, timed out, never ending
        return None, _words(str(e).encode())


def _run(words: tuple[str, ...]) -> tuple[int | None, str]:
    try:
        done = subprocess.run(words, capture_output=True, timeout=HOOK_WAIT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, _words(str(e).encode())
    return done.returncode, _words(done.stdout + done.stderr)


def _words(body: bytes) -> str:
    text = " ".join(body.decode("utf-8", "replace").split())
    return text[:ANSWER_CHARS]
