"""The summary's field tables (`summary/fields.py`) name exactly the fields its writers write.

Why: the JSON Schema and `docs/fields.md` give each summary field its words from these
tables; this holds them to anvil's own summary of the example campaign (checks, gates of
every kind and a restoration check included), so a field a writer adds without words, or
words for a field no longer written, fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from summarybuild import DATA, SUMMARY_NAME, accept_all, all_entries, example_docs, write_folder

from anvil_metrics.campaign.restoration import AliasCheck, RestorationResult
from anvil_metrics.summary import fields
from anvil_metrics.summary.folder import (
    COMPUTED_KEYS,
    NO_RESULTS,
    NO_UNDER_LOAD,
    read_campaign_folder,
    summary_document,
)
from anvil_metrics.summary.gates import (
    VariantRuns,
    checks_under_load,
    functional_gate,
    pass_rate_gate,
    saturation_gate,
)
from anvil_metrics.summaryfigures import SUMMARY_FIGURES


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    example = orjson.loads((DATA / SUMMARY_NAME).read_bytes())
    folder = write_folder(tmp_path_factory.mktemp("c") / "c", example_docs(example),
                          all_entries())
    record = orjson.loads((folder / "campaign.json").read_bytes())
    checked = RestorationResult("http://127.0.0.1:8000/v1", tuple(
        AliasCheck(a, True, True, 1, None, None, None)
        for a in example["restoration"]["router_aliases"]))
    record["restoration"] = {**checked.to_json(), "checked_at": "2026-08-01T17:00:00Z"}
    (Path(folder) / "campaign.json").write_bytes(orjson.dumps(record))
    return summary_document(read_campaign_folder(folder, verify=accept_all))


def test_the_documents_members(doc: dict[str, Any]) -> None:
    assert tuple(fields.TOP) == COMPUTED_KEYS
    assert set(doc) - set(fields.TOP) == {"hardware", "runtime", "models",
                                          "common_configuration", "speculative_configuration"}
    assert set(fields.PROTOCOL) == set(doc["performance_protocol"])
    # per GPU, per dollar, per joule: left out of rows whose runs lack them (these do)
    optional = {f.name for f in SUMMARY_FIGURES if f.optional}
    assert set(fields.ROW) - optional == {k for r in doc["performance"] for k in r}
    assert set(fields.TELEMETRY) == {k for r in doc["sampled_speculative_telemetry"] for k in r}
    assert set(fields.STATISTICS) == set(doc["statistics"])
    assert set(fields.BOOTSTRAP) == set(doc["statistics"]["bootstrap"])
    assert set(fields.CAMPAIGN) == set(doc["campaign"])
    assert set(fields.GATE) == {k for g in doc["gates"] for k in g}


def test_the_gates_figures_of_every_kind() -> None:
    run = {"client": {"saturated": True}, "run_id": "r1"}
    judged = {"mix": {"classes": [{"name": "j", "check": "json", "verdicts": {
        "judged": 4, "passed": 3}}]}}
    seen = {k for g in [saturation_gate(True, [VariantRuns("m", "off", [run])]),
                        functional_gate("all_pass", {"coding": True, "json": False}),
                        pass_rate_gate(0.5, VariantRuns("m", "off", [judged]))]
            for k in g.figures}
    improvement = ("candidate", "incumbent", "field", "candidate_mean", "incumbent_mean",
                   "improvement_percent", "improvement_ci95_percent", "mann_whitney_p",
                   "candidate_runs", "incumbent_runs")
    assert seen | set(improvement) == set(fields.GATE_FIGURES)


def test_the_checks_blocks(doc: dict[str, Any]) -> None:
    functional = doc["functional"]
    assert set(functional) == {"both_models", *fields.FUNCTIONAL}
    written = set(functional["both_models"])
    assert written - set(fields.MODEL_FUNCTIONAL) == {"retrieval_131k"}
    assert set(fields.MODEL_FUNCTIONAL) <= written
    near = functional["near_limit_retrieval"]
    assert set(fields.NEAR_LIMIT) < set(near) and any(k.endswith("_elapsed_seconds")
                                                      for k in near)
    mm = doc["multimodal"]
    assert set(fields.MULTIMODAL) < set(mm)
    assert {k for m in set(mm) - set(fields.MULTIMODAL) for k in mm[m]} == set(
        fields.MULTIMODAL_MODEL)
    assert set(fields.RESTORATION) == set(doc["restoration"])
    assert set(fields.ALIAS) == set(doc["restoration"]["aliases"][0])
    assert doc["not_included"] == {"checks_under_load": NO_UNDER_LOAD}  # the runs have no mix
    # what may be left out
    assert set(fields.NOT_INCLUDED) == {*NO_RESULTS, "restoration", "checks_under_load"}


def test_the_checks_under_load_block() -> None:
    run = {"mix": {"classes": [{"name": "chat"}, {"name": "j", "check": "json", "verdicts": {
        "judged": 4, "passed": 3}}]}}
    block = checks_under_load([VariantRuns("m", "off", [run]), VariantRuns("m", "on", [{}])])
    assert block is not None and len(block) == 1  # the variant without a check class: none
    assert set(fields.CHECKS_UNDER_LOAD) == set(block[0])
    assert set(fields.CHECK_CLASS) == set(block[0]["classes"][0])
