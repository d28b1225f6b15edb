"""One repair to Locust, made in every Locust process that loads anvil's plugin.

Locust 2.47's worker, on each spawn message (every start, every change of the user count),
keeps the master's options that are not Locust's own with a comprehension that calls
`locust.argument_parser.default_args_dict()` once per option
(`WorkerRunner.handle_message`, `locust/runners.py`); each call builds and parses Locust's whole
argument parser (3.8 ms of CPU here). With anvil's options a spawn message carries ~150, so
a worker spent ~0.5 CPU-s before starting its users, seconds on a busy machine: users started
late, a sweep's first step could get no requests at all, and past 3 s the master counted the
worker's heartbeats as missed (seen: a stalled `WorkerRunner.handle_message` under py-spy;
with the repair the first request came 0.3-0.45 s after the start instead of 1.7-4.7 s).

The defaults do not change within a process, so they are computed once: `default_args_dict`
is replaced by a cached version that returns a fresh copy each call (a caller may change the
dict it gets). Nothing else of Locust is touched; `install` is idempotent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from locust import argument_parser

_ORIGINAL = "_anvil_uncached"


def install() -> None:
    """Replace `locust.argument_parser.default_args_dict` by a cached one (once)."""
    current = argument_parser.default_args_dict
    if getattr(current, _ORIGINAL, None) is not None:
        return
    computed = functools.cache(current)

    def default_args_dict() -> dict:
        return dict(computed())

    setattr(default_args_dict, _ORIGINAL, current)
    default_args_dict.__doc__ = current.__doc__
    argument_parser.default_args_dict = default_args_dict


def uncached() -> Callable[[], dict]:
    """Locust's own function, as it was before `install` (for tests)."""
    current = argument_parser.default_args_dict
    return getattr(current, _ORIGINAL, current)
