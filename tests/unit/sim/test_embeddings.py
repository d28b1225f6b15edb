"""`sim/embeddings.py`: every `input` shape OpenAI's API takes, counted; the answer written
whole at its prefill's deadline on a fake clock (stamped with --stamp-send); vLLM's shape;
and each refusal naming its field."""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson
import pytest
from simwire import Wire

from anvil_metrics.sim.chatrequest import RequestError
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.embeddings import DIMENSIONS, input_tokens
from anvil_metrics.sim.ledger import LEDGER
from anvil_metrics.sim.tokenizer import count_text_tokens

CFG = SimConfig(prefill_ms=50.0, prefill_ms_per_token=0.5, stamp_send=True)


@pytest.mark.parametrize(("value", "counts"), [
    ("one two three", [count_text_tokens("one two three")]),
    (["a b", "c"], [count_text_tokens("a b"), count_text_tokens("c")]),
    ([5, 6, 7], [3]),
    ([[5, 6], [7]], [2, 1]),
])
def test_each_input_shape_is_counted(value: Any, counts: list[int]) -> None:
    assert input_tokens(value, "words4") == counts


@pytest.mark.parametrize("value", [None, "", [], [""], [[]], [1.5], 3, [{"text": "x"}]])
def test_a_bad_input_is_refused(value: Any) -> None:
    with pytest.raises(RequestError) as e:
        input_tokens(value, "words4")
    assert e.value.status == 400 and e.value.body["error"]["param"] == "input"


def test_the_answer_comes_whole_when_its_prefill_ends() -> None:
    wire = Wire(cfg=CFG)
    finished, prompted = LEDGER.finished.get("stop", 0), LEDGER.prompt_tokens
    resp = wire.ask("/v1/embeddings", {"model": CFG.model, "input": ["a b c", [1, 2, 3, 4]]})
    body = orjson.loads(resp.body)
    tokens = count_text_tokens("a b c") + 4
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert [(d["object"], d["index"], len(d["embedding"])) for d in body["data"]] == [
        ("embedding", 0, DIMENSIONS), ("embedding", 1, DIMENSIONS)]
    t0 = int(resp.headers["anvil-t0-ns"])
    due = t0 + CFG.prefill_ns(tokens)
    assert resp.headers_arrival_ns == due  # written at its deadline exactly (fake clock)
    assert body["anvil_sent_ns"] > 0  # perf_counter_ns just before the write
    # in the server's own counts (/metrics), as vLLM counts a pooling request
    assert (LEDGER.finished["stop"] - finished, LEDGER.prompt_tokens - prompted) == (1, tokens)


def test_base64_is_little_endian_float32() -> None:
    resp = Wire(cfg=CFG).ask("/v1/embeddings", {"input": "x", "encoding_format": "base64"})
    plain = Wire(cfg=CFG).ask("/v1/embeddings", {"input": "x"})
    packed = base64.b64decode(orjson.loads(resp.body)["data"][0]["embedding"])
    values = struct.unpack(f"<{DIMENSIONS}f", packed)
    assert values == pytest.approx(orjson.loads(plain.body)["data"][0]["embedding"], rel=1e-6)


@pytest.mark.parametrize(("payload", "status", "param"), [
    ({"input": "x", "model": "other"}, 404, "model"),
    ({"input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
    ({"input": [1] * 40_000}, 400, "input"),
    ({}, 400, "input"),
])
def test_the_route_refuses(payload: dict[str, Any], status: int, param: str) -> None:
    resp = Wire(cfg=CFG).ask("/v1/embeddings", payload)
    assert resp.status == status and orjson.loads(resp.body)["error"]["param"] == param
