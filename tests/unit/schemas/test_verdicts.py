"""The summary's and the checks file's schemas: anvil's own documents, with every block they
can hold, meet them, and a wrong value in a block the schema now describes is named by path.

Why: `anvil verify` checks a summary or a checks file against these schemas before it
recomputes anything, so a schema that refused what anvil writes (a restoration record, a
retried case, a model's functional results) would fail every campaign; one that let any
value through would describe fields it does not check.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from summarybuild import DATA, SUMMARY_NAME, accept_all, all_entries, example_docs, write_folder

from anvil_metrics.campaign.restoration import AliasCheck, RestorationResult
from anvil_metrics.checks.docverify import SCHEMA as CHECKS
from anvil_metrics.checks.registry import SUITES
from anvil_metrics.checks.results import CaseResult, Retry, SuiteResult
from anvil_metrics.checks.suite import CheckOptions
from anvil_metrics.schemas.build import check
from anvil_metrics.schemas.verdicts import checks_schema
from anvil_metrics.summary.folder import SCHEMA as SUMMARY
from anvil_metrics.summary.folder import read_campaign_folder, summary_document


@pytest.fixture
def summary(tmp_path: Path) -> dict[str, Any]:
    """anvil's summary of the example campaign, with its checks and a restoration check
    (one alias retried after a 503, as `restoration.py` records it)."""
    example = orjson.loads((DATA / SUMMARY_NAME).read_bytes())
    folder = write_folder(tmp_path / "c", example_docs(example), all_entries())
    record = orjson.loads((folder / "campaign.json").read_bytes())
    aliases = example["restoration"]["router_aliases"]
    checked = RestorationResult("http://127.0.0.1:8000/v1", tuple(
        AliasCheck(a, True, True, 1 + (i == 0), 503 if i == 0 else None,
                   "POST /v1/chat/completions" if i == 0 else None, None)
        for i, a in enumerate(aliases)))
    record["restoration"] = {**checked.to_json(), "checked_at": "2026-08-01T17:00:00Z"}
    (folder / "campaign.json").write_bytes(orjson.dumps(record))
    return orjson.loads(orjson.dumps(summary_document(read_campaign_folder(
        folder, verify=accept_all))))


def test_anvils_summary_with_every_block_validates(summary: dict[str, Any]) -> None:
    for key in ("functional", "multimodal", "restoration", "gates", "statistics", "campaign"):
        assert summary[key], key
    assert summary["restoration"]["aliases"][0]["retried_after"] == 503
    assert summary["functional"]["both_models"]["retrieval_131k"] == "pass"
    assert check(summary, SUMMARY)[1] == []


@pytest.mark.parametrize(("edit", "where"), [
    (lambda d: d["functional"]["both_models"].update(coding="passed"),
     "functional.both_models.coding"),
    (lambda d: d["functional"]["both_models"].update(retrieval_131k=True),
     "functional.both_models.retrieval_131k"),
    (lambda d: d["functional"]["near_limit_retrieval"].update(
        official_fp8_elapsed_seconds="slow"),
     "functional.near_limit_retrieval.official_fp8_elapsed_seconds"),
    (lambda d: d["multimodal"]["official_fp8"].update(result=1), "multimodal.official_fp8.result"),
    (lambda d: d["restoration"].update(all_tiers_admitting="yes"),
     "restoration.all_tiers_admitting"),
    (lambda d: d["statistics"]["bootstrap"].update(seed=-1), "statistics.bootstrap.seed"),
    (lambda d: d["campaign"].update(summarized_runs="all"), "campaign.summarized_runs"),
    (lambda d: d["gates"][0]["figures"].update(candidate_runs=1.5),
     "gates[0].figures.candidate_runs"),
])
def test_a_wrong_value_in_a_block_is_named_by_path(summary: dict[str, Any], edit: Any,
                                                   where: str) -> None:
    bad = copy.deepcopy(summary)
    edit(bad)
    assert [p.split(":")[0] for p in check(bad, SUMMARY)[1]] == [where]


def _checks_doc() -> dict[str, Any]:
    retried = CaseResult("c1", True, "4", "4", elapsed_s=1.5, retries=(
        Retry(1, 503, "HTTP 503: loading", 0.5), Retry(2, None, "connection reset", 1.0)))
    errored = CaseResult("c2", False, "4", None, error="timed out", error_kind="transport")
    suites = {"coding": SuiteResult("coding", (retried,), 2.0),
              "retrieval": SuiteResult("retrieval", (retried, errored), 3.0,
                                       {"requested_context_tokens": 4096}),
              "multimodal": SuiteResult("multimodal", (), 0.1, error="no Pillow")}
    return {"schema": CHECKS, "model": "m", "host": "http://127.0.0.1:8000/v1",
            "started_at": "2026-12-01T00:00:00Z", "finished_at": "2026-12-01T00:00:09Z",
            "engine": "vllm", "engine_version": "0.11.0", "max_model_len": 4096,
            "options": {k: getattr(CheckOptions(), k)
                        for k in CheckOptions.__dataclass_fields__},
            "checks": {k: v.to_json() for k, v in suites.items()}}


def test_a_checks_document_with_retries_errors_and_options_validates() -> None:
    doc = _checks_doc()
    assert check(doc, CHECKS)[1] == []
    bad = copy.deepcopy(doc)
    bad["checks"]["retrieval"]["cases"][0]["retries"][1]["wait_s"] = -1.0
    bad["options"]["timeout_s"] = "long"
    assert [p.split(":")[0] for p in check(bad, CHECKS)[1]] == [
        "checks.retrieval.cases[0].retries[1].wait_s", "options.timeout_s"]
    bad = copy.deepcopy(doc)
    bad["checks"]["bogus"] = bad["checks"]["coding"]
    assert "'bogus' was unexpected" in check(bad, CHECKS)[1][0]


def test_every_suite_shares_one_definition() -> None:
    s = checks_schema()
    suites = s["properties"]["checks"]["properties"]
    assert list(suites) == list(SUITES)
    assert {v["$ref"] for v in suites.values()} == {"#/$defs/suite"}
    assert all(v["description"].startswith(f"the {k} suite: ") for k, v in suites.items())
    assert s["$defs"]["suite"]["required"] == ["result", "passed", "total", "elapsed_s",
                                               "cases"]
