"""The simulator's identity endpoints (`sim/identity.py`): vLLM's /version, SGLang's server and
model info, built from the config and the draft account."""

from __future__ import annotations

from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.identity import SIM_VERSION, identity_routes
from anvil_metrics.sim.specdecode import SpecCounts, spec_counts

# -- identity ----------------------------------------------------------------------------------


def test_identity_endpoints_per_engine() -> None:
    vllm = identity_routes(SimConfig(), SpecCounts)
    assert set(vllm) == {"/version"} and vllm["/version"]() == {"version": SIM_VERSION}
    cfg = SimConfig(metrics_format="sglang", spec_k=3, max_context=4096, max_running=8)
    drafts = spec_counts(15, 3, 0.7)
    sg = identity_routes(cfg, lambda: drafts)
    assert set(sg) == {"/get_server_info", "/server_info", "/get_model_info", "/model_info"}
    info = sg["/get_server_info"]()
    assert info["version"] == SIM_VERSION and info["context_length"] == 4096
    assert info["max_total_num_tokens"] == cfg.kv_capacity and info["max_running_requests"] == 8
    assert info["internal_states"][0]["avg_spec_accept_length"] == 1 + 9 / 5
    assert sg["/get_model_info"]()["is_generation"] is True
