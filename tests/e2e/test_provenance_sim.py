"""`provenance.discover` against the simulator as a real process, in both engines' guises.

The simulator answers vLLM's or SGLang's identity endpoints as ``--metrics-format`` says, and
404 for the other's; discovery must name that engine, read the version the simulator reports
and the context limit it was started with, and find the served model.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from anvil_metrics.prep.provenance import discover, merge
from anvil_metrics.sim.rawclient import exchange

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("fmt,version_path", [("vllm", "/version"),
                                              ("sglang", "/get_server_info")])
def test_discovers_the_simulated_engine(simulator: Any, fmt: str, version_path: str) -> None:
    sim = simulator("--metrics-format", fmt, "--max-context", "6000", "--model", "tiny-chat")
    port = int(sim.url.rsplit(":", 1)[1])
    _, answer = exchange(port, version_path, method="GET")
    reported = orjson.loads(answer.body)["version"]
    other = "/get_server_info" if fmt == "vllm" else "/version"
    assert exchange(port, other, method="GET")[1].status == 404  # as the other engine would

    found = discover(sim.url + "/v1", headers={"Authorization": "Bearer sk-e2e"},
                     timeout_s=2.0, model="tiny-chat")
    assert (found.engine, found.version, found.max_model_len, found.served_model) == (
        fmt, reported, 6000, "tiny-chat")
    assert found.sources["version"] == f"GET {version_path}" and found.null_reasons == {}
    given = merge(found, {"version": "pinned"})
    assert given.version == "pinned" and given.sources["version"] == "given"
