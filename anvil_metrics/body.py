"""Request bodies: the scenario's switches turned into chat-completion JSON, cheaply.

A body differs between requests of one planned size only by the short unique prefix of
the user message. So each size's body is serialised once, split around a marker where the
prefix goes, and each request's bytes are `head + escaped(prefix) + tail`: a concatenation
instead of re-serialising up to 1.5 MB of prompt per request on the gevent hub.
"""

from __future__ import annotations

from typing import Any

import orjson

from anvil_metrics.prompts import PromptFactory, request_prefix
from anvil_metrics.scenario import Scenario

_MARK = "\u2063anvil-prefix\u2063"  # invisible separator; never produced by the text generator


def body_fields(sc: Scenario, model: str) -> dict[str, Any]:
    """Everything but `messages`, per the scenario (see SERVERS.md for the switches)."""
    body: dict[str, Any] = {"model": model, "max_tokens": sc.max_tokens, "stream": True}
    if sc.include_usage:
        body["stream_options"] = {"include_usage": True}
    if sc.reasoning_effort:
        body["reasoning_effort"] = sc.reasoning_effort
    if sc.thinking_mode in ("on", "off"):
        body["chat_template_kwargs"] = {"enable_thinking": sc.thinking_mode == "on"}
    if sc.fixed_output_tokens:
        body["ignore_eos"] = True
        body["min_tokens"] = sc.max_tokens
    for k, v in sc.extra_body.items():
        if isinstance(v, dict) and isinstance(body.get(k), dict):
            body[k] = {**body[k], **v}
        else:
            body[k] = v
    return body


class BodyBuilder:
    """Serialised request bodies for (planned size, request index)."""

    def __init__(self, sc: Scenario, model: str, prompts: PromptFactory) -> None:
        self._fields = body_fields(sc, model)
        self._prompts = prompts
        self._split: dict[int, tuple[bytes, bytes]] = {}

    def prepare(self, sizes: list[int]) -> None:
        self._prompts.prepare(sizes)
        for size in set(sizes):
            self._template(size)

    def _template(self, size: int) -> tuple[bytes, bytes]:
        t = self._split.get(size)
        if t is None:
            msgs = self._prompts.messages(size, 0)
            user = msgs[-1]
            prefix = request_prefix(self._prompts.run_nonce, 0)
            user["content"] = _MARK + user["content"][len(prefix):]
            raw = orjson.dumps({**self._fields, "messages": msgs})
            mark = orjson.dumps(_MARK)[1:-1]
            head, tail = raw.split(mark, 1)
            t = self._split[size] = (head, tail)
        return t

    def build(self, size: int, request_index: int, warmup: bool = False) -> bytes:
        head, tail = self._template(size)
        prefix = orjson.dumps(request_prefix(self._prompts.run_nonce, request_index, warmup))
        return head + prefix[1:-1] + tail
