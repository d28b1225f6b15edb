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
from typing import Any

import numpy as np

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.conversation import ConversationPlan, parse_conversation
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing, fmt, keys_problem, set_without_block
from anvil_metrics.post.stats import nearest_rank_columns

BLOCK_KEYS = ("plan", "conversations", "completed", "cut", "expected_reuse",
              "reported_reuse", "turns")
TURN_KEYS = ("turn", "requests", "ttft_p50_ms", "ttft_p95_ms", "e2e_p50_ms", "e2e_p95_ms",
             "prompt_tokens_mean", "history_tokens_mean", "cached_tokens_mean",
             "expected_reuse", "reported_reuse")


def _mean(rows: RowColumns, name: str) -> float | None:
    v = rows.values(name)
    v = v[~np.isnan(v)]
    return float(v.mean()) if len(v) else None


def reuse_ratio(rows: RowColumns, part: str) -> float | None:
    """Σ part / Σ prompt_tokens over the rows that have both (history_tokens: a first
    turn's null counts as 0, it has no history of its own)."""
    prompt = rows.values("prompt_tokens")
    num = rows.values(part)
    if part == "history_tokens":
        num = np.where(rows.counts["turn"] == 1, 0.0, num)
    both = ~np.isnan(prompt) & ~np.isnan(num)
    total = float(prompt[both].sum())
    return float(num[both].sum()) / total if both.any() and total > 0 else None


def _turn(rows: RowColumns, k: int) -> dict[str, Any]:
    mine = rows.select(rows.counts["turn"] == k)
    ttft = mine.values("ttft_ms")
    e2e = mine.values("e2e_ms")
    t50, t95 = nearest_rank_columns(ttft[~np.isnan(ttft)], (50, 95))
    e50, e95 = nearest_rank_columns(e2e[~np.isnan(e2e)], (50, 95))
    return {"turn": k, "requests": len(mine), "ttft_p50_ms": t50, "ttft_p95_ms": t95,
            "e2e_p50_ms": e50, "e2e_p95_ms": e95,
            "prompt_tokens_mean": _mean(mine, "prompt_tokens"),
            "history_tokens_mean": _mean(mine, "history_tokens"),
            "cached_tokens_mean": _mean(mine, "cached_tokens"),
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


def build_conversation(table: Mapping[str, Any], rows: RowColumns) -> dict[str, Any]:
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


def check_conversation(doc: Mapping[str, Any], rows: RowColumns | None,
                       problems: list[str]) -> None:
    """The `conversation` block recomputed from the rows (when they are well-typed), and
    rows that name a conversation only in a run that has one."""
    block = doc.get("conversation")
    if block is None:
        problems += set_without_block(rows, ("conversation_id",), "conversation")
        return
    wrong = keys_problem("conversation", block, BLOCK_KEYS)
    if wrong is not None:
        problems.append(wrong)
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
    problems += differing("conversation", block, want, (k for k in BLOCK_KEYS if k != "turns"))
    got = block["turns"]
    if not isinstance(got, list) or len(got) != len(want["turns"]):
        problems.append(f"conversation.turns: expected {len(want['turns'])} turns, file has "
                        f"{fmt(got)}")
        return
    for i, (g, w) in enumerate(zip(got, want["turns"], strict=True)):
        if not isinstance(g, dict) or set(g) != set(TURN_KEYS):
            problems.append(f"conversation.turns[{i}]: expected keys {list(TURN_KEYS)}")
            continue
        problems += differing(f"conversation.turns[{i}]", g, w, TURN_KEYS,
                              f"the rows of turn {i + 1}")


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """The CLI's lines for the `conversation` block (none without one): the counts and
    reuse, then a row per turn (the first 20)."""
    b = doc.get("conversation")
    if not isinstance(b, dict):
        return []

    def num(v: Any, spec: str) -> str:
        return "null" if v is None else format(v, spec)

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
