"""`POST /v1/embeddings`: inputs in, one vector each, answered whole after their prefill.

Why: `anvil run --endpoint embeddings` loads this endpoint (latency and input tokens per
second; no stream), and its stamps must be judged against truth. An embedding is a prefill
and nothing else, so the answer is sent when the prefill of every input's tokens would end
(`SimConfig.prefill_ns` of their sum, from the arrival), with vLLM's shape: `object: list`,
`data[]` of `{object: embedding, index, embedding}` (floats, or base64 of little-endian
float32 with ``"encoding_format": "base64"``), and `usage` with `prompt_tokens` and
`total_tokens` (equal: nothing is generated). `input` is a string, a list of strings, a list
of token ids or a list of such lists, as OpenAI's API takes it; a text is counted raw, as
`/tokenize {"prompt"}` counts it here. With ``--stamp-send`` the response carries
``anvil-t0-ns`` and, in its body, ``"anvil_sent_ns"``: the moment just before it was written.
The vectors are fixed functions of the input's position (`DIMENSIONS` wide): a load test
measures time, not meaning. Counted in the server's own figures (`/metrics`: requests
finished, end to end, prompt tokens) as vLLM counts a pooling request; not through
`--max-running`.
"""

from __future__ import annotations

import base64
import struct
import time
from typing import Any

from anvil_metrics.sim.chat import DelayedCompletion, t0_header
from anvil_metrics.sim.chatrequest import RequestError, check_model, load_json_object
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import Headers, HttpConnection
from anvil_metrics.sim.ledger import LEDGER
from anvil_metrics.sim.scheduler import Scheduler
from anvil_metrics.sim.tokenizer import TokenizeError, count_text_tokens

DIMENSIONS = 16


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        type(t) is int and t >= 0 for t in value)


def input_tokens(value: Any, rule: str) -> list[int]:
    """Each input's token count; raises `RequestError` for an `input` of no allowed shape."""
    if isinstance(value, str):
        value = [value]
    elif _is_ids(value):
        return [len(value)]
    if not isinstance(value, list) or not value:
        raise RequestError(400, "input must be a string, a list of strings, a list of token "
                           "ids or a list of such lists", param="input")
    counts = []
    for item in value:
        if _is_ids(item):
            counts.append(len(item))
        elif isinstance(item, str) and item:
            try:
                counts.append(count_text_tokens(item, rule))
            except TokenizeError as exc:
                raise RequestError(400, str(exc), param="input") from exc
        else:
            raise RequestError(400, "each input must be a non-empty string or list of token "
                               "ids", param="input")
    return counts


def vector(index: int, encoding: str) -> list[float] | str:
    values = [((index * 31 + k * 7) % 97) / 97 for k in range(DIMENSIONS)]
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{DIMENSIONS}f", *values)).decode()
    return values


class EmbeddingAnswer(DelayedCompletion):
    """The whole answer, written (and stamped) when its prefill is due to end, and counted
    in the server's own figures."""

    __slots__ = ("_stamp", "_t0_ns")

    def __init__(self, conn: HttpConnection, body: dict[str, Any], headers: Headers,
                 stamp: bool, t0_ns: int) -> None:
        super().__init__(conn, body, headers)
        self._stamp, self._t0_ns = stamp, t0_ns

    def fire(self) -> None:
        if self._conn.closed:
            return
        if self._stamp:
            self._body = {**self._body, "anvil_sent_ns": time.perf_counter_ns()}
        super().fire()
        # the server's own counts, as vLLM's pooling requests are in its /metrics
        LEDGER.answered(self._t0_ns, self._body["usage"]["prompt_tokens"], 0, "stop")


def answer_embeddings(conn: HttpConnection, sched: Scheduler, cfg: SimConfig, body: bytes,
                      t0_ns: int) -> None:
    """Handle ``POST /v1/embeddings``: refuse, or answer when the prefill would end."""
    try:
        data = load_json_object(body)
        check_model(data, cfg)
        counts = input_tokens(data.get("input"), cfg.tokenizer)
        encoding = data.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise RequestError(400, f"encoding_format {encoding!r} is not one of 'float', "
                               "'base64'", param="encoding_format")
        if max(counts) > cfg.max_context:
            raise RequestError(400, f"This model's maximum context length is "
                               f"{cfg.max_context} tokens. However, you requested "
                               f"{max(counts)} tokens in the input for embedding generation. "
                               "Please reduce the length of the input.", param="input")
    except RequestError as exc:
        conn.respond_json(exc.status, exc.body)
        return
    total = sum(counts)
    answer = {"id": f"embd-{t0_ns:x}", "object": "list", "created": int(time.time()),
              "model": cfg.model,
              "data": [{"object": "embedding", "index": i, "embedding": vector(i, encoding)}
                       for i in range(len(counts))],
              "usage": {"prompt_tokens": total, "total_tokens": total}}
    sched.at(t0_ns + cfg.prefill_ns(total, t0_ns),
             EmbeddingAnswer(conn, answer, t0_header(cfg, t0_ns), cfg.stamp_send, t0_ns))
