"""A hook's target, its call's raw line, and what a failure does (required or optional)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.live.hooks import Hook, HookFailed
from anvil_metrics.load.hookspec import HookSpec, hook_spec
from anvil_metrics.load.scenario import Scenario, scenario_from_dict

ROOT = "http://127.0.0.1:9"  # the discard port: nothing answers there


class Lines:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write(self, line: dict[str, Any]) -> None:
        self.lines.append(line)


def _sc(**keys: Any) -> Scenario:
    return scenario_from_dict({"measurement_protocol": "t", **keys})


def hook(text: str, engine: str | None = "vllm") -> Hook:
    hk = Hook.of("reset_prefix_cache", hook_spec("--reset-prefix-cache", text), engine,
                 ROOT, {})
    assert hk is not None
    return hk


def test_auto_is_the_engines_own_reset_and_credentials_never_show() -> None:
    assert hook("auto").target() == ROOT + "/reset_prefix_cache"
    assert hook("auto", "sglang").target() == ROOT + "/flush_cache"
    assert hook("auto", "llamacpp").target() is None
    assert hook("http://u:pw@h:1/r").target() == "http://h:1/r"
    assert hook("cmd:curl http://u:pw@h/r -s").target() == "curl http://h/r -s"
    assert Hook.of("x", None, "vllm", ROOT, {}) is None


def test_a_command_that_exits_0_is_ok_and_its_line_is_written() -> None:
    out = Lines()
    ok = Hook("reset_prefix_cache", HookSpec("cmd", (sys.executable, "-c", "print('done')")),
              None, ROOT, {})
    line = ok.call(out, step=2)  # type: ignore[arg-type]
    assert out.lines == [line]
    assert (line["type"], line["status"], line["answer"], line["ok"], line["step"]) == (
        "hook", 0, "done", True, 2)
    assert isinstance(line["t_ns"], int)


def test_a_required_hook_that_fails_raises_an_optional_one_does_not() -> None:
    out = Lines()
    fail = (sys.executable, "-c", "import sys; print('no'); sys.exit(3)")
    required = Hook("reset_prefix_cache", HookSpec("cmd", fail), None, ROOT, {})
    with pytest.raises(HookFailed, match="--reset-prefix-cache failed: .* answered 3: no"):
        required.must(out)  # type: ignore[arg-type]
    phases: list[str] = []
    with pytest.raises(UsageError):
        required.before_load(out, phases.append)  # type: ignore[arg-type]
    assert phases == ["calling the hook reset_prefix_cache"]
    aborted: list[str] = []
    required.during(out, aborted.append, step=1)  # type: ignore[arg-type]
    assert len(aborted) == 1 and "answered 3" in aborted[0]
    optional = Hook("reset_prefix_cache", HookSpec("cmd", fail, True), None, ROOT, {})
    optional.before_load(out, phases.append)  # type: ignore[arg-type]
    assert [x["ok"] for x in out.lines] == [False] * 4
    assert [x["optional"] for x in out.lines] == [False, False, False, True]


def test_auto_on_an_engine_without_a_reset_and_a_dead_url_fail_with_no_status() -> None:
    out = Lines()
    line = hook("auto", None).call(out)  # type: ignore[arg-type]
    assert (line["status"], line["ok"], line["target"]) == (None, False, None)
    assert "engine (unknown) has no known reset_prefix_cache endpoint" in line["answer"]
    line = hook(ROOT + "/reset_prefix_cache").call(out)  # type: ignore[arg-type]
    assert (line["status"], line["ok"]) == (None, False) and line["answer"]


def test_the_run_hooks_are_what_the_options_ask_for() -> None:
    from anvil_metrics.live.hooks import RunHooks
    from anvil_metrics.load.options import run_options

    def hooks(**values: Any) -> RunHooks:
        opts = run_options(values, host=ROOT, users=1, api_key=None)
        return RunHooks.of(opts, "sglang", ROOT, {})

    none = hooks()
    assert none.reset is None and none.profile is None
    both = hooks(reset_prefix_cache="auto", server_profile=True, hook_optional=True)
    assert both.reset is not None and both.reset.target() == ROOT + "/flush_cache"
    assert both.profile is not None
    assert [(h.target(), h.spec.optional) for h in both.profile] == [
        (ROOT + "/start_profile", True), (ROOT + "/stop_profile", True)]
    out = Lines()
    none.before_measured(out, out.write, _sc(warmup_requests=3),  # type: ignore[arg-type]
                         lambda: None)
    none.after_measured(out)  # type: ignore[arg-type]
    assert out.lines == []


def test_profile_when_running_implies_the_profile_and_waits_for_the_count() -> None:
    import gevent

    from anvil_metrics.live.hooks import RunHooks
    from anvil_metrics.load.options import run_options

    opts = run_options({"profile_when_running": "3", "profile_max_s": "0.05"}, host=ROOT,
                       users=1, api_key=None)
    assert (opts.profile, opts.profile_when_running, opts.profile_max_s) == (True, 3, 0.05)
    hooks = RunHooks.of(opts, "vllm", ROOT, {})
    assert hooks.profile is not None and hooks.max_s == 0.05
    seen: list[float | None] = [None, 1, 2]
    out, aborted = Lines(), []
    hooks.before_measured(out, aborted.append, _sc(),  # type: ignore[arg-type]
                          lambda: seen.pop(0) if seen else 3)
    gevent.sleep(0.5)  # a few polls, the start (dead port: it fails), its bound, the stop
    assert [x["name"] for x in out.lines] == ["start_profile", "stop_profile"]
    assert len(aborted) == 1 and "--start-profile failed" in aborted[0]
    hooks.after_measured(out)  # type: ignore[arg-type]
    assert len(out.lines) == 2  # the watch's own stop, never a second


def test_a_timed_window_holds_the_profile_from_its_warmup_to_its_cooldown() -> None:
    """`--duration 0.4s --warmup 0.15s --cooldown 0.1s`: the profile starts 0.15 s after the
    measured load begins and stops 0.1 s before its end, while the load goes on; the end of
    the load then stops nothing a second time."""
    import time

    import gevent

    from anvil_metrics.live.hooks import RunHooks
    from anvil_metrics.load.options import run_options

    opts = run_options({"server_profile": True}, host=ROOT, users=1, api_key=None)
    hooks = RunHooks.of(opts, "vllm", ROOT, {})
    at: list[tuple[str, float]] = []
    out = Lines()
    t0 = time.monotonic()
    out.write = lambda line: (out.lines.append(line),  # type: ignore[method-assign]
                              at.append((line["name"], time.monotonic() - t0)))
    hooks.before_measured(out, lambda why: None,  # type: ignore[arg-type]
                          _sc(duration="0.4s", warmup="0.15s", cooldown="0.1s"), lambda: None)
    assert out.lines == []  # not at the load's start
    gevent.sleep(0.5)
    assert [name for name, _ in at] == ["start_profile", "stop_profile"]  # by the window
    assert 0.15 <= at[0][1] < at[1][1] and at[1][1] >= 0.3, at
    hooks.after_measured(out)  # type: ignore[arg-type]
    gevent.sleep(0.01)
    assert len(at) == 2
