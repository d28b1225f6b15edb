"""A run over several replicas' `replicas` block: each replica's requests and figures.

Why a block of its own: `-H URL,URL` spreads the requests over replicas with no router in
front, and the run-wide `metrics` pool them: a slow or dead replica hides in the run's
percentiles. Each replica gets its own counts and latencies, and the run one balance figure.

    "replicas": {
      "endpoints": [{"url": "http://a:8000/v1", "requests": 50, "completed": 50,
                     "failed": 0, "ttft_p50_ms": …, "ttft_p95_ms": …, "e2e_p50_ms": …,
                     "e2e_p95_ms": …, "stopped_answering_at_s": null}, …],
                                                  # in params.replicas' order
      "policy": "round-robin",                    # --balance (params.balance)
      "balance": 1.0                              # max requests / min requests
    }

Definitions: a replica's `completed` are the rows whose `replica` is its position, `failed`
the `failures[]` entries whose `replica` is, `requests` their sum; percentiles are
nearest-rank over its rows (`blockkit.latencies`); `balance` is the most requests any
replica had over the fewest (1: even), null when one had none. `stopped_answering_at_s` is
when the abort rule counted the replica dead (`live/abort.py`: seconds since the load
began, on the load process's clock; null: never), from the raw `run_end` line. `anvil
verify` recomputes the block from the rows, the failures and the header's URLs it lists,
all but `stopped_answering_at_s` (a live reading: verify holds it to a replica with
failures) and `policy` (held to `--balance`'s values).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from msgspec import Struct

from anvil_metrics.fieldtypes import Count, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.load.scenariofields import BALANCES
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, GroupLatencies, _Absent, latencies, num
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing, set_without_block


class Replica(GroupLatencies, forbid_unknown_fields=True):
    """One replica's counts and figures (its latencies: `GroupLatencies`)."""

    url: Annotated[str, described("", "the replica's URL (no credentials)")]
    requests: Annotated[Count, described("", "completed + failed")]
    completed: Annotated[Count, described("", "its rows (replica = its position)")]
    failed: Annotated[Count, described("", "its failures[] entries")]
    stopped_answering_at_s: Annotated[float | None, described(
        "s", "when the abort rule counted it dead (stopped answering, or failing), since "
             "the load began; null: never")] = None


class Replicas(Struct, forbid_unknown_fields=True, kw_only=True):
    """A run over several replicas (module docstring)."""

    endpoints: Annotated[list[Replica], described(
        "", "one entry per replica, in the order -H named them (params.replicas)")]
    policy: Annotated[str | None, described(
        "", "how requests were spread (--balance): round-robin or least-in-flight; null: "
            "not recorded")] = None
    balance: Annotated[float | None, described(
        "", "the most requests any replica had / the fewest (1: even); null when one had "
            "none")]


def build_replicas(urls: list[JsonValue], rows: RowColumns, failures: list[JsonValue],
                   policy: JsonValue = None, stopped: JsonValue = None) -> JsonObject:
    """The block (module docstring) of a run over the replicas `urls`; `stopped`: the
    run_end line's `replicas_stopped_at_s` (None: none)."""
    at = stopped if isinstance(stopped, list) and len(stopped) == len(urls) else [None] * len(
        urls)
    present, index = rows.present["replica"], rows.counts["replica"]
    out = []
    for i, url in enumerate(urls):
        mine = rows.select(present & (index == i))
        failed = sum(1 for f in failures if isinstance(f, dict) and f.get("replica") == i)
        out.append({"url": url, "requests": len(mine) + failed, "completed": len(mine),
                    "failed": failed, **latencies(mine), "stopped_answering_at_s": at[i]})
    counts = [e["requests"] for e in out]
    return {"endpoints": out, "policy": policy,
            "balance": max(counts) / min(counts) if counts and min(counts) > 0 else None}


def _failures(doc: Mapping[str, JsonValue]) -> list[JsonValue]:
    failures = doc.get("failures")
    return failures if isinstance(failures, list) else []


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run over several replicas (`params.replicas`), else ABSENT."""
    urls = inputs.params.get("replicas")
    if not isinstance(urls, list):
        return ABSENT
    return build_replicas(urls, inputs.rows, _failures(inputs.doc), inputs.params.get("balance"),
                          (inputs.raw.run_end or {}).get("replicas_stopped_at_s"))


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
    if block.get("policy") not in (None, *BALANCES):
        problems.append(f"replicas.policy: {block.get('policy')!r} is not one of {BALANCES}")
    for i, (g, w) in enumerate(zip(block["endpoints"], want["endpoints"], strict=True)):
        problems += differing(f"replicas.endpoints[{i}]", g, w,
                              [k for k in w if k != "stopped_answering_at_s"])
        if g.get("stopped_answering_at_s") is not None and not g["failed"]:
            problems.append(f"replicas.endpoints[{i}].stopped_answering_at_s: "
                            f"{g['stopped_answering_at_s']} on a replica with no failure")


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
    lines.append(f"balance (max/min requests): {num(b.get('balance'), '.3f')}"
                 f" ({b.get('policy') or 'round-robin'})")
    lines += [f"{e.get('url')} stopped answering at {e['stopped_answering_at_s']:.1f} s"
              for e in b.get("endpoints") or [] if e.get("stopped_answering_at_s") is not None]
    return lines
