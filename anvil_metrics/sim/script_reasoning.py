"""The scripted simulator's answers to the `reasoning_leakage` suite (`anvil sim --script`),
and the registration of the `responses_subset` faults.

Why: the suite must be seen to pass against a server that honours
`chat_template_kwargs.enable_thinking=false` and to fail on each way a server leaks. The
questions and answers live with the suite (`checks/reasoning.py`); this module recognises a
question by the exact text of the last user message. Like a real reasoning model, it
reasons (a `reasoning` delta) unless the request disables thinking, so a check that forgot
to disable it would fail. Per `--script-fault reasoning_leakage:KIND`:

    reasoning_delta  reasoning deltas although thinking is disabled
    think_tag        `<think>…</think>` before the answer in the content
    wrong_answer     no leak, but a wrong answer

`responses_subset` is answered by the `/v1/responses` route (`sim/responses.py`), which is not
a chat script; its fault names are registered here because `sim/script.py` learns every
accepted `--script-fault` from the script modules' `FAULTS`.
"""

from __future__ import annotations

from typing import Any

from anvil_metrics.checks.reasoning import CASE_BY_PROMPT
from anvil_metrics.sim import responses
from anvil_metrics.sim.script import ScriptedReply, last_user_text

FAULTS: dict[str, tuple[str, ...]] = {
    "reasoning_leakage": ("reasoning_delta", "think_tag", "wrong_answer"),
    responses.FAULT_SUITE: responses.FAULT_KINDS,
}
THOUGHT = "The user asks a short question; I know the answer, so I reply with it alone."


def thinking_disabled(data: dict[str, Any]) -> bool:
    kwargs = data.get("chat_template_kwargs")
    return isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False


def answer(data: dict[str, Any], faults: frozenset[str]) -> ScriptedReply | None:
    case = CASE_BY_PROMPT.get(last_user_text(data))
    if case is None:
        return None
    content = case.answer
    if "reasoning_leakage:wrong_answer" in faults:
        content = "I am not sure."
    reasoning = "" if thinking_disabled(data) else THOUGHT
    if "reasoning_leakage:reasoning_delta" in faults:
        reasoning = THOUGHT
    if "reasoning_leakage:think_tag" in faults:
        content = f"<think>{THOUGHT}</think>\n\n{content}"
    return ScriptedReply(content=content, reasoning=reasoning)
