"""`python -m anvil_metrics.runs.locustmain ARGS`: Locust's own `main()` on ARGS, exactly as
`python -m locust ARGS`, started sooner. `anvil run` starts Locust this way.

Why: importing Locust runs gevent's `monkey.patch_all()`, which announces each of its ~25
patches to plugins through `importlib.metadata.entry_points(group=...)`, and each such call
reads the entry points of every installed distribution again. In a venv with anvil's dev
extra that was 0.4 s of the ~2 s of CPU a small run's Locust process takes (measured here:
`import locust` 1.19 s -> 0.83 s median of 8). Here one reading serves every call made
while Locust is imported, and the function is put back right after: the same parser, plugin
events, forks (`--processes`) and exit code as Locust's own command.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def entry_points_read_once() -> Iterator[None]:
    """While inside: `importlib.metadata.entry_points(**select)` answers from one reading
    of every distribution's entry points, taken at the first call."""
    original: Callable[..., Any] = metadata.entry_points
    everything = functools.cache(original)

    def entry_points(**select: Any) -> Any:
        found = everything()
        return found.select(**select) if select else found

    metadata.entry_points = entry_points
    try:
        yield
    finally:
        metadata.entry_points = original


def main() -> None:
    with entry_points_read_once():
        from locust.main import main as locust_main
    locust_main()


if __name__ == "__main__":
    main()
