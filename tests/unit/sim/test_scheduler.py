"""The simulator's schedulers (`sim/scheduler.py`): inside a fire, `now_ns` is the deadline
that fired, not the clock, so a chain of deadlines never drifts; outside, it is the clock."""

from __future__ import annotations

import asyncio
import time

import pytest

from anvil_metrics.sim.scheduler import AsyncioScheduler, make_scheduler

MS = 1_000_000


@pytest.mark.parametrize("kind", ["asyncio", "auto"])
def test_scheduler_now_is_the_firing_deadline(kind: str) -> None:
    seen: list[tuple[int, int]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sched = make_scheduler(loop, kind)
        assert kind != "asyncio" or isinstance(sched, AsyncioScheduler)
        done = asyncio.Event()
        deadline = time.monotonic_ns() + 5 * MS

        class Item:
            def fire(self) -> None:
                seen.append((deadline, sched.now_ns()))
                done.set()

        sched.at(deadline, Item())
        await asyncio.wait_for(done.wait(), 5)
        outside = sched.now_ns()
        sched.close()
        assert outside >= deadline  # outside a fire: the clock

    asyncio.run(main())
    assert seen and seen[0][0] == seen[0][1]
