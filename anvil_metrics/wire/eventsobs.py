"""The observers of the endpoints that are not chat chunks: Responses API events, Anthropic
Messages API events and one whole embeddings answer.

Why apart from `observe.py`: the stamps and counts mean what they mean there (first output,
first content, chunk deltas, usage, failure), but the wire differs. What a Responses event
means, as vLLM and OpenAI stream them (``data: {"type": …}``):

- `response.created`: the response's id (a conversation's next turn may name it);
- `response.output_item.added`: the first one is the first chunk (`first_chunk_ns`: as a
  chat stream's role chunk, the server's output begins, nothing visible yet);
- `response.reasoning_text.delta` / `response.reasoning_summary_text.delta`: a reasoning
  output; `response.output_text.delta`: a content output (empty deltas do not count);
- `response.completed` / `response.incomplete`: the end, with `usage` (`input_tokens`,
  `output_tokens`, as `post.rawcolumns.usage_counts` reads them) and the finish: status
  `completed` is `stop`, `incomplete` is `length` (vLLM's max_output_tokens cut);
- `response.failed`, `error`: a `stream_error`; any other type is skipped.

What an Anthropic Messages API event means (``event: TYPE`` / ``data: {"type": TYPE, …}``,
as Anthropic and vLLM's `/v1/messages` stream them):

- `message_start`: `message.usage` (`input_tokens`; Anthropic's also the cache's
  `cache_read_input_tokens` and `cache_creation_input_tokens`);
- `content_block_start`: the first one is the first chunk (an output block opened, as a
  Responses output item; vLLM opens one with its first non-empty delta);
- `content_block_delta`: a `thinking_delta` is a reasoning output, a `text_delta` a content
  output (empty ones do not count); a `signature_delta` (or a tool's `input_json_delta`)
  is neither;
- `message_delta`: `delta.stop_reason` (`end_turn`, `stop_sequence`: stop; `max_tokens`:
  length; `tool_use`: tool_calls) and `usage` (cumulative `output_tokens`; its counts win
  over `message_start`'s, merged into one usage object);
- `message_stop`: the end; `error`: a `stream_error` with its message; `ping` and the rest
  are skipped. How the usage becomes the row's counts: `observe.chat_usage`.

An embeddings answer is one JSON object: its end is the arrival of its last byte, its
`usage.prompt_tokens` the input's count, and it has no output (no first-output stamp, no
chunks). No `data[]` is a `malformed_chunk`; an `error` object a `stream_error`.
"""

from __future__ import annotations

import orjson

from anvil_metrics.wire.observe import StreamObserver, checked_usage, error_message

_REASONING = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_ENDS = ("response.completed", "response.incomplete")
_FINISH = {"completed": "stop", "incomplete": "length"}


class ResponsesObserver(StreamObserver):
    """A `StreamObserver` fed Responses API events (the module doc says what each means)."""

    __slots__ = ()

    def _on_chunk(self, event: dict, t_ns: int) -> bool:
        kind = event.get("type")
        if kind in ("error", "response.failed"):
            err = event.get("error") or (event.get("response") or {}).get("error") or event
            return self.fail("stream_error", "server error in stream: " + error_message(err),
                             t_ns, phase=self.phase)
        output = content = False
        if kind == "response.output_text.delta" or kind in _REASONING:
            delta = event["delta"]
            if not isinstance(delta, str):
                raise TypeError("a delta's text is not a string")
            if self.first_chunk_ns is None:
                self.first_chunk_ns = t_ns
            if delta:
                output, content = True, kind == "response.output_text.delta"
                if self._output(not content, content, t_ns):
                    return True
                if content and self.text is not None:
                    self.text.append(delta)
        elif kind == "response.output_item.added" and self.first_chunk_ns is None:
            self.first_chunk_ns = t_ns
        elif kind == "response.created":
            self.response_id = event["response"]["id"]
        if self.truth is not None:
            self.truth.chunk(event, output, content)
        if kind in _ENDS:
            return self._end(event["response"], t_ns)
        return False

    def _end(self, response: dict, t_ns: int) -> bool:
        usage = response.get("usage")
        self.usage = None if usage is None else checked_usage(usage)
        status = response.get("status")
        if status not in _FINISH:
            return self.fail("stream_error", f"the response ended with status {status!r}",
                             t_ns, phase=self.phase)
        self.finish_reason = _FINISH[status]
        self.end_ns = t_ns
        self.done = True
        return True


_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                 "tool_use": "tool_calls"}
_DELTA_TEXT = {"thinking_delta": "thinking", "text_delta": "text"}


class MessagesObserver(StreamObserver):
    """A `StreamObserver` fed Anthropic Messages API events (the module doc says what each
    means)."""

    __slots__ = ()

    def _on_chunk(self, event: dict, t_ns: int) -> bool:
        kind = event.get("type")
        if kind == "error":
            return self.fail("stream_error", "server error in stream: "
                             + error_message(event.get("error") or event), t_ns,
                             phase=self.phase)
        output = content = False
        if kind == "content_block_delta":
            delta = event["delta"]
            field = _DELTA_TEXT.get(delta.get("type"))
            text = delta[field] if field is not None else ""
            if not isinstance(text, str):
                raise TypeError("a delta's text is not a string")
            if self.first_chunk_ns is None:
                self.first_chunk_ns = t_ns
            if text:
                output, content = True, field == "text"
                if self._output(not content, content, t_ns):
                    return True
                if content and self.text is not None:
                    self.text.append(text)
        elif kind == "content_block_start" and self.first_chunk_ns is None:
            self.first_chunk_ns = t_ns
        elif kind == "message_start":
            self._usage(event["message"].get("usage"))
        elif kind == "message_delta":
            self._usage(event.get("usage"))
            stop = event["delta"].get("stop_reason")
            if stop is not None:
                if not isinstance(stop, str):
                    raise TypeError("stop_reason is not a string")
                self.finish_reason = _STOP_REASONS.get(stop, stop)
        if self.truth is not None:
            self.truth.chunk(event, output, content)
        if kind == "message_stop":
            self.end_ns = t_ns
            self.done = True
            return True
        return False

    def _usage(self, usage: object) -> None:
        """One event's usage merged into what came before (its counts win)."""
        if usage is not None:
            self.usage = checked_usage({**(self.usage or {}), **checked_usage(usage)})


# the observer of each endpoint whose stream is not chat chunks (the others: StreamObserver)
OBSERVERS: dict[str, type[StreamObserver]] = {"responses": ResponsesObserver,
                                              "messages": MessagesObserver}


def on_whole(obs: StreamObserver, raw: bytes, t_ns: int) -> None:
    """An embeddings answer (`raw`, its last byte arrived at `t_ns`) into `obs`."""
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        obs.fail("malformed_chunk", f"answer is not valid JSON ({e}): {raw[:200]!r}", t_ns,
                 phase="prefill")
        return
    if not isinstance(answer, dict):
        obs.fail("malformed_chunk", f"answer is not a JSON object: {raw[:200]!r}", t_ns,
                 phase="prefill")
        return
    err = answer.get("error")
    if err is not None:
        obs.fail("stream_error", "server error: " + error_message(err), t_ns, phase="prefill")
        return
    data, usage = answer.get("data"), answer.get("usage")
    if not isinstance(data, list) or not data or not (usage is None or isinstance(usage, dict)):
        obs.fail("malformed_chunk", f"answer has no data[] (or a usage that is not an "
                 f"object): {raw[:200]!r}", t_ns, phase="prefill")
        return
    obs.on_answer(answer, usage, t_ns)
