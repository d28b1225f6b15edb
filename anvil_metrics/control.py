"""How many requests a run issues, and in what order: tickets.

Locust has no core request budget; anvil's users take a ticket before each request. A
ticket carries the request's index (its 0-based issue order: dense and unique, so a run of
`--requests 37` has rows 0…36 whatever the concurrency), whether it is a warm-up, and its
planned prompt size. Warm-up tickets come first and have their own index sequence; no
measured ticket is handed out until every warm-up request has finished, so warm-up load
never overlaps the measured window. When every measured ticket has been returned, the
budget calls `on_exhausted` once.

In shared-prefix burst mode (`group_size`), measured tickets come in groups of
`group_size` consecutive indices, and a group's tickets are handed out only after every
request of the groups before it has finished: each group arrives at the server as one
burst of requests sharing a prefix, as SGLang's and vLLM's shared-prefix benchmarks send
them, not spread over other groups' requests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gevent.event


@dataclass(frozen=True, slots=True)
class Ticket:
    request_index: int
    warmup: bool
    planned_context_tokens: int


class RequestBudget:
    """Hands out tickets; `None` means the budget is spent (or the run is stopping).

    `requests=None` means unbounded (a run ended by time or by the user).
    """

    def __init__(self, requests: int | None, warmup: int, sizes: list[int],
                 on_exhausted: Callable[[], None] | None = None,
                 group_size: int | None = None) -> None:
        if not sizes:
            raise ValueError("sizes must not be empty")
        self.group_size = group_size
        self._progress = gevent.event.Event()
        self.requests = requests
        self.warmup = warmup
        self._sizes = sizes
        self._next_warmup = 0
        self._next = 0
        self._warmup_done = 0
        self._done = 0
        self._warm = gevent.event.Event()
        if warmup == 0:
            self._warm.set()
        self._closed = False
        self._on_exhausted = on_exhausted

    def size_for(self, index: int) -> int:
        return self._sizes[index % len(self._sizes)]

    def take(self) -> Ticket | None:
        if self._closed:
            return None
        if self._next_warmup < self.warmup:
            i = self._next_warmup
            self._next_warmup += 1
            return Ticket(i, True, self.size_for(i))
        self._warm.wait()
        if self._closed or (self.requests is not None and self._next >= self.requests):
            return None
        i = self._next
        self._next += 1
        if self.group_size:
            barrier = (i // self.group_size) * self.group_size
            while self._done < barrier and not self._closed:
                self._progress.wait()
            if self._closed:  # stopped while waiting: this index was never issued
                self._next = min(self._next, i)
                return None
        return Ticket(i, False, self.size_for(i))

    def give_back(self, ticket: Ticket) -> None:
        """A ticket's request has finished (success or failure)."""
        if ticket.warmup:
            self._warmup_done += 1
            if self._warmup_done >= self.warmup:
                self._warm.set()
            return
        self._done += 1
        progress, self._progress = self._progress, gevent.event.Event()
        progress.set()
        if self.requests is not None and self._done >= self.requests:
            self.close()
            if self._on_exhausted is not None:
                cb, self._on_exhausted = self._on_exhausted, None
                cb()

    def close(self) -> None:
        self._closed = True
        self._warm.set()
        self._progress.set()

    @property
    def issued(self) -> int:
        return self._next

    @property
    def finished(self) -> int:
        return self._done
