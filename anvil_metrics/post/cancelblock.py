"""A run with planned cancellations: its `cancel` block, the requests closed on purpose.

Why a block: a cancelled request is the client's doing, not the server's failure, so it is
neither a row nor an error of the run; the question it answers is "did the server take the
aborts?" (its slots and KV cache freed). The block says how many were closed, and where;
the server block's `requests` (the requests the server finished in the window, by its own
count) equal to the run's `completed` says it finished none of them. vLLM 0.32 counts a
request its client abandoned under no finish reason (`vllm:request_success_total`'s
"abort" stayed 0 after 4 disconnects on its CPU build), so that is the confirmation.

    "cancel": {
      "plan": {"rate": 0.1, "after": "decode", "seed": 0},   # load/cancel.py, as checked
      "aborted": 41,               # measured requests closed on purpose
      "share": 0.1025,             # aborted / the run's measured requests (null: none)
      "phases": {"headers": 0, "prefill": 0, "decode": 41}   # where each was when closed
    }

Definitions: `aborted` counts the document's `failures[]` of kind `aborted` (every one is
a cancellation: nothing else makes that kind); `phases` splits them by the failure's phase
(a delay in ms may close a request before its response head: `headers`). A request the
plan drew that completed first is a completed request with its row. `anvil verify`
recomputes the block from `failures[]` and `requests`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from msgspec import Struct

from anvil_metrics.errors import ScenarioError
from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.load.cancel import KIND, parse_cancel
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent, num
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing

PHASE_KEYS = ("headers", "prefill", "decode")


class CancelPhases(Struct, forbid_unknown_fields=True):
    """The requests closed on purpose, by the phase each was in."""

    headers: Annotated[Count, described("", "closed before the response head arrived (a "
                                            "delay in ms)")]
    prefill: Annotated[Count, described("", "closed before the first output: written and "
                                            "not yet answered")]
    decode: Annotated[Count, described("", "closed after the first output")]


class Cancel(Struct, forbid_unknown_fields=True):
    """The requests closed on purpose (module docstring)."""

    plan: Annotated[dict[str, Any], described(
        "", "{rate, after, seed}: the fraction of measured requests closed on purpose, when "
            "(prefill, decode, or ms after the start) and the draw's seed (load/cancel.py)")]
    aborted: Annotated[Count, described("", "measured requests closed on purpose: "
                                            "failures[] of kind aborted")]
    share: Annotated[Figure | None, described("", "aborted / requests; null without "
                                                  "requests")]
    phases: Annotated[CancelPhases, described("", "aborted by the phase each was in when "
                                                  "closed: headers, prefill, decode")]


def build_cancel(plan: Mapping[str, JsonValue], failures: Sequence[Any], requests: int
                 ) -> JsonObject:
    """The block (module docstring) of a run whose `params.cancel` is `plan`."""
    mine = [f for f in failures if isinstance(f, Mapping) and f.get("kind") == KIND]
    return {"plan": dict(plan), "aborted": len(mine),
            "share": len(mine) / requests if requests else None,
            "phases": {p: sum(1 for f in mine if f.get("phase") == p) for p in PHASE_KEYS}}


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run with planned cancellations (`params.cancel`), else ABSENT."""
    plan = inputs.params.get("cancel")
    if not isinstance(plan, dict):
        return ABSENT
    return build_cancel(plan, inputs.doc["failures"], inputs.doc["requests"])


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """The block recomputed from `failures[]`; aborted failures only with one."""
    block = doc.get("cancel")
    failures = doc.get("failures") if isinstance(doc.get("failures"), list) else []
    if block is None:
        if any(isinstance(f, dict) and f.get("kind") == KIND for f in failures):
            problems.append(f"failures[]: kind {KIND!r} in a file with no cancel block")
        return
    plan = block["plan"]
    try:
        if set(plan) != {"rate", "after", "seed"}:
            raise ScenarioError("cancel.plan", plan, "{rate, after, seed}")
        parse_cancel({"rate": plan["rate"], "after": plan["after"]}, 0, "cancel.plan")
    except ScenarioError as e:
        problems.append(f"cancel.plan: {e}")
        return
    requests = doc.get("requests")
    want = build_cancel(plan, failures, requests if isinstance(requests, int) else 0)
    problems += differing("cancel", block, want, ("aborted", "share", "phases"), "failures[]")


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's line for the block (none without one)."""
    b = doc.get("cancel")
    if not isinstance(b, dict):
        return []
    plan, phases = b.get("plan") or {}, b.get("phases") or {}
    after = plan.get("after")
    when = f"{after} ms after the start" if isinstance(after, int | float) else f"at {after}"
    finished = (doc.get("server") or {}).get("requests")  # the server's own count
    return [f"cancelled on purpose: {b.get('aborted')} requests "
            f"({num(b.get('share'), '.3f')} of the run; planned "
            f"{plan.get('rate')}) {when}; when closed: "
            + ", ".join(f"{p} {phases.get(p)}" for p in PHASE_KEYS)
            + ("" if finished is None else f"; the server finished {finished} requests in "
               f"the window, the client completed {doc.get('completed')}")]
