"""The campaign file's gate table (`campaign/gates.py`): the pass rate under load's value
is a rate between 0 and 1, and anything else is one line naming the gate, exit 2."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from campaignbuild import campaign_doc, campaign_file
from conftest import REPO

from anvil_metrics.campaign.gates import GATES
from anvil_metrics.campaign.spec import CampaignError, campaign_from_dict
from anvil_metrics.cli.main import main
from anvil_metrics.errors import UsageError
from anvil_metrics.summary.gates import VariantRuns, pass_rate_gate
from anvil_metrics.summaryfigures import KNOWN_GATES, PASS_RATE_GATE

EXPECTED = "expected a pass rate between 0 and 1, e.g. 0.99"


def test_the_table_is_the_summarys() -> None:
    assert set(GATES) == set(KNOWN_GATES) and PASS_RATE_GATE in GATES
    assert not GATES[PASS_RATE_GATE].compares  # needs no incumbent
    doc = campaign_doc()
    doc["gates"] = {PASS_RATE_GATE: 0.99}
    for ok in (0, 0.5, 1):
        doc["gates"] = {PASS_RATE_GATE: ok}
        assert campaign_from_dict(doc, "c.toml", REPO).gates == {PASS_RATE_GATE: ok}


@pytest.mark.parametrize("bad", [1.5, -0.1, True, "0.99", math.nan, math.inf])
def test_a_bad_value_is_one_line_naming_the_gate(bad: Any) -> None:
    doc = campaign_doc()
    doc["gates"] = {PASS_RATE_GATE: bad}
    with pytest.raises(CampaignError) as info:
        campaign_from_dict(doc, "c.toml", REPO)
    assert info.value.exit_code == 2
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"c.toml: gates.{PASS_RATE_GATE}: ") and line.endswith(EXPECTED)
    with pytest.raises(UsageError, match=f"^gate {PASS_RATE_GATE} = "):  # the summary's too
        pass_rate_gate(bad, VariantRuns("m", "on", []))


def test_the_command_says_it_in_one_line_and_exits_2(tmp_path: Path, capsys) -> None:
    path = campaign_file(tmp_path)
    path.write_text(path.read_text().replace("[gates]\n", f"[gates]\n{PASS_RATE_GATE} = 1.5\n"))
    assert main(["campaign", "run", str(path), "--dry-run"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"anvil: {path}: gates.{PASS_RATE_GATE}: 1.5 is not allowed; {EXPECTED}"]
