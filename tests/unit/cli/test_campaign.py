"""`anvil campaign run` and `anvil summarize` in-process: a dry run prints the plan and
runs nothing; a campaign file's problems are a line each; a bad folder is one line."""

from __future__ import annotations

from pathlib import Path

from campaignbuild import campaign_file

from anvil_metrics.campaign.plan import plan, plan_lines
from anvil_metrics.campaign.spec import load_campaign
from anvil_metrics.cli.main import main


def test_a_dry_run_prints_the_plan_and_runs_nothing(tmp_path: Path, capsys) -> None:
    path = campaign_file(tmp_path, before_off='before_run = "true"')
    results = tmp_path / "results"
    assert main(["campaign", "run", str(path), "--dry-run", "--results-dir", str(results)]) == 0
    c = load_campaign(path)
    assert capsys.readouterr().out.splitlines() == plan_lines(c, plan(c), results)
    assert not results.exists()


def test_each_problem_of_a_campaign_file_is_a_line(tmp_path: Path, capsys) -> None:
    path = campaign_file(tmp_path)
    path.write_text(path.read_text().replace('name = "c1"', 'name = "c 1"')
                    .replace("runs_per_variant = 2", "runs_per_variant = 0"))
    assert main(["campaign", "run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith(f"anvil: {path}: ") for line in err)
    assert [line.split(": ")[2] for line in err] == ["name", "runs_per_variant"]


def test_summarize_a_folder_that_is_not_there(tmp_path: Path, capsys) -> None:
    assert main(["summarize", str(tmp_path / "none"), "-o", str(tmp_path / "s.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "s.txt" in err  # -o is checked before the folder
