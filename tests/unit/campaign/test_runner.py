"""The campaign's state logic, with a fake runner (it writes a real, verifying run folder)
and a fake before_run: plan order, campaign.json after each change, resume doing only what
is missing, interrupted folders moved aside, before_run failures recorded, secrets kept out
(the real before_run hook, bash, is tested in tests/e2e/test_campaign_run.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from campaignbuild import FakeRunner, campaign_file, state

from anvil_metrics.campaign.runner import (
    HookResult,
    api_key,
    run_campaign,
    without_credentials,
)
from anvil_metrics.campaign.spec import load_campaign
from anvil_metrics.errors import UsageError

REPO = Path(__file__).resolve().parents[3]









def test_all_runs_in_plan_order_and_their_state(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    runner, lines = FakeRunner(), []
    out = run_campaign(load_campaign(path), tmp_path / "res", runner=runner,
                       progress=lines.append, environ={})
    assert out.exit_code == 0 and out.done == 4 and out.ran == 4 and out.failed == ()
    assert [(k, vid) for k, vid, _ in runner.calls] == [(1, "m/off"), (2, "m/on"),
                                                         (3, "m/off"), (4, "m/on")]
    s = state(tmp_path / "res")
    assert s["schema"] == "anvil-campaign/v1" and s["name"] == "c1"
    assert s["campaign_file"] == str(path.resolve())
    assert s["campaign_toml"] == path.read_text()
    assert s["scenario_file"] == str(REPO / "scenarios" / "smoke.toml")
    assert [(r["k"], r["variant"], r["run_index"], r["placement"], r["state"], r["attempts"])
            for r in s["runs"]] == [(1, "m/off", 1, "first", "done", 1),
                                    (2, "m/on", 1, "first", "done", 1),
                                    (3, "m/off", 2, "swapped", "done", 1),
                                    (4, "m/on", 2, "swapped", "done", 1)]
    assert [r["folder"] for r in s["runs"]] == ["1-m-off-run1", "2-m-on-run1",
                                                "3-m-off-run2", "4-m-on-run2"]
    assert all(r["started_at"] and r["finished_at"] and r["failure"] is None
               and r["before_run"] is None for r in s["runs"])
    assert s["redone"] == []
    assert lines[0] == "run 1 of 4: m/off (placement first), ETA unknown until a run is done"
    assert lines[2].startswith("run 2 of 4: m/on (placement first), ETA ")
    assert "ETA unknown" not in lines[2]
    assert lines[1].startswith("run 1 of 4: m/off done in ")


def test_a_rerun_does_only_the_missing_runs(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(stop_at=2), environ={})
    s = state(tmp_path)
    assert [r["state"] for r in s["runs"]] == ["done", "pending", "pending", "pending"]
    assert s["runs"][1]["started_at"] is not None and s["runs"][2]["started_at"] is None
    first = (tmp_path / "c1" / "1-m-off-run1" / "benchmark.json").read_bytes()

    runner = FakeRunner()
    out = run_campaign(load_campaign(path), tmp_path, runner=runner, environ={})
    assert out.exit_code == 0 and out.ran == 3
    assert [k for k, _, _ in runner.calls] == [2, 3, 4]
    assert (tmp_path / "c1" / "1-m-off-run1" / "benchmark.json").read_bytes() == first
    s = state(tmp_path)
    assert [r["attempts"] for r in s["runs"]] == [1, 2, 1, 1]
    assert s["redone"] == [{"folder": "2-m-on-run1", "reason": "interrupted: no benchmark.json; "
                            "moved to .redone/2-m-on-run1.1"}]
    assert (tmp_path / "c1" / ".redone" / "2-m-on-run1.1" / "requests.jsonl").exists()
    # a third invocation has nothing to do
    runner = FakeRunner()
    assert run_campaign(load_campaign(path), tmp_path, runner=runner, environ={}).ran == 0
    assert runner.calls == []


def test_a_benchmark_that_does_not_verify_is_redone(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={})
    bench = tmp_path / "c1" / "3-m-off-run2" / "benchmark.json"
    bench.write_bytes(bench.read_bytes().replace(b'"completed": 3', b'"completed": 2'))
    runner = FakeRunner()
    assert run_campaign(load_campaign(path), tmp_path, runner=runner, environ={}).ran == 1
    assert [k for k, _, _ in runner.calls] == [3]
    (redone,) = state(tmp_path)["redone"]
    assert redone["folder"] == "3-m-off-run2"
    assert redone["reason"].startswith("was done: benchmark.json does not verify (")


def test_a_failed_run_is_named_and_the_campaign_goes_on(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    out = run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(fail={2}), environ={})
    assert out.exit_code == 1 and out.done == 3
    assert out.failed == (("2-m-on-run1", "the server could not be reached"),)
    assert [r["state"] for r in state(tmp_path)["runs"]] == ["done", "failed", "done", "done"]
    # rerun: the failed run is the missing one; its folder is kept aside
    runner = FakeRunner()
    assert run_campaign(load_campaign(path), tmp_path, runner=runner, environ={}).exit_code == 0
    assert [k for k, _, _ in runner.calls] == [2]
    assert state(tmp_path)["redone"][0]["reason"].startswith("failed: no benchmark.json")


def test_a_failing_before_run_fails_its_run_only(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, before_off='before_run = "switch"')
    seen: list[tuple[str, dict[str, str], float]] = []

    def hook(command: str, env: Mapping[str, str], timeout_s: float) -> HookResult:
        seen.append((command, dict(env), timeout_s))
        status = 3 if env["ANVIL_RUN_INDEX"] == "2" else 0
        return HookResult(status, False, "switching\nno GPU free\n", 0.25)

    runner = FakeRunner()
    out = run_campaign(load_campaign(path), tmp_path, runner=runner, hook=hook, environ={},
                       before_run_timeout_s=42)
    assert out.exit_code == 1
    assert out.failed == (("3-m-off-run2", "before_run exited 3 after 0.2 s: no GPU free"),)
    assert [k for k, _, _ in runner.calls] == [1, 2, 4]
    assert seen == [("switch", {"ANVIL_VARIANT": "m/off", "ANVIL_RUN_INDEX": "1",
                                "ANVIL_PLACEMENT": "first"}, 42),
                    ("switch", {"ANVIL_VARIANT": "m/off", "ANVIL_RUN_INDEX": "2",
                                "ANVIL_PLACEMENT": "swapped"}, 42)]
    runs = state(tmp_path)["runs"]
    assert runs[2]["before_run"] == {"command": "switch", "exit_status": 3, "timed_out": False,
                                     "output_tail": "switching\nno GPU free\n", "seconds": 0.25}
    assert runs[0]["before_run"]["exit_status"] == 0 and runs[1]["before_run"] is None
    assert not (tmp_path / "c1" / "3-m-off-run2").exists()  # never run


def test_a_missing_api_key_is_refused_before_any_run(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, key_on='api_key_env = "C1_KEY"')
    runner = FakeRunner()
    with pytest.raises(UsageError) as info:
        run_campaign(load_campaign(path), tmp_path, runner=runner, environ={})
    assert str(info.value) == (f"{path}: variants[2].api_key_env: $C1_KEY is not set; export "
                               "it (the API key of m/on) or remove api_key_env")
    assert runner.calls == [] and not (tmp_path / "c1").exists()


def test_the_key_never_reaches_the_state(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, before_off='before_run = "x"', key_on='api_key_env = "K"')

    def hook(command: str, env: Mapping[str, str], timeout_s: float) -> HookResult:
        return HookResult(1, False, "token sk-secret-123 rejected", 0.1)

    run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), hook=hook,
                 environ={"K": "sk-secret-123"})
    text = (tmp_path / "c1" / "campaign.json").read_text()
    assert "sk-secret-123" not in text and "token *** rejected" in text


def test_a_changed_campaign_file_is_refused(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(fail={1, 2, 3, 4}),
                 environ={})
    path.write_text(path.read_text().replace("e2e_p50_improvement_percent = 10",
                                             "e2e_p50_improvement_percent = 12"))
    runner = FakeRunner()
    with pytest.raises(UsageError, match="its text differs from the one") as info:
        run_campaign(load_campaign(path), tmp_path, runner=runner, environ={})
    assert len(str(info.value).splitlines()) == 1 and runner.calls == []


def test_a_damaged_state_is_refused_in_one_line(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={})
    (tmp_path / "c1" / "campaign.json").write_text('{"schema": ')
    with pytest.raises(UsageError) as info:
        run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={})
    said = str(info.value)
    assert said.startswith(f"{tmp_path / 'c1' / 'campaign.json'} is not strict JSON (")
    assert "line 1 column 12" in said and said.endswith("move it away to start the "
                                                         "campaign again")
    assert "\n" not in said


def test_credentials_are_stripped_from_the_stored_text() -> None:
    assert without_credentials('host = "http://u:pw@127.0.0.1:8000"\nx = "https://k@h/v1"') == (
        'host = "http://127.0.0.1:8000"\nx = "https://h/v1"')


def restoring(results: list[str]):
    """A fake restoration check answering `results` in turn ("pass"/"fail"), recording the
    campaigns it was asked for."""
    from anvil_metrics.campaign.restoration import AliasCheck, RestorationResult
    asked: list[tuple[str, ...]] = []

    def restore(campaign, environ) -> RestorationResult:
        asked.append(campaign.restoration_aliases)
        ok = results[len(asked) - 1] == "pass"
        return RestorationResult("http://127.0.0.1:9002/v1", tuple(
            AliasCheck(a, True, ok, 3 if ok else 4, 503, "POST /v1/chat/completions",
                       None if ok else "POST /v1/chat/completions: HTTP 503 again, after a "
                       "retry")
            for a in campaign.restoration_aliases))
    return restore, asked


def test_restoration_is_checked_after_the_last_run_and_rechecked(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    path.write_text(path.read_text() + '\n[restoration]\naliases = ["llm.primary"]\n')
    restore, asked = restoring(["pass", "fail"])
    lines: list[str] = []
    out = run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={},
                       restore=restore, progress=lines.append)
    assert asked == [("llm.primary",)] and out.restoration == "pass" and out.exit_code == 0
    rec = state(tmp_path)["restoration"]
    assert rec["result"] == "pass" and rec["checked_at"].endswith("Z")
    assert rec["aliases"][0]["alias"] == "llm.primary"
    assert rec["aliases"][0]["retried_after"] == 503
    assert lines[-2] == "restoration: asking llm.primary at http://127.0.0.1:9002/v1"
    assert lines[-1] == "restoration: llm.primary answered (answered 503 once, then retried)"
    # a rerun of the finished campaign runs nothing and checks again
    out = run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={},
                       restore=restore)
    assert out.ran == 0 and len(asked) == 2 and out.restoration == "fail"
    assert out.exit_code == 1 and state(tmp_path)["restoration"]["result"] == "fail"


def test_an_interrupted_rerun_drops_the_old_check(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    path.write_text(path.read_text() + '\n[restoration]\naliases = ["a"]\n')
    restore, asked = restoring(["pass"])
    run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={},
                 restore=restore)
    (tmp_path / "c1" / "4-m-on-run2" / "benchmark.json").unlink()
    with pytest.raises(KeyboardInterrupt):
        run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(stop_at=4), environ={},
                     restore=restore)
    assert "restoration" not in state(tmp_path) and len(asked) == 1


def test_without_aliases_nothing_is_checked(tmp_path: Path) -> None:
    restore, asked = restoring([])
    out = run_campaign(load_campaign(campaign_file(tmp_path)), tmp_path, runner=FakeRunner(),
                       environ={}, restore=restore)
    assert asked == [] and out.restoration is None and "restoration" not in state(tmp_path)


def test_the_check_asks_with_the_candidates_key(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import anvil_metrics.campaign.runner as cr
    path = campaign_file(tmp_path, key_on='api_key_env = "K"')
    path.write_text(path.read_text() + '\n[restoration]\naliases = ["a"]\n')
    seen: list[tuple[str, tuple[str, ...], dict[str, str]]] = []
    monkeypatch.setattr(cr, "check_aliases", lambda url, aliases, headers: seen.append(
        (url, aliases, headers)))
    cr.check_restoration(load_campaign(path), {"K": "sk-k"})
    assert seen == [("http://127.0.0.1:9002/v1", ("a",), {"Authorization": "Bearer sk-k"})]


def test_a_variants_key_is_its_variable_else_its_urls_password(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, key_on='api_key_env = "K"')
    path.write_text(path.read_text().replace("http://127.0.0.1:9001", "http://u:pw@127.0.0.1:9001")
                    .replace("http://127.0.0.1:9002", "http://u:url-key@127.0.0.1:9002"))
    off, on = load_campaign(path).variants
    assert api_key(off, {"K": "sk-k"}) == "pw"  # no api_key_env: the URL's
    assert api_key(on, {"K": "sk-k"}) == "sk-k"  # the variable first
    assert api_key(on, {"K": ""}) == "url-key"  # an empty variable: the URL's


def test_a_run_whose_every_request_failed_is_a_failed_run(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The real runner: a run that exited 4 (every measured request failed) is a failed
    run, named by the verdict's line (`post.outcome`); one that exited 0 is done."""
    import orjson

    from anvil_metrics.campaign.runner import locust_runner
    from anvil_metrics.campaign.spec import Variant
    from anvil_metrics.runs import launch

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "benchmark.json").write_bytes(orjson.dumps(
        {"requests": 2, "failures": [{"request_index": i, "kind": "timeout"} for i in (0, 1)]}))
    codes = iter([4, 0])
    monkeypatch.setattr(launch, "run_scenario", lambda *a, **k: launch.RunResult(
        run_dir, run_dir / "benchmark.json", next(codes), run_dir / "locust.log"))
    campaign = load_campaign(campaign_file(tmp_path))
    run = locust_runner(campaign, {})
    variant: Variant = campaign.variants[0]
    assert run(None, variant, run_dir) == (  # type: ignore[arg-type]
        "anvil: every one of the 2 measured requests failed (2 timeout); see "
        "benchmark.json's failures")
    assert run(None, variant, run_dir) is None  # type: ignore[arg-type]
