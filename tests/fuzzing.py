"""How many examples a property test tries: `examples(full)`.

`make test` runs each property test at a quarter of its full count (never under 25, never
over the full count): at full counts the property tests took ~60 of the suite's ~520
CPU-seconds, most of it a few fuzzers of the SSE path at 1,000-1,500 examples. Every
property is still tried on fresh random cases in every run, with each test's explicit
`@example` cases always; `make fuzz` (`ANVIL_FUZZ=full`) runs the full counts, before a
release or after a change to a parser.
"""

from __future__ import annotations

import os

FULL = os.environ.get("ANVIL_FUZZ", "") == "full"


def examples(full: int) -> int:
    """The `max_examples` of a property test whose full count is `full`."""
    return full if FULL else min(full, max(25, full // 4))
