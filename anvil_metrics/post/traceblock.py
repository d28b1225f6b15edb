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
from typing import Annotated

from msgspec import UNSET, Struct, UnsetType

from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent, num
from anvil_metrics.post.conversations import reuse_ratio
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing


class Trace(Struct, forbid_unknown_fields=True, kw_only=True):
    """What was replayed, and the prefix reuse it allows beside the server's (module
    docstring)."""

    file: Annotated[str, described("", "the trace file's name (its folder is not recorded)")]
    format: Annotated[str | None, described(
        "", "mooncake, burstgpt or jsonl as --trace-format gave it; null: detected")]
    speed: Annotated[Figure, described("", "--trace-speed: the trace replayed this many "
                                           "times faster")]
    limit: Annotated[Count | None, described(
        "", "--trace-limit: only this many of its first requests; null: all")]
    block_tokens: Annotated[Count, described("tok", "tokens per hash id block "
                                                    "(--trace-block)")]
    model: Annotated[str | None, described("", "--trace-model: the BurstGPT rows kept; "
                                               "null: all")]
    # newer than the block: a file written before it has none, and still verifies
    window_s: Annotated[tuple[float | None, float | None] | None | UnsetType, described(
        "s", "--trace-window: [start, end] seconds after the trace's first request (end "
             "null: to its end); null: all")] = UNSET
    requests: Annotated[Count, described("", "the trace's requests replayed")]
    expected_reuse: Annotated[float, described(
        "", "the share of the replayed input tokens a cache keeping every block could "
            "serve, from the trace's own sharing")]
    reported_reuse: Annotated[float | None, described(
        "", "Σ cached_tokens / Σ prompt_tokens over the rows reporting cached_tokens; null "
            "when none does")]


# what the raw header's `params.trace` gives, copied; the last field is the rows'
PLAN_KEYS = Trace.__struct_fields__[:-1]


def build_trace(params: Mapping[str, JsonValue], rows: RowColumns) -> JsonObject:
    """The block from the raw header's `params.trace` and the rows."""
    return {**{k: params.get(k) for k in PLAN_KEYS},
            "reported_reuse": reuse_ratio(rows, "cached_tokens")}


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a replay (`params.trace`), else ABSENT."""
    params = inputs.params.get("trace")
    return build_trace(params, inputs.rows) if isinstance(params, dict) else ABSENT


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """`reported_reuse` recomputed from the rows (when well-typed)."""
    if doc.get("trace") is None or rows is None:
        return
    want = {"reported_reuse": reuse_ratio(rows, "cached_tokens")}
    problems += differing("trace", doc["trace"], want, want)


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's line for the block (none without one)."""
    b = doc.get("trace")
    if not isinstance(b, dict):
        return []
    return [f"trace: {b.get('file')} ({b.get('format') or 'detected'}), {b.get('requests')} "
            f"requests at {b.get('speed')}x; prefix reuse the trace allows "
            f"{num(b.get('expected_reuse'), '.3f')}, reported by the server "
            f"{num(b.get('reported_reuse'), '.3f')}"]
