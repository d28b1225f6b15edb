"""The run's control hooks: the server's prefix cache reset, and its profile, around what is
measured.

Why: a prefix cache warmed by an earlier run, the warm-ups or the previous sweep step makes
the next figures better than a cold server's (vLLM #52884: up to 86 % more throughput), so
`--reset-prefix-cache` (`load/hookspec.py`) empties it: in the set-up, before any load
(so a hook that fails stops the run before load, with one line naming the hook, its target
and its answer, exit 2, unless it is optional); again once the warm-up requests are done
(when there are any); and before each sweep step after the first (`runclock.py`). With
`--server-profile` the engine's `POST /start_profile` is called just before the first
measured request (after the warm-ups) and `/stop_profile` as soon as the measured load is
over (its budget spent or its duration over), before the requests in flight drain; with
`--profile-when-running N` it starts only once the server's metrics (the sampler's newest
sample) report at least N requests running, and stops `--profile-max-s` later or when the
measured load ends, whichever is first (never once the load is over). A duration's timed
window (`--warmup 30s`, `--cooldown 10s`) holds the profile too: it starts when the window
opens and stops when it closes (the load goes on around it). Each
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
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.event

from anvil_metrics.errors import UsageError
from anvil_metrics.live.recorder import RawWriter
from anvil_metrics.load.hookspec import AUTO, AUTO_PATHS, HookSpec
from anvil_metrics.load.options import RunOptions
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.telemetry.livegauges import live_gauges, newest_samples
from anvil_metrics.telemetry.sampler import ServerTelemetry
from anvil_metrics.urls import strip_credentials
from anvil_metrics.wire.plainhttp import OPENER, BodyError, read_body

__all__ = ["HOOK_WAIT_S", "Hook", "HookFailed", "RunHooks", "server_running"]

log = logging.getLogger("anvil")
HOOK_WAIT_S = 30.0  # the longest a hook may take (a cache reset answers in milliseconds)
ANSWER_CHARS = 200  # how much of an answer's body the record keeps
PROFILE_MAX_S = 30.0  # a profile started by --profile-when-running lasts at most this long
WATCH_S = 0.05  # how often --profile-when-running looks at the newest metrics sample


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

    @classmethod
    def of(cls, name: str, spec: HookSpec | None, engine: str | None, root_url: str,
           headers: Mapping[str, str]) -> Hook | None:
        """The hook `spec` bound to the server, or None when none was given."""
        return None if spec is None else cls(name, spec, engine, root_url, headers)

    def target(self) -> str | None:
        """What is called, safe to record: the URL (no credentials) or the command; None
        for auto on a server whose engine has no cache reset anvil knows."""
        if self.spec.kind == "auto":
            path = AUTO_PATHS[self.name].get(self.engine or "")
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
                                    f"known {self.name} endpoint")
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

    def before_load(self, writer: RawWriter, enter: Callable[[str], None]) -> None:
        """The set-up's call (`enter` told the phase: `runerror.SetUp`): a required hook's
        failure is a `UsageError` (exit 2)."""
        enter(f"calling the hook {self.name}")
        try:
            self.must(writer)
        except HookFailed as e:
            raise UsageError(str(e)) from None


@dataclass(frozen=True, slots=True)
class RunHooks:
    """A run's hooks, each None when not asked for, called at their moments (module
    docstring): the cache reset, and the profile around the measured load (`--server-profile`)."""

    reset: Hook | None = None
    profile: tuple[Hook, Hook] | None = None  # start_profile, stop_profile
    when_running: int | None = None  # --profile-when-running: start once this many run
    max_s: float = PROFILE_MAX_S  # --profile-max-s: how long a triggered profile lasts
    _ended: gevent.event.Event = field(default_factory=gevent.event.Event)
    _watch_of: list[gevent.Greenlet] = field(default_factory=list)  # the profile's, if timed

    @classmethod
    def of(cls, opts: RunOptions, engine: str | None, root_url: str,
           headers: Mapping[str, str]) -> RunHooks:
        reset = Hook.of("reset_prefix_cache", opts.reset_prefix_cache, engine, root_url,
                        headers)
        on = AUTO if not opts.hook_optional else HookSpec("auto", (), True)
        return cls(reset, (Hook("start_profile", on, engine, root_url, headers),
                           Hook("stop_profile", on, engine, root_url, headers))
                   if opts.profile else None, opts.profile_when_running,
                   opts.profile_max_s or PROFILE_MAX_S)

    def before_load(self, writer: RawWriter, enter: Callable[[str], None]) -> None:
        """In the set-up, before any load: the cache reset."""
        if self.reset is not None:
            self.reset.before_load(writer, enter)

    def before_measured(self, writer: RawWriter, abort: Callable[[str], None],
                        sc: Scenario, running: Callable[[], float | None]) -> None:
        """Once the warm-ups are done, before the first measured request: the reset again
        (when there were warm-up requests), and the profile starts, or its watch: `running`
        is the server's requests running now (None: not known). A duration's timed window
        (`--warmup`, `--cooldown`) moves the profile into it: it starts `warmup` after now
        and stops `cooldown` before the duration's end."""
        if self.reset is not None and sc.warmup_requests:
            self.reset.during(writer, abort)
        timed = sc.duration_s is not None and bool(sc.warmup_s or sc.cooldown_s)
        if self.profile is not None and self.when_running is None and not timed:
            self.profile[0].during(writer, abort)
        elif self.profile is not None:
            begin = time.monotonic() + (sc.warmup_s or 0) * timed
            end = (time.monotonic() + sc.duration_s - (sc.cooldown_s or 0)
                   if timed and sc.duration_s is not None else None)
            self._watch_of.append(gevent.spawn(self._watch, writer, abort, running, begin,
                                               end))

    def _watch(self, writer: RawWriter, abort: Callable[[str], None],
               running: Callable[[], float | None], begin: float, end: float | None
               ) -> None:
        """The profile in its window (`time.monotonic()` from `begin` to `end`, None: the
        measured load's end) and, with --profile-when-running, only once the server reports
        enough requests running, for `max_s` at most; nothing when the load ends before
        (polled every `WATCH_S`)."""
        assert self.profile is not None
        if self._ended.wait(max(0.0, begin - time.monotonic())):
            return
        while self.when_running is not None and not self._ended.is_set():
            now = running()
            if now is not None and now >= self.when_running:
                break
            self._ended.wait(WATCH_S)
        if self._ended.is_set():
            return
        self.profile[0].during(writer, abort)
        stops = [t for t in (end, None if self.when_running is None
                             else time.monotonic() + self.max_s) if t is not None]
        self._ended.wait(max(0.0, min(stops) - time.monotonic()) if stops else None)
        self.profile[1].call(writer)

    def before_step(self, writer: RawWriter, abort: Callable[[str], None], step: int) -> None:
        if self.reset is not None:
            self.reset.during(writer, abort, step)

    def after_measured(self, writer: RawWriter) -> None:
        """The measured load is over (its budget spent or its duration over), before the
        requests in flight drain: the profile stops (a failure is recorded, nothing ends)."""
        if self.profile is not None and self.when_running is None and not self._watch_of:
            self.profile[1].call(writer)
        self._ended.set()  # a triggered profile stops now if it has not yet


def server_running(telemetry: ServerTelemetry | None) -> float | None:
    """The server's requests running, from its metrics' newest sample (None: unknown)."""
    if telemetry is None:
        return None
    return (live_gauges(newest_samples(telemetry.path, 1), 0) or {}).get("requests_running")


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
