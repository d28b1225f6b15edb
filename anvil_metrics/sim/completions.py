"""`POST /v1/completions`: a text prompt in, `text_completion` chunks (or one whole) out.

Why: vLLM's own benchmark loads `/v1/completions` by default, and anvil can load it too
(`--endpoint completions`); the simulator answers it on the same clock as a chat stream
(prefill, then one token per interval), so a completions run is judged against the same
truth. What differs from chat, as in vLLM: the prompt is raw text, counted without a chat
template (as `/tokenize {"prompt"}` counts it here), or a list of token ids, counted as
sent; no role chunk; each chunk is
`{"object": "text_completion", "choices": [{"index": 0, "text": …, "logprobs": null,
"finish_reason": …}]}`; no reasoning channel. A body without `"stream": true` gets the
whole `text_completion` when its last token is due (anvil's sizing probes). Not through
`--prefix-cache` (its blocks are a chat prompt's) nor, whole, `--max-running`.
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

import orjson

from anvil_metrics.sim.chat import (
    CONTENT_PIECES,
    ChatStream,
    DelayedCompletion,
    answer_chat,
    full_text,
    t0_header,
)
from anvil_metrics.sim.chatrequest import (
    ChatRequest,
    RequestError,
    _opt_bool,
    _opt_int,
    _opt_object,
    check_context,
    check_model,
    load_json_object,
    plan_output,
    usage_of,
)
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import HttpConnection
from anvil_metrics.sim.scheduler import Scheduler
from anvil_metrics.sim.tokenizer import TokenizeError, count_text_tokens


def parse_completion_request(data: dict[str, Any], cfg: SimConfig) -> ChatRequest:
    """Validate a streamed completions body and count its prompt; raises `RequestError`."""
    check_model(data, cfg)
    prompt = data.get("prompt")
    if isinstance(prompt, list) and prompt and all(type(t) is int and t >= 0 for t in prompt):
        prompt_tokens = len(prompt)  # token ids: counted as sent, no special tokens added
    elif not isinstance(prompt, str) or not prompt:
        raise RequestError(400, "prompt must be a non-empty string or list of token ids",
                           param="prompt")
    else:
        try:
            prompt_tokens = count_text_tokens(prompt, cfg.tokenizer)
        except TokenizeError as exc:
            raise RequestError(400, str(exc), param="prompt") from exc
    max_tokens = _opt_int(data, "max_tokens", 1)
    min_tokens = _opt_int(data, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise RequestError(400, "min_tokens must be <= max_tokens", param="min_tokens")
    request = ChatRequest(
        prompt_tokens=prompt_tokens, max_tokens=max_tokens,
        stream=_opt_bool(data, "stream", False),
        include_usage=_opt_bool(_opt_object(data, "stream_options"), "include_usage", False),
        ignore_eos=_opt_bool(data, "ignore_eos", False), min_tokens=min_tokens,
        thinking=False)  # no reasoning channel
    check_context(request, cfg)
    return request


def _choice(text: str, finish: bytes = b"null") -> bytes:
    return b'"choices":[{"index":0,"text":%s,"logprobs":null,"finish_reason":%s}]' % (
        orjson.dumps(text), finish)


@functools.cache
def text_bodies() -> tuple[bytes, ...]:
    """Pre-encoded ``"choices":[…]}`` tails for every content piece."""
    return tuple(_choice(text) + b"}" for text in CONTENT_PIECES)


class CompletionStream(ChatStream):
    """A `ChatStream` whose chunks are `text_completion`s: no role chunk, `text` pieces."""

    __slots__ = ()
    OBJECT = b"text_completion"
    ID_PREFIX = "cmpl"
    ROLE = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bodies_c = text_bodies()

    def _finish_tail(self, i: int) -> bytes:
        text = CONTENT_PIECES[i % len(CONTENT_PIECES)] if self._plan.total else ""
        tail = _choice(text, orjson.dumps(self._plan.finish_reason))
        if self._usage_in_finish:
            tail += b',"usage":' + orjson.dumps(self._usage)
        return tail + b"}"


def answer_completions(conn: HttpConnection, sched: Scheduler, cfg: SimConfig, body: bytes,
                       t0_ns: int, admit: Any = None) -> None:
    """Handle ``POST /v1/completions`` as `answer_chat` does a chat request; a body without
    `"stream": true` gets the whole `text_completion` when its last token is due."""
    try:
        data = load_json_object(body)
        request = parse_completion_request(data, cfg)
    except RequestError as exc:
        conn.respond_json(exc.status, exc.body)
        return
    if request.stream:
        answer_chat(conn, sched, cfg, body, t0_ns, None, CompletionStream, admit=admit,
                    parse=parse_completion_request)
        return
    plan = plan_output(request, cfg)
    end = (t0_ns + cfg.prefill_ns(request.computed_tokens, t0_ns)
           + max(plan.total - 1, 0) * cfg.interval_ns)
    whole = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
             "created": int(time.time()), "model": cfg.model,
             "choices": [{"index": 0, "text": full_text("c", plan.total), "logprobs": None,
                          "finish_reason": plan.finish_reason}],
             "usage": usage_of(request, plan)}
    sched.at(end, DelayedCompletion(conn, whole, t0_header(cfg, t0_ns)))
