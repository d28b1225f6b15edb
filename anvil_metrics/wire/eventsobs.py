"""The observers of the endpoints that are not chat chunks: Responses API events and one
whole embeddings answer.

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

An embeddings answer is one JSON object: its end is the arrival of its last byte, its
`usage.prompt_tokens` the input's count, and it has no output (no first-output stamp, no
chunks). No `data[]` is a `malformed_chunk`; an `error` object a `stream_error`.
"""

from __future__ import annotations

import orjson

from anvil_metrics.wire.observe import StreamObserver, checked_usage

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
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            return self.fail("stream_error", f"server error in stream: {msg}", t_ns,
                             phase=self.phase)
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
        msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
        obs.fail("stream_error", f"server error: {msg}", t_ns, phase="prefill")
        return
    data, usage = answer.get("data"), answer.get("usage")
    if not isinstance(data, list) or not data or not (usage is None or isinstance(usage, dict)):
        obs.fail("malformed_chunk", f"answer has no data[] (or a usage that is not an "
                 f"object): {raw[:200]!r}", t_ns, phase="prefill")
        return
    obs.on_answer(answer, usage, t_ns)
