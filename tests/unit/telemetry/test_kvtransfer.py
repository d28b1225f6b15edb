"""kvtransfer: SGLang's disaggregation gauges and failed transfers, vLLM's offloading
counters per direction, and null with a reason where a server sends none of them."""

from __future__ import annotations

import pytest

from anvil_metrics.telemetry.engines import ENGINES
from anvil_metrics.telemetry.kvtransfer import NONE_SENT
from anvil_metrics.telemetry.servermetrics import ClientFigures, server_block
from tests.unit.telemetry.test_servermetrics import sample, vllm

CLIENT = ClientFigures(None, None, 0, 0.0, 0)
IDENTITY = {"engine": None, "version": None, "max_model_len": None, "metrics_url": "u"}


def _sglang(failed: float, latency: float, speed: float, queue: float) -> dict[str, float]:
    lab = '{model_name="m",tp_rank="0"}'
    return {f"sglang:num_running_reqs{lab}": 1.0,
            f"sglang:num_transfer_failed_reqs_total{lab}": failed,
            f"sglang:kv_transfer_latency_ms{lab}": latency,
            f"sglang:kv_transfer_speed_gb_s{lab}": speed,
            f"sglang:num_decode_transfer_queue_reqs{lab}": queue,
            f"sglang:num_decode_transfer_queue_reqs{lab[:-1]},dp=\"1\"}}": queue}


def test_sglang_gauges_are_sampled_and_failures_differenced() -> None:
    window = [sample(0, _sglang(2, 4.0, 10.0, 1), "first"), sample(1, _sglang(2, 8.0, 20.0, 3)),
              sample(2, _sglang(5, 6.0, 30.0, 2), "last")]
    b = server_block(IDENTITY, window, CLIENT)
    kv = b["kv_transfer"]
    assert kv["failed"] == 3 and kv["transfers"] is None and kv["bytes"] is None
    assert kv["latency_ms"] == {"p50": 6.0, "max": 8.0}
    assert kv["speed_gb_s"] == {"p50": 20.0, "max": 30.0}
    assert kv["queues"] == {"decode_transfer": {"p50": 4.0, "max": 6.0}}  # ranks summed
    assert b["null_reasons"]["kv_transfer.transfers"] == "this engine does not report it"


def _offload(stored: float, loaded: float | None, seconds: float) -> dict[str, float]:
    s = vllm(1, 0, 0.1, 0, 0, 0, (0.1, 1), (0.2, 1), (0.0, 1), (10.0, 1), (5.0, 1))
    lab = '{engine="0",model_name="m",transfer_type="%s"}'
    s["vllm:kv_offload_total_bytes_total" + lab % "GPU_to_CPU"] = stored
    s["vllm:kv_offload_total_time_total" + lab % "GPU_to_CPU"] = seconds
    if loaded is not None:
        s["vllm:kv_offload_total_bytes_total" + lab % "CPU_to_GPU"] = loaded
        s["vllm:kv_offload_total_time_total" + lab % "CPU_to_GPU"] = seconds / 2
    return s


def test_vllm_offloading_is_differenced_per_direction() -> None:
    window = [sample(0, _offload(1000, None, 0.5), "first"),
              sample(1, _offload(5000, 300, 1.5), "last")]
    kv = server_block(IDENTITY, window, CLIENT)["kv_transfer"]
    assert kv["offload"] == {"GPU_to_CPU": {"bytes": 4000, "ms": pytest.approx(1000.0)},
                             "CPU_to_GPU": {"bytes": 300, "ms": pytest.approx(750.0)}}
    assert kv["transfers"] is None  # no NIXL series: not a P/D pair
    restarted = [sample(0, _offload(5000, 300, 1.5), "first"),
                 sample(1, _offload(10, 0, 0.1), "last")]
    assert server_block(IDENTITY, restarted, CLIENT)["kv_transfer"]["offload"] is None


def test_a_server_without_a_kv_connector_has_none_and_says_why() -> None:
    plain = vllm(1, 0, 0.1, 0, 0, 0, (0.1, 1), (0.2, 1), (0.0, 1), (10.0, 1), (5.0, 1))
    b = server_block(IDENTITY, [sample(0, plain, "first"), sample(1, plain, "last")], CLIENT)
    assert b["kv_transfer"] is None and b["null_reasons"]["kv_transfer"] == NONE_SENT
    assert "kv_offload_bytes" in ENGINES["vllm"] and "kv_xfer_time" not in ENGINES["sglang"]
