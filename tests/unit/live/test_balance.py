"""`live/balance`: round-robin by request index; least-in-flight to the fewest in flight,
ties rotating, a replica counted dead skipped (all of them candidates once all are dead)."""

from __future__ import annotations

import pytest

from anvil_metrics.live.balance import Balancer


def test_round_robin_is_the_request_index_modulo_whatever_is_in_flight() -> None:
    b = Balancer(3, "round-robin")
    b.mark_dead(1)  # the same split every run: a dead replica keeps its share
    assert [b.pick(i) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert b.in_flight == [3, 2, 2]


def test_least_in_flight_goes_to_the_fewest_and_ties_rotate() -> None:
    b = Balancer(2, "least-in-flight")
    # one request at a time: every pick is a tie, and ties rotate (not always the first)
    picks = []
    for i in range(4):
        picks.append(b.pick(i))
        b.done(picks[-1])
    assert picks == [0, 1, 0, 1]
    # replica 0 slow: its requests stay in flight, so the next ones go to replica 1
    assert b.pick(10) == 0 and b.pick(11) == 1
    b.done(1)
    assert [b.pick(12), b.pick(13)] == [1, 0] and b.in_flight == [2, 1]
    assert b.pick(14) == 1 and b.in_flight == [2, 2]


def test_least_in_flight_skips_a_dead_replica_until_every_one_is_dead() -> None:
    b = Balancer(3, "least-in-flight")
    b.mark_dead(1)  # it fails fast, so it has none in flight: still never picked
    assert {b.pick(i) for i in range(6)} == {0, 2}
    b.mark_dead(0)
    b.mark_dead(2)
    assert b.pick(6) == 1  # all dead: all candidates again (the run is aborting)


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="random"):
        Balancer(2, "random")
