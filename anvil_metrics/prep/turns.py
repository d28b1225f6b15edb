"""Conversations' messages, sized by the server's own count: a system prompt every
conversation shares, each conversation's head and prefix, and each turn's new message.

A conversation's turn k sends its history and one new user message:

    [system: S]                            (when system_prompt_tokens > 0; one text for all)
    [user: head(c, 1) + P + B]             (P: prefix_tokens of text; B: the turn's text)
    [assistant: answer 1]                  (the server's own `content`; reasoning dropped)
    ...
    [user: head(c, k) + B]

`head(c, k)` ("Conversation 321000 turn 200000 of run NONCE. ", indices written as
`prompts._index` writes them: fixed width, least significant digit first) opens every
user message, so no two conversations share anything past the system prompt and the
chat template's header: a server's prefix cache can only serve a conversation its own
history.

Each size is a difference of two counts of the templated prompt, so the chat template's
own tokens belong to the message that brings them:

- `turn_tokens`: count(history + [user: head + B]) - count(history), the history a first
  turn and its answer (the generation prompt is in both counts and cancels);
- `prefix_tokens`: count([user: head + P + B]) - count([user: head + B]);
- `system_prompt_tokens`: count([system: S, user: head + B]) - count([user: head + B]).

`prepare` fits each text's word count to its size with `prompts.fit_word_count` (a few
counts each, before the load, with sizing heads so no real prompt is ever sent early);
without a counter, the calibration's estimate sizes them. Every turn's B is one text: the
heads make the messages differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from anvil_metrics.prep.prompts import (
    Calibration,
    CountTokens,
    _index,
    body_text,
    fit_word_count,
)

_SEED_TURN, _SEED_PREFIX, _SEED_SYSTEM = 101, 202, 303  # added to the scenario's seed
SIZING_ANSWER = "Understood."  # the sizing conversation's first answer


def conversation_head(run_nonce: str, conversation: int, turn: int,
                      sizing: bool = False) -> str:
    """The opening of conversation `conversation`'s user message at `turn` (1-based)."""
    # the sizing head has one word of the same length and syllables in place of
    # "Conversation", so it counts as a real head does and is never a real prompt's
    kind = "Calibration" if sizing else "Conversation"
    return f"{kind} {_index(conversation)} turn {_index(turn)} of run {run_nonce}. "


@dataclass(frozen=True, slots=True)
class TurnSizes:
    """What to size: tokens of each piece, as the module docstring defines them."""

    turn_tokens: int
    prefix_tokens: int = 0
    system_prompt_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TurnTexts:
    """The sized texts and, where counted, each piece's counted size (None: estimated)."""

    turn: str
    prefix: str
    system: str | None
    counted: dict[str, int | None]


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def size_turn_texts(sizes: TurnSizes, calibration: Calibration, seed: int, run_nonce: str,
                    count: CountTokens | None = None, tolerance_pct: float = 0.1,
                    max_rounds: int = 5) -> TurnTexts:
    """Fit B, then P, then S, each measured with the ones before it in place; without
    `count`, each is the calibration's estimate of its size in words."""
    per_word = calibration.tokens_per_word
    turn_seed, prefix_seed, system_seed = (seed + _SEED_TURN, seed + _SEED_PREFIX,
                                           seed + _SEED_SYSTEM)
    if count is None:
        def text(tokens: int, text_seed: int) -> str:
            return body_text(max(1, round(tokens / per_word)), text_seed)

        return TurnTexts(
            text(sizes.turn_tokens, turn_seed),
            text(sizes.prefix_tokens, prefix_seed) + " " if sizes.prefix_tokens else "",
            text(sizes.system_prompt_tokens, system_seed) if sizes.system_prompt_tokens
            else None,
            {"turn_tokens": None, "prefix_tokens": None, "system_prompt_tokens": None})
    counted: dict[str, int | None] = {"prefix_tokens": None, "system_prompt_tokens": None}

    def fit(key: str, target: int, grows_by: Callable[[int], int], text_seed: int) -> str:
        found = fit_word_count(grows_by, target, max(1, round(target / per_word)), per_word,
                               tolerance_pct, max_rounds)
        counted[key] = found.counted_tokens
        return body_text(found.words, text_seed)

    head = conversation_head(run_nonce, 0, 1, sizing=True)
    second = conversation_head(run_nonce, 0, 2, sizing=True)
    first = [_user(head), {"role": "assistant", "content": SIZING_ANSWER}]
    base = count(first)
    turn = fit("turn_tokens", sizes.turn_tokens, lambda w: count(
        [*first, _user(second + body_text(w, turn_seed))]) - base, turn_seed)
    prefix = ""
    if sizes.prefix_tokens > 0:
        without = count([_user(head + turn)])
        prefix = fit("prefix_tokens", sizes.prefix_tokens, lambda w: count(
            [_user(head + body_text(w, prefix_seed) + " " + turn)]) - without,
            prefix_seed) + " "
    system = None
    if sizes.system_prompt_tokens > 0:
        alone = count([_user(head + prefix + turn)])
        system = fit("system_prompt_tokens", sizes.system_prompt_tokens, lambda w: count(
            [{"role": "system", "content": body_text(w, system_seed)},
             _user(head + prefix + turn)]) - alone, system_seed)
    return TurnTexts(turn, prefix, system, counted)


class ConversationPrompts:
    """Each conversation's messages from the sized texts: plain string concatenations."""

    def __init__(self, texts: TurnTexts, run_nonce: str) -> None:
        self.texts = texts
        self.run_nonce = run_nonce

    def turns(self, conversation: int) -> int | None:
        """None: the plan draws each conversation's turns."""
        return None

    def opening(self, conversation: int = 0) -> list[dict[str, str]]:
        """The messages every conversation starts with (the shared system prompt)."""
        system = self.texts.system
        return [] if system is None else [{"role": "system", "content": system}]

    def user_message(self, conversation: int, turn: int) -> dict[str, str]:
        """Conversation `conversation`'s new message at `turn` (1-based)."""
        head = conversation_head(self.run_nonce, conversation, turn)
        lead = head + self.texts.prefix if turn == 1 else head
        return _user(lead + self.texts.turn)
