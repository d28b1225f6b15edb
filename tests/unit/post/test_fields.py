"""The benchmark's field tables (`post/fields.py`) name exactly the fields the writers write.

Why: the JSON Schema and `docs/fields.md` give each field its words from these tables, and
the schema builder holds each table to the schema's block; this holds them to what the
writers actually put in a document — `anvil postprocess`'s own build of a run with every
block (`fullbench.py`), the server block from gauges, a scenario's flags — so a field added
to a writer without words (or words left for a field no longer written) fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
from fullbench import full_benchmark

from anvil_metrics import catalog
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.post import (
    cancelblock,
    conversations,
    fields,
    loadblock,
    mixblock,
    schema,
    steps,
    traceblock,
)
from anvil_metrics.telemetry import servermetrics
from anvil_metrics.telemetry.servermetrics import ClientFigures, server_block


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return full_benchmark(tmp_path_factory.mktemp("full"))


def test_the_run_fields_are_the_documents_outside_the_catalogue(doc: dict[str, Any]) -> None:
    assert set(fields.RUN) == set(doc)
    assert set(fields.RUN) >= schema.REQUIRED_FIELDS | set(schema.PARAM_KEYS)
    assert not set(fields.RUN) & {a.name for a in catalog.AGGREGATES}  # the catalogue's


def test_the_blocks_tables_are_their_writers_keys(doc: dict[str, Any]) -> None:
    assert set(fields.FAILURE) == set(doc["failures"][0]) == {*schema.FAILURE_FIELDS, "step"}
    assert tuple(fields.CLIENT) == schema.CLIENT_KEYS == tuple(doc["client"])
    assert set(fields.LOOP_LAG) == set(doc["client"]["loop_lag_ms"])
    assert set(fields.START_DELAY) == set(doc["client"]["start_delay_ms"])
    assert set(fields.CALIBRATION) == set(doc["prompt_calibration"])
    assert set(fields.SHARED_PREFIX) == set(doc["shared_prefix"])
    assert set(fields.SERVE_FLAGS) == set(Scenario("p").serve_flags()) == set(doc["serve_flags"])
    assert tuple(fields.LOAD) == (*loadblock.KEYS, *loadblock.OPTIONAL_KEYS) == tuple(
        doc["load"])
    assert tuple(fields.CONVERSATION) == conversations.BLOCK_KEYS == tuple(doc["conversation"])
    assert tuple(fields.TRACE) == traceblock.KEYS == tuple(doc["trace"])
    assert tuple(fields.MIX) == mixblock.BLOCK_KEYS == tuple(doc["mix"])
    assert tuple(fields.CANCEL) == cancelblock.BLOCK_KEYS == tuple(doc["cancel"])
    assert doc["cancel"]["phases"] == {"headers": 0, "prefill": 0, "decode": 1}
    assert tuple(fields.MIX_GROUP) == mixblock.GROUP_KEYS == tuple(doc["mix"]["classes"][0])
    assert [m["name"] for m in doc["mix"]["models"]] == ["m", "lora", "c"]
    assert tuple(fields.DATASET) == tuple(doc["dataset"])
    assert tuple(fields.CONVERSATION_TURN) == conversations.TURN_KEYS == tuple(
        doc["conversation"]["turns"][0])
    assert set(fields.SCHEDULE_LAG) == set(doc["load"]["schedule_lag_ms"])
    assert set(fields.OUTSIDE_WINDOW) == set(doc["load"]["outside_window"])
    assert set(fields.STEP) == {*steps.STEP_KEYS, "users", "rate"}
    assert {k for b in doc["steps"] for k in b} == set(fields.STEP) - {"users"}
    assert set(fields.GOODPUT) == set(doc["goodput"])


def test_the_server_tables_are_the_blocks_keys(doc: dict[str, Any]) -> None:
    server = doc["server"]
    assert tuple(fields.SERVER) == servermetrics.SERVER_KEYS == tuple(server)
    assert set(fields.GAUGE) == set(server["requests_running"])
    assert set(fields.CLIENT_MINUS_SERVER) == set(server["client_minus_server_ms"])
    counted = set(server["spec_decode"])
    samples = [{"type": "sample", "seq": i, "t_ns": i, "done_ns": i, "ok": True, "mark": m,
                "series": {"sglang:spec_accept_rate": 0.7, "sglang:spec_accept_length": 3.0}}
               for i, m in enumerate(("first", "last"))]
    gauged = set(server_block({"engine": "sglang"}, samples,
                              ClientFigures(None, None, 0, 0.0, 0))["spec_decode"])
    assert counted | gauged == set(fields.SPEC_DECODE) and counted != gauged

