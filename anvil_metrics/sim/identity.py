"""Who the simulated server says it is: vLLM's or SGLang's identity endpoints.

Why: anvil records the engine, its version and the context limit beside every run, discovered
from the server itself (`anvil_metrics.prep.provenance`). Each engine answers that in its own
place, so the simulator answers where the engine chosen by ``--metrics-format`` does, and
nowhere else (the other engine's paths get the 404 any unknown path gets):

- vllm: ``GET /version`` -> ``{"version": …}``. The context limit is ``/v1/models``'
  ``max_model_len``, which the simulator always reports.
- sglang: ``GET /get_server_info`` (and its newer name ``/server_info``): SGLang merges its
  server arguments, scheduler facts and per-worker internal states into one object with a
  ``version``; the fields here are the ones a client reads (``model_path``,
  ``served_model_name``, ``context_length``, ``max_total_num_tokens``, ``max_req_input_len``,
  ``max_running_requests``, ``speculative_num_draft_tokens``, ``internal_states`` with
  ``avg_spec_accept_length`` since boot when speculative decoding is on). ``GET
  /get_model_info`` (and ``/model_info``) -> ``{model_path, tokenizer_path, is_generation,
  preferred_sampling_params, weight_version}``. SGLang's ``/v1/models`` carries
  ``max_model_len`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.specdecode import SpecCounts

SIM_VERSION = "0.1.0+anvil.sim"  # what /version and /get_server_info report

Answer = Callable[[], dict[str, Any]]


def vllm_version() -> dict[str, Any]:
    return {"version": SIM_VERSION}


def sglang_server_info(cfg: SimConfig, spec: SpecCounts) -> dict[str, Any]:
    """SGLang's ``/get_server_info`` shape; `spec` is every draft since boot."""
    state: dict[str, Any] = {"last_gen_throughput": None}
    if cfg.spec_k:
        state["avg_spec_accept_length"] = (
            1 + spec.accepted_tokens / spec.drafts if spec.drafts else None
        )
    return {
        "model_path": cfg.model,
        "tokenizer_path": cfg.model,
        "served_model_name": cfg.model,
        "context_length": cfg.max_context,
        "max_running_requests": cfg.max_running,
        "speculative_num_draft_tokens": cfg.spec_k or None,
        "enable_metrics": True,
        "max_total_num_tokens": cfg.kv_capacity,
        "max_req_input_len": cfg.max_context - 1,
        "internal_states": [state],
        "version": SIM_VERSION,
    }


def sglang_model_info(cfg: SimConfig) -> dict[str, Any]:
    return {
        "model_path": cfg.model,
        "tokenizer_path": cfg.model,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
    }


def identity_routes(cfg: SimConfig, spec_since_boot: Callable[[], SpecCounts]
                    ) -> dict[str, Answer]:
    """``GET`` path -> the JSON it answers, for the engine of ``cfg.metrics_format``."""
    if cfg.metrics_format == "sglang":
        def server_info() -> dict[str, Any]:
            return sglang_server_info(cfg, spec_since_boot())

        def model_info() -> dict[str, Any]:
            return sglang_model_info(cfg)

        return {"/get_server_info": server_info, "/server_info": server_info,
                "/get_model_info": model_info, "/model_info": model_info}
    return {"/version": vllm_version}
