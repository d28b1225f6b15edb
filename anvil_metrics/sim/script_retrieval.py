"""The scripted simulator's answers to `retrieval` and `near_limit` (see `sim/script.py`).

It reads the prompt as a model with perfect recall would: the key asked in the question,
that key's needle sentence in the text, and answers the value — or, under a fault, a
distractor's value, no value, or a `usage.prompt_tokens` 2 % off the truth (the check must
notice that the prompt it sent was not the size it planned). Sizing probes (`max_tokens`
1, no question answered) are left to the ordinary path, which counts them truly.
"""

from __future__ import annotations

from typing import Any

from anvil_metrics.checks.haystack import HEAD_RE, NEEDLE_RE, QUESTION_RE
from anvil_metrics.sim.script import ScriptedReply, last_user_text
from anvil_metrics.sim.tokenizer import TokenizeError, count_chat_tokens

FAULTS: dict[str, tuple[str, ...]] = {
    "retrieval": ("wrong_value", "no_answer", "prompt_size"),
    "near_limit": ("wrong_value",),
}
PROMPT_SIZE_FACTOR = 1.02  # retrieval:prompt_size reports this times the true count


def answer(data: dict[str, Any], faults: frozenset[str]) -> ScriptedReply | None:
    if data.get("max_tokens") == 1 or data.get("max_completion_tokens") == 1:
        return None  # a sizing probe
    text = last_user_text(data)
    head = HEAD_RE.match(text)
    if head is None or head.group(1) not in FAULTS:
        return None
    suite = head.group(1)
    asked = QUESTION_RE.search(text, max(0, len(text) - 400))
    if asked is None:
        return None
    values = dict(NEEDLE_RE.findall(text))
    key = asked.group(1)
    value = values.get(key)
    if value is None:
        return ScriptedReply(content="The document does not say.")
    if f"{suite}:no_answer" in faults:
        return ScriptedReply(content="I could not find that in the document.")
    if f"{suite}:wrong_value" in faults:
        value = next((v for k, v in values.items() if k != key), "0")
    prompt_tokens = None
    if f"{suite}:prompt_size" in faults:
        try:  # the simulator's default rule; a 2 % miss under another rule is still a miss
            prompt_tokens = round(count_chat_tokens(data["messages"]) * PROMPT_SIZE_FACTOR)
        except (TokenizeError, KeyError, TypeError):
            prompt_tokens = None
    return ScriptedReply(content=f"The special magic value for {key} is {value}.",
                         prompt_tokens=prompt_tokens)

