"""Did the server fail a run's requests: the verdict behind exit code 4, from its document.

Why one function: `anvil run` (which prints the verdict last), the Locust plugin (which
sets the exit code: plain `locust --headless` agrees with `anvil run`), `anvil demo`, a
campaign's run and a capacity search's `error_rate` all judge the same `benchmark.json`, so
the rule is written once, here, over the document without its rows.

The rule: a failed request is a measured one in `failures[]` whose kind is the server's
(`records.NOT_THE_SERVERS` are the client's own: cut by the run's end, or closed on
purpose); the error rate is failed / measured (`requests`); a run fails when every measured
request failed, or, given `--fail-on-error-rate R`, when the error rate is above R. A run
that measured nothing (stopped in its warm-up) has no rate and no verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from anvil_metrics.records import NOT_THE_SERVERS


def server_failures(doc: Mapping[str, Any]) -> Counter[str]:
    """The measured requests the server failed, by failure kind."""
    return Counter(kind for f in doc.get("failures") or []
                   if (kind := f.get("kind")) not in NOT_THE_SERVERS)


def error_rate(doc: Mapping[str, Any]) -> float | None:
    """Failed / measured requests (None: none measured)."""
    requests = doc.get("requests") or 0
    return sum(server_failures(doc).values()) / requests if requests else None


def failure_verdict(doc: Mapping[str, Any], fail_on_error_rate: float | None = None
                    ) -> str | None:
    """The one line a run whose requests failed ends with (module docstring), or None."""
    requests = doc.get("requests") or 0
    kinds = server_failures(doc)
    failed = sum(kinds.values())
    if not requests or not failed:
        return None
    by_kind = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    where = "see benchmark.json's failures"
    if failed == requests:
        return (f"anvil: every one of the {requests} measured requests failed ({by_kind}); "
                f"{where}")
    if fail_on_error_rate is not None and failed / requests > fail_on_error_rate:
        share = 100 * failed / requests
        return (f"anvil: {failed} of the {requests} measured requests failed ({by_kind}): "
                f"{share:.1f} %, above --fail-on-error-rate {fail_on_error_rate:g}; {where}")
    return None
