"""The simulator's ledger (`sim/ledger.py`): its histograms and token buckets on their own.

The hooks that feed the ledger are tested with fake streams in test_metrics.py, next to the
rendering that reads it.
"""

from __future__ import annotations

from anvil_metrics.sim.ledger import Histogram, token_buckets

# -- histograms --------------------------------------------------------------------------------


def test_histogram_buckets_are_inclusive_and_cumulative() -> None:
    h = Histogram((0.1, 1.0, 10.0))
    for v in (0.05, 0.1, 0.5, 1.0, 10.0, 11.0, 1e9):
        h.observe(v)
    state = h.state()
    assert state.cumulative == (2, 4, 5, 7)  # a value equal to a bound is in its bucket
    assert state.count == 7 and state.total == sum((0.05, 0.1, 0.5, 1.0, 10.0, 11.0, 1e9))


def test_token_buckets_are_1_2_5_up_to_the_context() -> None:
    assert token_buckets(256) == (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
    assert token_buckets(1000)[-1] == 1000.0 and token_buckets(1) == (1.0,)
