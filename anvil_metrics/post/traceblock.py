"""A replay's `trace` block: what was replayed, and the prefix reuse the trace allows beside
what the server says it served.

    "trace": {"file": "mooncake.jsonl", "format": "mooncake", "speed": 4.0, "limit": null,
              "block_tokens": 512, "model": null, "window_s": null, "requests": 1000,
              "expected_reuse": 0.62,   # the trace's own: its hash_ids replayed in order
              "reported_reuse": 0.61}   # Σ cached_tokens / Σ prompt_tokens of the rows
                                        # reporting cached_tokens (null when none does)

Why: a trace's point is its sharing. `expected_reuse` is computed from the file before the
load (`trace.expected_reuse`: a cache that keeps every block), and is copied from the raw
header; `reported_reuse` comes from the rows, and `anvil verify` recomputes it. A server
that caches less than the trace shares (a small cache, no prefix caching, another block
size) shows it as the difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from anvil_metrics.post.conversations import reuse_ratio
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing, fmt

PLAN_KEYS = ("file", "format", "speed", "limit", "block_tokens", "model", "window_s",
             "requests", "expected_reuse")
KEYS = (*PLAN_KEYS, "reported_reuse")
NEWER_KEYS = ("window_s",)  # a file written before them has none: it still verifies


def build_trace(params: Mapping[str, Any], rows: RowColumns) -> dict[str, Any]:
    """The block from the raw header's `params.trace` and the rows."""
    return {**{k: params.get(k) for k in PLAN_KEYS},
            "reported_reuse": reuse_ratio(rows, "cached_tokens")}


def check_trace(doc: Mapping[str, Any], rows: RowColumns | None, problems: list[str]) -> None:
    """The block's keys, and `reported_reuse` recomputed from the rows (when well-typed)."""
    block = doc.get("trace")
    if block is None:
        return
    if not isinstance(block, dict) or not (
            set(KEYS) - set(NEWER_KEYS) <= set(block) <= set(KEYS)):
        problems.append(f"trace: expected an object with keys {list(KEYS)}, file has "
                        f"{fmt(sorted(block) if isinstance(block, dict) else block)}")
        return
    if rows is None:
        return
    want = {"reported_reuse": reuse_ratio(rows, "cached_tokens")}
    problems += differing("trace", block, want, want)


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """The CLI's line for the block (none without one)."""
    b = doc.get("trace")
    if not isinstance(b, dict):
        return []

    def num(v: Any) -> str:
        return "null" if v is None else f"{v:.3f}"

    return [f"trace: {b.get('file')} ({b.get('format') or 'detected'}), {b.get('requests')} "
            f"requests at {b.get('speed')}x; prefix reuse the trace allows "
            f"{num(b.get('expected_reuse'))}, reported by the server "
            f"{num(b.get('reported_reuse'))}"]
