"""The engines' metric names and the reading rules (`telemetry/engines.py`): which engine a
sample speaks, a quantity summed (or averaged) over label sets, and a counter differenced."""

from __future__ import annotations

from anvil_metrics.telemetry import engines
from anvil_metrics.telemetry.engines import delta_of, value_of

VLLM = engines.ENGINES["vllm"]


def test_the_engine_is_told_by_the_names_a_sample_holds() -> None:
    assert engines.engine_of([{"series": {"process_cpu_seconds_total": 1.0}},
                      {"series": {'sglang:num_queue_reqs{a="1"}': 0.0}}]) == "sglang"
    assert engines.engine_of([{"ok": False}, {"series": {"llamacpp:requests_deferred": 2.0}}]) == (
        "llamacpp")
    assert engines.engine_of([{"series": {"tgi:queue_size": 1.0, "vllm": 2.0}}]) is None
    assert engines.engine_of([]) is None


def test_a_value_is_summed_over_its_label_sets_the_first_name_found_winning() -> None:
    series = {'vllm:gpu_cache_usage_perc{engine="0"}': 0.9,
              'vllm:kv_cache_usage_perc{engine="0"}': 0.2,
              'vllm:kv_cache_usage_perc{engine="1"}': 0.6,
              'vllm:num_requests_running{engine="0"}': 3.0,
              'vllm:num_requests_running{engine="1"}': 4.0,
              'vllm:e2e_request_latency_seconds_sum{engine="0"}': 1.5}
    assert value_of(series, VLLM["running"]) == 7.0
    # the newer name first: the old one is not read while the new one is there
    assert value_of(series, VLLM["kv_cache"], mean=True) == 0.4
    assert value_of(series, VLLM["kv_cache"]) == 0.8
    assert value_of(series, VLLM["e2e"], "_sum") == 1.5
    assert value_of(series, VLLM["e2e"], "_count") is None
    assert value_of({'vllm:gpu_cache_usage_perc{engine="0"}': 0.9}, VLLM["kv_cache"]) == 0.9
    assert {"kv_cache", "hit_rate_gauge"} <= engines.RATIOS and "running" not in engines.RATIOS


def test_a_counter_is_differenced_and_a_decrease_is_a_restart() -> None:
    a = {"vllm:spec_decode_num_drafts_total": 10.0}
    b = {"vllm:spec_decode_num_drafts_total": 25.0}
    assert delta_of(VLLM, "drafts", a, b) == (15.0, None)
    value, why = delta_of(VLLM, "drafts", b, a)
    assert value is None and why is not None
    assert "went down over the window (25 → 10)" in why and "restarted" in why
    assert delta_of(engines.ENGINES["llamacpp"], "drafts", a, b) == (
        None, "this engine does not report it")
    assert delta_of(VLLM, "draft_tokens", a, b) == (
        None, "the server reported none of vllm:spec_decode_num_draft_tokens_total in the "
              "window")
    assert engines.unreported(VLLM, "kv_cache") == (
        "the server reported none of vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc in "
        "the window")
