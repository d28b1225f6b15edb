"""`anvil campaign run` as a user runs it (a real process): the shipped example checks out
and prints its plan; a bad file is refused with one line per problem, exit 2, no traceback,
and nothing is run or written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, anvil

from anvil_metrics.campaign.spec import GATES

pytestmark = pytest.mark.e2e

EXAMPLE = "scenarios/campaigns/fp8-vs-nvfp4.toml"

BAD = """\
name = "bad"
scenario = "../performance.toml"
runs_per_variant = 2
candidate = "m/on"
incumbent = "m/off"
colour = "red"

[[variants]]
model = "m"
served_model = "org/m"
speculation = "off"
host = "http://127.0.0.1:8000"

[[variants]]
model = "m"
served_model = "org/m"
speculation = "on"

[gates]
e2e_p50_improvement_percent = 10
p99_magic = 1
"""


def test_dry_run_of_the_shipped_example_prints_the_plan(tmp_path: Path) -> None:
    proc = anvil("campaign", "run", EXAMPLE, "--dry-run", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("campaign qwen-fp8-vs-nvfp4 (")
    assert "4 variants × 5 runs = 20 runs, interleaved" in lines[0]
    runs = [ln.split() for ln in lines if ln.startswith("run ")]
    assert len(runs) == 20
    assert [r[4] for r in runs[:4]] == ["official-fp8/off", "official-fp8/mtp3",
                                        "inferact-nvfp4/off", "inferact-nvfp4/mtp3"]
    assert [r[5] for r in runs] == ["first"] * 12 + ["swapped"] * 8
    assert runs[19][:4] == ["run", "20", "of", "20"]
    assert f"folder: {tmp_path / 'qwen-fp8-vs-nvfp4'}" in lines
    assert "checks: coding, json, tools, streaming_tools, tool_result_recovery, " \
        "responses_subset, reasoning_leakage, retrieval, near_limit, quality, multimodal, " \
        "once per variant after the last run" in lines
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_a_bad_file_gives_one_line_per_problem(tmp_path: Path) -> None:
    (tmp_path / "performance.toml").write_text(
        (REPO / "scenarios" / "performance.toml").read_text())
    (tmp_path / "c").mkdir()
    bad = tmp_path / "c" / "bad.toml"
    bad.write_text(BAD)
    for extra in ((), ("--dry-run",)):
        proc = anvil("campaign", "run", str(bad), *extra, "--results-dir", str(tmp_path / "r"))
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out
        assert "Traceback" not in out and proc.stdout == ""
        assert proc.stderr.splitlines() == [
            f'anvil: {bad}: unknown key "colour"; allowed: name, scenario, runs_per_variant, '
            "placements, order, baseline, candidate, incumbent, facts, variants, gates, "
            "restoration, checks, reset_prefix_cache",
            f"anvil: {bad}: variants[2].host: missing; expected http(s)://HOST:PORT[/v1], "
            "e.g. http://127.0.0.1:8000",
            f"anvil: {bad}: gates.p99_magic: unknown gate; allowed: {', '.join(GATES)}",
        ]
        assert not (tmp_path / "r").exists()


def test_an_unset_api_key_variable_is_refused_before_any_run(tmp_path: Path) -> None:
    text = (REPO / EXAMPLE).read_text()
    text = text.replace('scenario = "../performance.toml"',
                        f'scenario = "{REPO / "scenarios" / "performance.toml"}"')
    text = text.replace('speculation = "off"\n', 'speculation = "off"\napi_key_env = '
                        '"ANVIL_TEST_UNSET_KEY"\n', 1)
    path = tmp_path / "c.toml"
    path.write_text(text)
    proc = anvil("campaign", "run", str(path), "--results-dir", str(tmp_path / "r"),
                 env={"ANVIL_TEST_UNSET_KEY": ""})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"anvil: {path}: variants[1].api_key_env: $ANVIL_TEST_UNSET_KEY is not set; export it "
        "(the API key of official-fp8/off) or remove api_key_env"]
    assert not (tmp_path / "r").exists()
