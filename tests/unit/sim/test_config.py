"""The simulator's settings (`sim/config.py`): the derived durations and the KV capacity, worked
by hand from the fields they come from."""

from __future__ import annotations

import dataclasses

import pytest

from anvil_metrics.sim.config import KV_CAPACITY_CONTEXTS, SimConfig


def test_prefill_grows_with_the_prompt_in_integer_ns() -> None:
    cfg = SimConfig(prefill_ms=1.5, prefill_ms_per_token=0.25)
    assert cfg.prefill_ns(0) == 1_500_000
    assert cfg.prefill_ns(10) == 4_000_000  # (1.5 + 10 * 0.25) ms
    assert SimConfig(prefill_ms=0.0).prefill_ns(1000) == 0


def test_interval_in_integer_ns() -> None:
    assert SimConfig().interval_ns == 8_000_000
    assert SimConfig(interval_ms=0.0125).interval_ns == 12_500
    assert isinstance(SimConfig(interval_ms=1 / 3).interval_ns, int)


def test_kv_capacity_is_the_flag_else_sixteen_contexts() -> None:
    assert KV_CAPACITY_CONTEXTS == 16
    assert SimConfig(max_context=1000).kv_capacity == 16_000
    assert SimConfig(max_context=1000, kv_capacity_tokens=123).kv_capacity == 123
    assert SimConfig(kv_capacity_tokens=0).kv_capacity == 0  # 0 is a size, not "unset"


def test_the_config_is_frozen() -> None:
    cfg = SimConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.port = 1  # type: ignore[misc]
    assert dataclasses.replace(cfg, port=1).port == 1 and cfg.port == 0
