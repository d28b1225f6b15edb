"""A run over several replicas' `replicas` block: each replica's requests and figures.

Why a block of its own: `-H URL,URL` spreads the requests over replicas with no router in
front, and the run-wide `metrics` pool them: a slow or dead replica hides in the run's
percentiles. Each replica gets its own counts and latencies, and the run one balance figure.

    "replicas": {
      "endpoints": [{"url": "http://a:8000/v1", "requests": 50, "completed": 50,
                     "failed": 0, "ttft_p50_ms": …, "ttft_p95_ms": …, "e2e_p50_ms": …,
                     "e2e_p95_ms": …}, …],        # in params.replicas' order
      "balance": 1.0                              # max requests / min requests
    }

Definitions: a replica's `completed` are the rows whose `replica` is its position, `failed`
the `failures[]` entries whose `replica` is, `requests` their sum; percentiles are
nearest-rank over its rows (`blockkit.latencies`); `balance` is the most requests any
replica had over the fewest (1: even), null when one had none. `anvil verify` recomputes
the whole block from the rows, the failures and the header's URLs it lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from msgspec import Struct

from anvil_metrics.fieldtypes import Count, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, GroupLatencies, _Absent, latencies, num
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing, set_without_block


class Replica(GroupLatencies, forbid_unknown_fields=True):
    """One replica's counts and figures (its latencies: `GroupLatencies`)."""

    url: Annotated[str, described("", "the replica's URL (no credentials)")]
    requests: Annotated[Count, described("", "completed + failed")]
    completed: Annotated[Count, described("", "its rows (replica = its position)")]
    failed: Annotated[Count, described("", "its failures[] entries")]


class Replicas(Struct, forbid_unknown_fields=True):
    """A run over several replicas (module docstring)."""

    endpoints: Annotated[list[Replica], described(
        "", "one entry per replica, in the order -H named them (params.replicas)")]
    balance: Annotated[float | None, described(
        "", "the most requests any replica had / the fewest (1: even); null when one had "
            "none")]


def build_replicas(urls: list[JsonValue], rows: RowColumns,
                   failures: list[JsonValue]) -> JsonObject:
    """The block (module docstring) of a run over the replicas `urls`."""
    present, index = rows.present["replica"], rows.counts["replica"]
    out = []
    for i, url in enumerate(urls):
        mine = rows.select(present & (index == i))
        failed = sum(1 for f in failures if isinstance(f, dict) and f.get("replica") == i)
        out.append({"url": url, "requests": len(mine) + failed, "completed": len(mine),
                    "failed": failed, **latencies(mine)})
    counts = [e["requests"] for e in out]
    return {"endpoints": out,
            "balance": max(counts) / min(counts) if counts and min(counts) > 0 else None}


def _failures(doc: Mapping[str, JsonValue]) -> list[JsonValue]:
    failures = doc.get("failures")
    return failures if isinstance(failures, list) else []


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run over several replicas (`params.replicas`), else ABSENT."""
    urls = inputs.params.get("replicas")
    if not isinstance(urls, list):
        return ABSENT
    return build_replicas(urls, inputs.rows, _failures(inputs.doc))


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """The block recomputed from the rows and failures; rows that name a replica only in a
    run that has the block."""
    block = doc.get("replicas")
    if block is None:
        problems += set_without_block(rows, ("replica",), "replicas")
        return
    if rows is None:
        return
    if "replica" in rows.absent or not rows.present["replica"].all():
        problems.append("request_timings[]: a run over replicas has replica in every row")
        return
    urls: list[JsonValue] = [e["url"] for e in block["endpoints"]]
    if (rows.counts["replica"] >= len(urls)).any():
        problems.append(f"request_timings[].replica: a position past the {len(urls)} "
                        "replicas")
        return
    want = build_replicas(urls, rows, _failures(doc))
    problems += differing("replicas", block, want, ("balance",))
    for i, (g, w) in enumerate(zip(block["endpoints"], want["endpoints"], strict=True)):
        problems += differing(f"replicas.endpoints[{i}]", g, w, w)


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's lines for the `replicas` block (none without one): a line per replica."""
    b = doc.get("replicas")
    if not isinstance(b, dict):
        return []
    lines = [f"{'replica':<32}{'requests':>10}{'failed':>8}{'ttft p50':>11}{'ttft p95':>11}"
             f"{'e2e p50':>11}  (ms)"]
    for e in b.get("endpoints") or []:
        lines.append(f"{str(e.get('url'))[:31]:<32}{e.get('requests'):>10}"
                     f"{e.get('failed'):>8}{num(e.get('ttft_p50_ms'), ',.1f'):>11}"
                     f"{num(e.get('ttft_p95_ms'), ',.1f'):>11}"
                     f"{num(e.get('e2e_p50_ms'), ',.1f'):>11}")
    lines.append(f"balance (max/min requests): {num(b.get('balance'), '.3f')}")
    return lines
