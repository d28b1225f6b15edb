"""A conversation run's `conversation` block: how many conversations, and each turn's figures.

Why a block of its own: a multi-turn run's question is how a server's latency grows with
history and whether its prefix cache serves that history. The run-wide `metrics` mix first
turns (nothing cached) with tenth turns (almost all cached), so each turn gets its own
figures here, beside the prefix reuse the conversation could have had and what the server
says it had.

    "conversation": {
      "plan": {...},                  # the [conversation] table as checked (conversation.py)
      "conversations": 8,             # conversations with at least one answered turn
      "completed": 6,                 # of those, every drawn turn answered
      "cut": 2,                       # the rest: the run ended (or a turn failed) first
      "expected_reuse": 0.71,         # Σ history_tokens / Σ prompt_tokens (rows with both)
      "reported_reuse": 0.70,         # Σ cached_tokens / Σ prompt_tokens (rows reporting
                                      # cached_tokens; null when no row does)
      "turns": [{"turn": 1, "requests": 8, "ttft_p50_ms": …, "ttft_p95_ms": …,
                 "e2e_p50_ms": …, "e2e_p95_ms": …, "prompt_tokens_mean": …,
                 "history_tokens_mean": …, "cached_tokens_mean": …,
                 "expected_reuse": …, "reported_reuse": …}, …]
    }

Definitions: a turn's rows are the completed requests whose `turn` is k; percentiles are
nearest-rank (`stats`); a mean is over the rows that have the value (null when none does);
`expected_reuse` counts only rows with both `history_tokens` and `prompt_tokens`, and is 0
on first turns (no history: nothing of the conversation's own is cached), null where no
row has a prompt count. A server that caches less than the history shows
`reported_reuse` below `expected_reuse`; more than it (the shared system prompt, the
chat template's header) shows above. A conversation's drawn turns come from the plan and
its number (`ConversationPlan.draws`), so `completed` is recomputable from the rows alone.
`anvil verify` recomputes the whole block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
from msgspec import Struct

from anvil_metrics.errors import ScenarioError
from anvil_metrics.fieldtypes import Count, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.load.conversation import ConversationPlan, parse_conversation
from anvil_metrics.post.blockkit import (
    ABSENT,
    E2E_P50,
    E2E_P95,
    TTFT_P50,
    TTFT_P95,
    BuildInputs,
    _Absent,
    latencies,
    mean_of,
    num,
)
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing, fmt, set_without_block


class Turn(Struct, forbid_unknown_fields=True):
    """One user turn's figures, over the completed requests of that turn."""

    turn: Annotated[Count, described("", "the user turn, from 1")]
    requests: Annotated[Count, described("", "completed requests of this turn")]
    ttft_p50_ms: TTFT_P50
    ttft_p95_ms: TTFT_P95
    e2e_p50_ms: E2E_P50
    e2e_p95_ms: E2E_P95
    prompt_tokens_mean: Annotated[float | None, described(
        "tok", "mean usage.prompt_tokens of the turn's rows that have it")]
    history_tokens_mean: Annotated[float | None, described(
        "tok", "mean history_tokens of the turn's rows that have it")]
    cached_tokens_mean: Annotated[float | None, described(
        "tok", "mean cached_tokens of the turn's rows that report it")]
    expected_reuse: Annotated[float | None, described("",
                                                      "expected_reuse over the turn's rows")]
    reported_reuse: Annotated[float | None, described("",
                                                      "reported_reuse over the turn's rows")]


class Conversation(Struct, forbid_unknown_fields=True):
    """A multi-turn run's conversations and each turn's figures (module docstring)."""

    plan: Annotated[dict[str, Any], described(
        "", "the [conversation] table as checked: turns, turn_tokens, system_prompt_tokens, "
            "prefix_tokens, think_time, history, session_header, seed")]
    conversations: Annotated[Count, described(
        "", "conversations with at least one answered turn")]
    completed: Annotated[Count, described(
        "", "of those, the conversations whose every drawn turn was answered")]
    cut: Annotated[Count, described(
        "", "the others: the run ended, or a turn failed, before their last turn")]
    expected_reuse: Annotated[float | None, described(
        "", "Σ history_tokens / Σ prompt_tokens over the rows with both (a first turn's "
            "history is 0): the share of prompt tokens a prefix cache could serve from the "
            "conversation's own earlier turns")]
    reported_reuse: Annotated[float | None, described(
        "", "Σ cached_tokens / Σ prompt_tokens over the rows reporting cached_tokens: the "
            "share the server says it served from its cache; null when no row reports it")]
    turns: Annotated[list[Turn], described("", "one block per turn number, from 1")]


def reuse_ratio(rows: RowColumns, part: str) -> float | None:
    """Σ part / Σ prompt_tokens over the rows that have both (history_tokens: a first
    turn's null counts as 0, it has no history of its own)."""
    prompt = rows.values("prompt_tokens")
    num_ = rows.values(part)
    if part == "history_tokens":
        num_ = np.where(rows.counts["turn"] == 1, 0.0, num_)
    both = ~np.isnan(prompt) & ~np.isnan(num_)
    total = float(prompt[both].sum())
    return float(num_[both].sum()) / total if both.any() and total > 0 else None


def _turn(rows: RowColumns, k: int) -> JsonObject:
    mine = rows.select(rows.counts["turn"] == k)
    return {"turn": k, "requests": len(mine), **latencies(mine),
            "prompt_tokens_mean": mean_of(mine.values("prompt_tokens")),
            "history_tokens_mean": mean_of(mine.values("history_tokens")),
            "cached_tokens_mean": mean_of(mine.values("cached_tokens")),
            "expected_reuse": reuse_ratio(mine, "history_tokens"),
            "reported_reuse": reuse_ratio(mine, "cached_tokens")}


def plan_of(table: Any) -> ConversationPlan:
    """The plan a run's `params.conversation` (or a block's `plan`) holds; ScenarioError
    when it is not a `[conversation]` table."""
    plan = parse_conversation(table, "params.conversation")
    if plan is None:
        raise ScenarioError("conversation", table, "a [conversation] table",
                            source="params.conversation")
    return plan


def build_conversation(table: Mapping[str, JsonValue], rows: RowColumns) -> JsonObject:
    """The block (module docstring) of a run whose plan is `table`, from its rows."""
    plan = plan_of(dict(table))
    ids = rows.counts["conversation_id"][rows.present["conversation_id"]]
    turns = rows.counts["turn"][rows.present["conversation_id"]]
    answered: dict[int, set[int]] = {}
    for c, k in zip(ids.tolist(), turns.tolist(), strict=True):
        answered.setdefault(c, set()).add(k)
    completed = sum(1 for c, got in answered.items()
                    if got >= set(range(1, plan.draws(c).turns + 1)))
    top = int(turns.max()) if len(turns) else 0
    return {"plan": plan.to_table(), "conversations": len(answered), "completed": completed,
            "cut": len(answered) - completed,
            "expected_reuse": reuse_ratio(rows, "history_tokens"),
            "reported_reuse": reuse_ratio(rows, "cached_tokens"),
            "turns": [_turn(rows, k) for k in range(1, top + 1)]}


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a multi-turn run (`params.conversation`), else ABSENT."""
    table = inputs.params.get("conversation")
    return build_conversation(table, inputs.rows) if isinstance(table, dict) else ABSENT


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """The block recomputed from the rows (when they are well-typed), and rows that name a
    conversation only in a run that has one."""
    block = doc.get("conversation")
    if block is None:
        problems += set_without_block(rows, ("conversation_id",), "conversation")
        return
    try:
        plan_of(block["plan"])
    except ScenarioError as e:
        problems.append(f"conversation.plan: {e}")
        return
    if rows is None:
        return
    if "conversation_id" in rows.absent or not (rows.present["conversation_id"].all()
                                                 and rows.present["turn"].all()):
        problems.append("request_timings[]: every row of a conversation run names its "
                        "conversation_id and turn")
        return
    want = build_conversation(block["plan"], rows)
    problems += differing("conversation", block, want, (k for k in want if k != "turns"))
    got = block["turns"]
    if len(got) != len(want["turns"]):
        problems.append(f"conversation.turns: expected {len(want['turns'])} turns, file has "
                        f"{fmt(got)}")
        return
    for i, (g, w) in enumerate(zip(got, want["turns"], strict=True)):
        problems += differing(f"conversation.turns[{i}]", g, w, w, f"the rows of turn {i + 1}")


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's lines for the `conversation` block (none without one): the counts and
    reuse, then a row per turn (the first 20)."""
    b = doc.get("conversation")
    if not isinstance(b, dict):
        return []
    lines = [f"conversations: {b.get('conversations')} ({b.get('completed')} completed, "
             f"{b.get('cut')} cut); prefix reuse expected "
             f"{num(b.get('expected_reuse'), '.3f')}, reported by the server "
             f"{num(b.get('reported_reuse'), '.3f')}",
             f"{'turn':>6}{'requests':>10}{'ttft p50':>11}{'ttft p95':>11}{'prompt tok':>12}"
             f"{'history tok':>13}{'cached tok':>12}  (ms, means)"]
    for t in (b.get("turns") or [])[:20]:
        lines.append(f"{t.get('turn'):>6}{t.get('requests'):>10}"
                     f"{num(t.get('ttft_p50_ms'), ',.1f'):>11}"
                     f"{num(t.get('ttft_p95_ms'), ',.1f'):>11}"
                     f"{num(t.get('prompt_tokens_mean'), ',.0f'):>12}"
                     f"{num(t.get('history_tokens_mean'), ',.0f'):>13}"
                     f"{num(t.get('cached_tokens_mean'), ',.0f'):>12}")
    return lines
