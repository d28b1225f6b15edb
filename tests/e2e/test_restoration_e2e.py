"""The restoration check for real: a campaign of two simulators whose candidate also serves
two router aliases and answers the first chat request naming "llm.primary" with a 503
(`--fault http503@llm.primary:0`). After the last run, `anvil campaign run` asks each alias
(`/v1/models` and a one-token completion), retries the 503 once and records it in
campaign.json; `anvil summarize` gives the restoration block and says the retry in
`retained_failures`; a rerun of the finished campaign runs nothing and checks again."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import anvil, load_json
from simcampaign import CAMPAIGN, SCENARIO, SIM

pytestmark = pytest.mark.e2e

RESTORATION = """
[restoration]
aliases = ["llm.primary", "vision.ocr"]
"""


def setup(simulator, tmp_path: Path, *candidate_args: str) -> tuple[Path, Path, str]:
    """(the campaign file, its results folder, the candidate simulator's URL)."""
    slow = simulator(*SIM, "--interval-ms", "4")
    fast = simulator(*SIM, "--interval-ms", "2", *candidate_args)
    (tmp_path / "s.toml").write_text(SCENARIO)
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.format(runs=1, placements='["first"]', slow=slow.url,
                                    fast=fast.url, before="") + RESTORATION)
    return path, tmp_path / "res", fast.url


def test_aliases_answer_after_the_last_run_with_one_managed_retry(simulator,
                                                                  tmp_path: Path) -> None:
    path, res, url = setup(simulator, tmp_path, "--alias", "llm.primary", "--alias",
                           "vision.ocr", "--fault", "http503@llm.primary:0")
    proc = anvil("campaign", "run", str(path), "--results-dir", str(res), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (f"restoration: asking llm.primary, vision.ocr at {url}/v1"
            in proc.stdout.splitlines())
    rec = load_json(res / "sims" / "campaign.json")["restoration"]
    assert rec["result"] == "pass" and rec["base_url"] == f"{url}/v1"
    assert [(a["alias"], a["listed"], a["answered"], a["attempts"], a["retried_after"],
             a["retried_request"]) for a in rec["aliases"]] == [
        ("llm.primary", True, True, 3, 503, "POST /v1/chat/completions"),
        ("vision.ocr", True, True, 2, None, None)]

    out = tmp_path / "summary.json"
    proc = anvil("summarize", str(res / "sims"), "-o", str(out), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load_json(out)
    assert {k: doc["restoration"][k] for k in ("result", "router_aliases",
                                                "all_tiers_admitting")} == {
        "result": "pass", "router_aliases": ["llm.primary", "vision.ocr"],
        "all_tiers_admitting": True}
    assert ("Restoration: alias llm.primary answered 503 once (POST /v1/chat/completions), "
            "then 200 after a retry.") in doc["retained_failures"]
    assert "restoration" not in doc["not_included"]

    # the finished campaign, run again: nothing to run, the aliases asked again (no 503 now)
    first_at = rec["checked_at"]
    proc = anvil("campaign", "run", str(path), "--results-dir", str(res), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = load_json(res / "sims" / "campaign.json")["restoration"]
    assert rec["result"] == "pass" and rec["checked_at"] > first_at
    assert [a["retried_after"] for a in rec["aliases"]] == [None, None]


def test_an_alias_the_server_does_not_serve_fails_the_check(simulator, tmp_path: Path) -> None:
    path, res, _ = setup(simulator, tmp_path, "--alias", "llm.primary")
    proc = anvil("campaign", "run", str(path), "--results-dir", str(res), timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("restoration: vision.ocr FAILED: GET /v1/models: 'vision.ocr' is not listed; "
            "POST /v1/chat/completions: HTTP 404") in proc.stdout.splitlines()
    rec = load_json(res / "sims" / "campaign.json")["restoration"]
    assert rec["result"] == "fail"
    assert [a["result"] for a in rec["aliases"]] == ["pass", "fail"]
