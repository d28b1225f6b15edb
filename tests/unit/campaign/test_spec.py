"""Campaign files: the shipped example validates and mirrors the summary example; every kind
of problem gives its own line, several are reported together."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from campaignbuild import campaign_doc as good

from anvil_metrics.campaign.plan import plan, plan_lines
from anvil_metrics.campaign.spec import GATES, CampaignError, campaign_from_dict, load_campaign
from anvil_metrics.errors import UsageError
from anvil_metrics.load.scenario import load_scenario

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "scenarios" / "campaigns" / "fp8-vs-nvfp4.toml"
SUMMARY = Path("/work/shared/spec/examples/public-summary-v1.004_72673d6db1c063a6.json")


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(CampaignError) as info:
        campaign_from_dict(doc, "c.toml", REPO)
    e = info.value
    assert e.exit_code == 2
    lines = str(e).splitlines()
    assert lines == [f"c.toml: {p}" for p in e.problems]
    return e.problems


def test_the_shipped_example_validates_and_mirrors_the_summary_example() -> None:
    c = load_campaign(EXAMPLE)
    assert c.name == "qwen-fp8-vs-nvfp4" and c.order == "interleaved"
    assert [v.id for v in c.variants] == ["official-fp8/off", "official-fp8/mtp3",
                                           "inferact-nvfp4/off", "inferact-nvfp4/mtp3"]
    assert (c.baseline, c.candidate, c.incumbent) == (
        "official-fp8/off", "inferact-nvfp4/mtp3", "official-fp8/mtp3")
    assert c.placements == ("first", "first", "first", "swapped", "swapped")
    assert c.gates == {"e2e_p50_improvement_percent": 10, "functional": "all_pass",
                       "no_saturated_runs": True}
    assert c.restoration_aliases == ("llm.primary", "vision.general", "vision.ocr")
    assert Path(c.scenario_path) == REPO / "scenarios" / "performance.toml"
    summary = json.loads(SUMMARY.read_text())
    for key in ("hardware", "runtime", "models", "common_configuration",
                "speculative_configuration"):
        assert c.facts[key] == summary[key], key
    served = {m["id"] for m in summary["models"]}
    assert {v.served_model for v in c.variants} == served
    assert {(r["model"], r["speculation"]) for r in summary["performance"]} == {
        (v.model, v.speculation) for v in c.variants}


def test_the_performance_scenario_is_the_examples_protocol() -> None:
    protocol = json.loads(SUMMARY.read_text())["performance_protocol"]
    sc = load_scenario(REPO / "scenarios" / "performance.toml")
    assert sc.requests == protocol["requests_per_run"] == 10
    assert sc.concurrency == protocol["concurrency"] == 1
    assert sc.context_distribution == {protocol["configured_input_tokens"]: 10}
    assert sc.max_tokens == protocol["max_output_tokens"] == 256
    assert sc.thinking_mode == "off" and sc.warmup_requests == 0
    c = load_campaign(EXAMPLE)
    assert c.runs_per_variant == protocol["runs_per_model"]


def test_a_valid_document_loads() -> None:
    c = campaign_from_dict(good(), "c.toml", REPO)
    assert c.variant("b/on").endpoint.base_url == "http://127.0.0.1:8001/v1"
    assert c.scenario.measurement_protocol == "smoke"


def _patched(path: str, value: Any) -> dict[str, Any]:
    """good() with one field set (a value of DELETE removes it); path like 'variants.1.host'."""
    doc = copy.deepcopy(good())
    *parents, last = path.split(".")
    target: Any = doc
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    key: Any = int(last) if last.isdigit() else last
    if value is DELETE:
        del target[key]
    else:
        target[key] = value
    return doc


DELETE = object()


@pytest.mark.parametrize("path,value,line", [
    ("foo", 1, 'unknown key "foo"; allowed: name, scenario, '),
    ("name", DELETE, "name: missing; expected letters, digits"),
    ("name", "a b", "name: 'a b' is not allowed; expected letters, digits"),
    ("scenario", "scenarios/none.toml", "scenario: scenario file "),
    ("scenario", DELETE, "scenario: missing; expected the path of a scenario TOML file"),
    ("runs_per_variant", 0, "runs_per_variant: 0 is not allowed; expected a whole number >= 1"),
    ("runs_per_variant", True, "runs_per_variant: True is not allowed; expected a whole"),
    ("placements", ["first"], "placements: ['first'] is not allowed; expected a list of "
     "labels, one per run of a variant (3 = runs_per_variant)"),
    ("order", "random", "order: 'random' is not allowed; expected \"interleaved\" or "
     "\"grouped\""),
    ("facts", 3, "facts: 3 is not allowed; expected a table"),
    ("variants.1.host", DELETE, "variants[2].host: missing; expected http(s)://HOST:PORT"),
    ("variants.1.host", "ftp://127.0.0.1:1", "variants[2].host: 'ftp://127.0.0.1:1' is not "
     "allowed; expected http(s)://HOST:PORT"),
    ("variants.0.colour", "red", 'variants[1]: unknown key "colour"; allowed: model, '),
    ("variants.2.model", "b/x", "variants[3].model: 'b/x' is not allowed; expected letters"),
    ("variants.2.served_model", "", "variants[3].served_model: '' is not allowed; expected a "
     "non-empty string"),
    ("variants.3.speculation", DELETE, "variants[4].speculation: missing"),
    ("variants.3.api_key_env", "1-KEY", "variants[4].api_key_env: '1-KEY' is not allowed"),
    ("variants", [], "variants: 0 [[variants]] table(s); expected at least two"),
    ("variants", DELETE, "variants: missing; expected one [[variants]] table per variant"),
    ("gates.p99_magic", 1, "gates.p99_magic: unknown gate; allowed: "
     + ", ".join(GATES)),
    ("gates.e2e_p50_improvement_percent", 100, "gates.e2e_p50_improvement_percent: 100 is "
     "not allowed; expected a number of percent between -100 and 100"),
    ("gates.decode_p50_improvement_percent", "5", "gates.decode_p50_improvement_percent: "
     "'5' is not allowed; expected a number of percent above -100"),
    ("gates.functional", "most", "gates.functional: 'most' is not allowed; expected "
     '"all_pass"'),
    ("gates.no_saturated_runs", "yes", "gates.no_saturated_runs: 'yes' is not allowed; "
     "expected true or false"),
    ("gates", {}, "gates: missing; expected at least one gate of: "),
    ("gates", DELETE, "gates: missing; expected a [gates] table"),
    ("candidate", DELETE, "candidate: missing; expected a variant id"),
    ("candidate", "c/on", "candidate: 'c/on' is not allowed; expected one of the variant "
     "ids: a/off, a/on, b/off, b/on"),
    ("baseline", "a/mtp", "baseline: 'a/mtp' is not allowed; expected one of the variant ids"),
    ("incumbent", DELETE, "incumbent: missing; expected a variant id (model/speculation) "
     "(gates e2e_p50_improvement_percent compare with it)"),
    ("incumbent", "b/on", "incumbent: 'b/on' is not allowed; expected a variant other than "
     "the candidate"),
    ("restoration", {"aliases": ["x", "x"]}, "restoration.aliases: ['x', 'x'] is not "
     "allowed; expected a list of distinct"),
    ("restoration", {"names": ["x"]}, 'restoration: unknown key "names"; allowed: aliases, '
     "host"),
    ("restoration", {"aliases": ["x"], "host": "ftp://127.0.0.1"}, "restoration.host: "
     "'ftp://127.0.0.1' is not allowed; expected http(s)://HOST:PORT[/v1]"),
    ("restoration", {"aliases": ["x"], "host": 8000}, "restoration.host: a int is not "
     "allowed; expected http(s)://HOST:PORT[/v1]"),
])
def test_each_problem_gives_its_line(path: str, value: Any, line: str) -> None:
    found = problems(_patched(path, value))
    assert len(found) == 1, found
    assert found[0].startswith(line), found[0]


def test_restoration_asks_its_host_else_the_candidates() -> None:
    doc = good()
    doc["restoration"] = {"aliases": ["llm.primary"]}
    c = campaign_from_dict(doc, "c.toml", REPO)
    assert c.restoration_host is None
    assert c.restoration_endpoint.base_url == "http://127.0.0.1:8001/v1"  # b/on's
    doc["restoration"]["host"] = "http://alice:s3cret@127.0.0.1:9000"
    c = campaign_from_dict(doc, "c.toml", REPO)
    assert c.restoration_endpoint.base_url == "http://127.0.0.1:9000/v1"
    assert c.restoration_endpoint.userinfo_key == "s3cret"
    assert any("restoration: llm.primary at http://127.0.0.1:9000/v1" in line
               for line in plan_lines(c, plan(c), "results"))
    doc["restoration"]["host"] = "gopher://alice:s3cret@127.0.0.1:9000"
    assert "s3cret" not in "".join(problems(doc))


def test_a_repeated_id_is_refused() -> None:
    doc = good()
    doc["variants"][3]["speculation"] = "off"
    assert problems(doc) == [
        'variants[4]: id "b/off" repeats variants[3]; expected each model/speculation pair '
        "once",
        "candidate: 'b/on' is not allowed; expected one of the variant ids: a/off, a/on, b/off"]


def test_several_problems_are_reported_together() -> None:
    doc = good()
    doc["foo"] = 1
    doc["runs_per_variant"] = -1
    del doc["variants"][2]["host"]
    doc["gates"]["p99_magic"] = 5
    doc["candidate"] = "z/on"
    found = problems(doc)
    assert [p.split(":")[0] for p in found] == [
        'unknown key "foo"; allowed', "runs_per_variant", "variants[3].host",
        "gates.p99_magic", "candidate"]


def test_an_incumbent_is_optional_without_comparing_gates() -> None:
    doc = good()
    del doc["incumbent"]
    doc["gates"] = {"functional": "all_pass"}
    doc["checks"] = {"suites": ["tools"]}
    assert campaign_from_dict(doc, "c.toml", REPO).incumbent is None


def test_credentials_in_a_host_are_used_and_never_echoed() -> None:
    doc = good()
    doc["variants"][0]["host"] = "http://alice:s3cret@127.0.0.1:8000"
    doc["variants"][1]["host"] = "gopher://bob:hunter2@127.0.0.1:8000"
    found = problems(doc)
    assert found == ["variants[2].host: 'gopher://127.0.0.1:8000' is not allowed; expected "
                     "http(s)://HOST:PORT[/v1], e.g. http://127.0.0.1:8000"]
    del doc["variants"][1]["host"]
    doc["variants"][1]["host"] = "http://127.0.0.1:8000"
    c = campaign_from_dict(doc, "c.toml", REPO)
    assert c.variants[0].endpoint.userinfo_key == "s3cret"
    text = "\n".join(plan_lines(c, plan(c), "results"))
    assert "s3cret" not in text and "alice" not in text
    assert "http://127.0.0.1:8000/v1" in text


def test_a_relative_scenario_path_starts_at_the_campaign_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "p.toml").write_text((REPO / "scenarios" / "smoke.toml").read_text())
    doc = good()
    doc["scenario"] = "../p.toml"
    text = "\n".join(f"{k} = {json.dumps(v)}" for k, v in doc.items()
                     if k not in ("variants", "gates"))
    for v in doc["variants"]:
        text += "\n[[variants]]\n" + "\n".join(f"{k} = {json.dumps(x)}" for k, x in v.items())
    text += "\n[gates]\ne2e_p50_improvement_percent = 10\n"
    (tmp_path / "sub" / "c.toml").write_text(text)
    c = load_campaign(tmp_path / "sub" / "c.toml")
    assert Path(c.scenario_path) == tmp_path / "p.toml"


def test_unreadable_files_are_one_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_campaign(tmp_path / "none.toml")
    (tmp_path / "bad.toml").write_text("name = \n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_campaign(tmp_path / "bad.toml")
