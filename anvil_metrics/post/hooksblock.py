"""The `hooks` block: every control hook the run called, with its answer and time.

Why in the document: a figure measured after a prefix-cache reset is not the figure of a
warm server, so the reader of `benchmark.json` must see which hooks ran, when, against
what, and what the server answered (a failed optional hook leaves the cache warm). The
raw file's `"hook"` lines (`live/hooks.py`) are copied in the order called, their stamp
placed on the run's clock as seconds after its header (as `steps[]` are).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from msgspec import Struct

from anvil_metrics.fieldtypes import Count, described
from anvil_metrics.jsonio import JsonValue
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent

__all__ = ["HookCall", "build", "summary_lines"]


class HookCall(Struct, forbid_unknown_fields=True, kw_only=True):
    """One call of a control hook."""

    name: Annotated[str, described(
        "", "the hook: reset_prefix_cache, start_profile or stop_profile")]
    target: Annotated[str | None, described(
        "", "what was called: the URL POSTed to (no credentials) or the command; null for "
            "auto on a server whose engine has no known cache reset")]
    status: Annotated[int | None, described(
        "", "the answer: its HTTP status, or the command's exit code; null without one")]
    answer: Annotated[str, described("", "the answer's first words (or why there was none)")]
    at_s: Annotated[float, described("s", "when it was called, seconds after the run's "
                                          "header")]
    ok: Annotated[bool, described("", "it answered 2xx (a command: exit 0)")]
    optional: Annotated[bool, described(
        "", "its failure did not stop the run (--hook-optional, or a trailing ?)")]
    step: Annotated[Count | None, described(
        "", "the sweep step it was called before; null before the measured load")]


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The hooks' calls, else ABSENT (a run without hooks)."""
    raw = inputs.raw
    if not raw.hooks:
        return ABSENT
    anchor = raw.hooks[0]["t_ns"] if inputs.anchor_ns is None else inputs.anchor_ns
    return [{"name": h.get("name"), "target": h.get("target"), "status": h.get("status"),
             "answer": h.get("answer"), "at_s": (h["t_ns"] - anchor) / 1e9,
             "ok": h.get("ok"), "optional": h.get("optional"), "step": h.get("step")}
            for h in raw.hooks]


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """One line for the hooks: how many were called and how many failed."""
    hooks = doc.get("hooks")
    if not isinstance(hooks, list) or not hooks:
        return []
    failed = sum(1 for h in hooks if isinstance(h, dict) and not h.get("ok"))
    return [f"hooks: {len(hooks)} called" + (f", {failed} failed" if failed else "")]
