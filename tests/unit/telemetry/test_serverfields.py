"""serverfields: the `server` block's definition is what `server_block` writes, from
counters and from gauges alike."""

from __future__ import annotations

from anvil_metrics.fieldtypes import problems
from anvil_metrics.telemetry.serverfields import Server
from anvil_metrics.telemetry.servermetrics import SERVER_KEYS, ClientFigures, server_block


def _samples(series: dict[str, float]) -> list[dict]:
    return [{"type": "sample", "seq": i, "t_ns": i, "done_ns": i, "ok": True, "mark": m,
             "series": series} for i, m in enumerate(("first", "last"))]


def test_what_server_block_writes_is_what_the_definition_says() -> None:
    client = ClientFigures(None, None, 0, 0.0, 0)
    gauged = server_block({"engine": "sglang"}, _samples(
        {"sglang:spec_accept_rate": 0.7, "sglang:spec_accept_length": 3.0}), client)
    counted = server_block({"engine": "vllm"}, _samples({
        "vllm:spec_decode_num_drafts_total": 10.0, "vllm:spec_decode_num_draft_tokens_total":
        30.0, "vllm:spec_decode_num_accepted_tokens_total": 20.0}), client)
    empty = server_block({"engine": None}, None, client, None, "no metrics URL")
    for block in (gauged, counted, empty):
        assert tuple(block) == SERVER_KEYS
        assert problems(block, Server, "server") == []
    assert problems({**empty, "samples": -1}, Server, "server") == [
        "server.samples: expected a non-negative integer below 2**53, file has -1"]
