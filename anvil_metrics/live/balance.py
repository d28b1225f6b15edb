"""Which replica a request goes to (`--host URL,URL`, `--balance`): this load process's
picks and its requests in flight on each replica.

Why a balancer of its own: with no router in front, the load generator is the router, and
how it spreads the requests is part of what a run measures. Two policies (`BALANCES`):

- `round-robin`: request index i goes to replica i % their count, whatever happened
  before: the same split every run, a dead replica's share included (its failures are
  its own stream, `abort.py`);
- `least-in-flight`: each request goes to the replica with the fewest of this process's
  requests in flight, counted from the pick (just before the send, after the prefill gate)
  until the request ends, completed, failed or cancelled. Ties rotate: of the replicas
  tied, the first at or after the one past the previous pick (one user alternates, as
  round-robin would; ties always to the lowest would send a lone user's every request to
  the first). A replica counted dead (`abort.FailureWatch`: it stopped answering) is
  skipped for the rest of the run: one that fails fast has few in flight and would
  otherwise draw the most requests; when every replica is dead they are all candidates
  again (the run is aborting then).

Per load process: with `--processes N` or distributed workers each process balances its
own requests, knowing nothing of the others' in flight; but a replica the master counts
dead is marked dead in every worker's balancer too (`cluster/worker.py`, `anvil_dead`).
One greenlet at a time touches it (gevent): no lock.
"""

from __future__ import annotations

from anvil_metrics.load.scenariofields import BALANCES


class Balancer:
    """`n` replicas under `policy` (one of `BALANCES`; module docstring)."""

    def __init__(self, n: int, policy: str = "round-robin") -> None:
        if policy not in BALANCES:
            raise ValueError(f"balance {policy!r} is not one of {BALANCES}")
        self.policy = policy
        self.in_flight = [0] * n  # this process's requests in flight, per replica
        self.dead = [False] * n  # counted dead by the abort rule (`mark_dead`)
        self._next = 0  # least-in-flight: where a tie's search starts

    def pick(self, request_index: int) -> int:
        """The replica request `request_index` goes to, counted in flight until `done`."""
        n = len(self.in_flight)
        if self.policy == "round-robin":
            i = request_index % n
        else:
            live = [j for j in range(n) if not self.dead[j]] or list(range(n))
            fewest = min(self.in_flight[j] for j in live)
            i = next(j for j in (*range(self._next, n), *range(self._next))
                     if j in live and self.in_flight[j] == fewest)
            self._next = (i + 1) % n
        self.in_flight[i] += 1
        return i

    def done(self, replica: int) -> None:
        """Request on `replica` ended (completed, failed or cancelled)."""
        self.in_flight[replica] -= 1

    def mark_dead(self, replica: int) -> None:
        """`replica` stopped answering: least-in-flight sends it nothing more."""
        self.dead[replica] = True
