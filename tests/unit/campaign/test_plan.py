"""A campaign's plan: interleaved rounds or each variant back to back, the placements by
run index, folder names numbered across the plan, and the dry run's lines."""

from __future__ import annotations

from dataclasses import replace

from campaignbuild import campaign_doc
from conftest import REPO

from anvil_metrics.campaign.plan import plan, plan_lines
from anvil_metrics.campaign.spec import Campaign, campaign_from_dict


def campaign(**changes: object) -> Campaign:
    doc = campaign_doc()
    doc.update(changes)
    return campaign_from_dict(doc, "c.toml", REPO)


def test_interleaved_plan_rounds_through_the_variants() -> None:
    c = campaign()
    runs = plan(c)
    assert [r.k for r in runs] == list(range(1, 13))
    assert [r.variant_id for r in runs] == ["a/off", "a/on", "b/off", "b/on"] * 3
    assert [r.run_index for r in runs] == [1] * 4 + [2] * 4 + [3] * 4
    assert [r.placement for r in runs] == ["first"] * 8 + ["swapped"] * 4
    assert runs[0].folder == "01-a-off-run1" and runs[11].folder == "12-b-on-run3"
    assert len({r.folder for r in runs}) == 12


def test_grouped_plan_runs_each_variant_back_to_back() -> None:
    runs = plan(campaign(order="grouped"))
    assert [r.variant_id for r in runs] == (["a/off"] * 3 + ["a/on"] * 3 + ["b/off"] * 3
                                            + ["b/on"] * 3)
    assert [r.run_index for r in runs] == [1, 2, 3] * 4
    assert [r.placement for r in runs] == ["first", "first", "swapped"] * 4


def test_without_placements_runs_have_none() -> None:
    doc = campaign_doc()
    del doc["placements"]
    runs = plan(campaign_from_dict(doc, "c.toml", REPO))
    assert {r.placement for r in runs} == {None}


def test_plan_lines_name_each_run_and_its_before_run() -> None:
    doc = campaign_doc()
    doc["variants"][3]["before_run"] = "./swap.sh b"
    c = campaign_from_dict(doc, "c.toml", REPO)
    lines = plan_lines(c, plan(c), "out")
    runs = [ln for ln in lines if ln.startswith("run ")]
    assert len(runs) == 12
    assert runs[0].split()[:6] == ["run", "1", "of", "12", "a/off", "first"]
    assert runs[11].split()[:6] == ["run", "12", "of", "12", "b/on", "swapped"]
    assert lines.count("    before_run: ./swap.sh b") == 3
    assert lines[lines.index(runs[3]) + 1] == "    before_run: ./swap.sh b"
    assert "folder: out/t" in lines


def test_folder_numbers_are_as_wide_as_the_plan_is_long() -> None:
    six = plan(campaign(runs_per_variant=2, placements=["first", "swapped"],
                        variants=campaign_doc()["variants"][1:], baseline="b/off"))
    assert [r.folder for r in six] == ["1-a-on-run1", "2-b-off-run1", "3-b-on-run1",
                                       "4-a-on-run2", "5-b-off-run2", "6-b-on-run2"]
    twelve = plan(campaign())
    assert {len(r.folder.split("-")[0]) for r in twelve} == {2}


def test_plan_lines_show_each_gate_as_it_is_met() -> None:
    c = campaign()
    c = replace(c, gates={"e2e_p50_improvement_percent": 2.5, "no_saturated_runs": False,
                          "functional": "all_pass"})
    lines = plan_lines(c, plan(c), "out")
    assert "gates: e2e_p50_improvement_percent >= 2.5, no_saturated_runs = false, " \
           'functional = "all_pass"' in lines
    assert lines[0] == "campaign t (c.toml): 4 variants × 3 runs = 12 runs, interleaved"
