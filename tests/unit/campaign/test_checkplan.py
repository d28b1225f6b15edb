"""A campaign's [checks]: the table validated up front, the suites run once per variant
after the last run (after its before_run), kept when their file is there, and the summary's
functional and multimodal blocks and functional gate made from the files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from campaignbuild import FakeRunner, campaign_file, state

from anvil_metrics.campaign.checkplan import checks_file, parse_checks, read_checks
from anvil_metrics.campaign.runner import HookResult, run_campaign
from anvil_metrics.campaign.spec import load_campaign
from anvil_metrics.checks.suite import CheckOptions
from anvil_metrics.errors import UsageError
from anvil_metrics.summary.folder import read_campaign_folder, summary_document
from anvil_metrics.summary.functional import (
    VariantChecks,
    functional_block,
    gate_results,
    multimodal_block,
)

CHECKS = '\n[checks]\nsuites = ["json", "tools", "multimodal"]\ntransport = "cpu"\n'


def suite(result: str, passed: int, total: int, **extra: Any) -> dict[str, Any]:
    return {"result": result, "passed": passed, "total": total, "elapsed_s": 1.0,
            **extra, "cases": []}


def doc(spec: str, *, tools: tuple[int, int] = (20, 20), leak: bool = False,
        image_s: float = 2.0) -> dict[str, Any]:
    ok = tools[0] == tools[1]
    return {"schema": "anvil-serving.checks/v1", "model": "org/m", "options": {
        "transport": "cpu", "speculation": spec}, "checks": {
        "coding": suite("pass", 6, 6),
        "json": suite("pass", 5, 5),
        "tools": suite("pass" if ok else "fail", *tools),
        "reasoning_leakage": suite("fail" if leak else "pass", 3, 3,
                                   thinking_disabled_reasoning_leakage=leak),
        "retrieval": suite("pass", 4, 4, requested_context_tokens=131072),
        "near_limit": suite("pass", 1, 1, requested_context_tokens=389000,
                            request_elapsed_s=190.0 if spec == "off" else 196.4),
        "quality": suite("pass", 12, 12, parts={
            "intelligence": {"passed": 6, "total": 6}, "session": {"passed": 3, "total": 3},
            "tools": {"passed": 3, "total": 3}}),
        "multimodal": suite("pass", 2, 2, general_image_seconds=image_s, ocr_seconds=0.7,
                            not_tested=["video", "multi-image ordering"]),
    }}


def test_a_checks_file_is_read_only_when_it_is_one(tmp_path: Path) -> None:
    """A missing, damaged or foreign file is no checks document (the suites run again)."""
    path = tmp_path / "m+off.json"
    assert read_checks(path) is None
    path.write_bytes(orjson.dumps(doc("off"))[:-1])
    assert read_checks(path) is None
    path.write_bytes(orjson.dumps({**doc("off"), "schema": "x/v1"}))
    assert read_checks(path) is None
    path.write_bytes(orjson.dumps(doc("off")))
    assert read_checks(path) == doc("off")
    assert read_checks(tmp_path) is None  # a folder


def test_the_table_is_checked_with_one_line_per_problem() -> None:
    plan, problems = parse_checks({"suites": ["all"], "context_tokens": 65536})
    assert problems == [] and plan is not None and "near_limit" not in plan.suites
    assert plan.options.context_tokens == 65536 and plan.options.timeout_s == 120.0
    plan, problems = parse_checks({"suites": ["tools", "telepathy"], "seed": -1, "x": 1,
                                   "timeout_s": 0})
    assert plan is None
    assert problems[0] == 'checks: unknown key "x"; allowed: suites, context_tokens, ' \
        "near_limit_tokens, timeout_s, long_timeout_s, seed, transport, max_tokens"
    assert problems[1].startswith("checks.suites: ['tools', 'telepathy'] is not allowed; "
                                  "expected a non-empty list of suite names: all, coding")
    assert "checks.seed: -1 is not allowed; expected a whole number >= 0" in problems
    assert "checks.timeout_s: 0 is not allowed; expected seconds > 0" in problems


def test_a_functional_gate_without_checks_is_refused_before_any_run(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    path.write_text(path.read_text() + 'functional = "all_pass"\n')
    with pytest.raises(UsageError, match=r"gates.functional: needs a \[checks\] table"):
        load_campaign(path)


class FakeChecker:
    def __init__(self, fail_tools_for: str | None = None) -> None:
        self.calls: list[tuple[str, str, str | None, tuple[str, ...], CheckOptions]] = []
        self.fail_tools_for = fail_tools_for

    def __call__(self, host: str, model: str, key: str | None, suites: tuple[str, ...],
                 options: CheckOptions) -> dict[str, Any]:
        self.calls.append((host, model, key, suites, options))
        d = doc(options.speculation or "?", tools=(17, 20) if host == self.fail_tools_for
                else (20, 20))
        d["checks"] = {k: v for k, v in d["checks"].items() if k in suites}
        return d


def hook_log() -> tuple[list[tuple[str, dict[str, str]]], Any]:
    calls: list[tuple[str, dict[str, str]]] = []

    def hook(command: str, env: Mapping[str, str], timeout_s: float) -> HookResult:
        calls.append((command, dict(env)))
        return HookResult(0, False, "", 0.01)
    return calls, hook


def test_checks_run_once_per_variant_after_the_runs_and_are_kept(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, before_off='before_run = "./switch off"')
    path.write_text(path.read_text() + CHECKS)
    checker, (hooks, hook), lines = FakeChecker(), hook_log(), []
    out = run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={},
                       checker=checker, hook=hook, progress=lines.append)
    assert out.exit_code == 0 and out.checks_failed == ()
    assert [(c[0], c[1], c[3], c[4].speculation, c[4].transport) for c in checker.calls] == [
        ("http://127.0.0.1:9001/v1", "org/m", ("json", "tools", "multimodal"), "off", "cpu"),
        ("http://127.0.0.1:9002/v1", "org/m", ("json", "tools", "multimodal"), "on", "cpu")]
    # the off variant's before_run ran before each of its 2 runs and before its checks
    assert [env.get("ANVIL_CHECKS") for _, env in hooks] == [None, None, "1"]
    assert lines.index(next(x for x in lines if x.startswith("checks: m/off"))) > \
        lines.index(next(x for x in lines if x.startswith("run 4 of 4: m/on done")))
    folder = tmp_path / "c1"
    assert orjson.loads(checks_file(folder, "m", "on").read_bytes())["checks"]["tools"][
        "passed"] == 20
    s = state(tmp_path)["checks"]
    assert s["m/off"]["state"] == "done" and s["m/off"]["file"] == "checks/m+off.json"
    # a rerun keeps both files and asks nothing
    out = run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={},
                       checker=checker, hook=hook)
    assert out.ran == 0 and len(checker.calls) == 2
    assert state(tmp_path)["checks"]["m/on"]["kept"] is True


def test_a_failing_before_run_skips_the_variants_checks_and_is_said(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, before_off='before_run = "./switch off"')
    path.write_text(path.read_text() + CHECKS)

    def hook(command: str, env: Mapping[str, str], timeout_s: float) -> HookResult:
        return HookResult(3 if env.get("ANVIL_CHECKS") else 0, False, "no GPU", 0.01)
    checker = FakeChecker()
    out = run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={},
                       checker=checker, hook=hook)
    assert [c[4].speculation for c in checker.calls] == ["on"]
    assert out.exit_code == 1 and out.checks_failed[0][0] == "m/off"
    doc_ = summary_document(read_campaign_folder(tmp_path / "c1"))
    assert any(w.startswith("Checks of m/off were not made: ") and "before_run exited 3"
               in w for w in doc_["retained_failures"])


def test_the_summary_reads_the_checks_and_the_gate_follows(tmp_path: Path) -> None:
    path = campaign_file(tmp_path)
    path.write_text(path.read_text() + 'functional = "all_pass"\n' + CHECKS)
    run_campaign(load_campaign(path), tmp_path, runner=FakeRunner(), environ={},
                 checker=FakeChecker(fail_tools_for="http://127.0.0.1:9002/v1"))
    d = summary_document(read_campaign_folder(tmp_path / "c1"))
    assert d["functional"] == {"m": {"json": "pass", "tools": "17/20"}}
    assert d["multimodal"]["transport"] == "cpu" and d["multimodal"]["mtp_enabled"] is True
    assert d["multimodal"]["m"] == {"general_image_seconds": 2.0, "ocr_seconds": 0.7,
                                    "result": "pass"}
    assert "functional" not in d["not_included"] and "multimodal" not in d["not_included"]
    gate = next(g for g in d["gates"] if g["gate"] == "functional")
    assert gate["outcome"] == "fail" and gate["figures"]["failed"] == ["tools"]
    assert d["decision"] == "no-promotion"
    assert list(d).index("functional") == list(d).index("sampled_speculative_telemetry") + 1


def test_the_blocks_take_a_models_worst_variant_and_share_equal_models() -> None:
    checks = [VariantChecks("fp8", "off", doc("off")), VariantChecks("fp8", "mtp3", doc("on")),
              VariantChecks("nvfp4", "off", doc("off", image_s=1.0)),
              VariantChecks("nvfp4", "mtp3", doc("on", image_s=2.0))]
    f = functional_block(checks)
    assert f is not None and list(f) == ["both_models", "quality", "near_limit_retrieval"]
    assert f["both_models"] == {"coding": "pass", "json": "pass", "tools": "20/20",
                                "thinking_disabled_reasoning_leakage": False,
                                "retrieval_131k": "pass"}
    assert f["quality"]["fp8"] == {"intelligence": "6/6", "session": "3/3", "tools": "3/3"}
    assert f["near_limit_retrieval"] == {"requested_context_tokens": 389000,
                                         "fp8_elapsed_seconds": 193.2, "fp8": "pass",
                                         "nvfp4_elapsed_seconds": 193.2, "nvfp4": "pass"}
    m = multimodal_block(checks)
    assert m is not None and m["nvfp4"]["general_image_seconds"] == 1.5
    assert m["not_tested"] == ["video", "multi-image ordering"]
    # one variant leaks and one misses three tool cases: the model says so
    checks[3] = VariantChecks("nvfp4", "mtp3", doc("on", tools=(17, 20), leak=True))
    f = functional_block(checks)
    assert f is not None and "both_models" not in f
    assert f["nvfp4"]["tools"] == "17/20" and f["fp8"]["tools"] == "20/20"
    assert f["nvfp4"]["thinking_disabled_reasoning_leakage"] is True
    assert gate_results(checks, "nvfp4/mtp3") == {
        "coding": True, "json": True, "tools": False, "reasoning_leakage": False,
        "retrieval": True, "near_limit": True, "quality": True}
    assert gate_results(checks, "nvfp4/off") is not None
    assert gate_results([VariantChecks("a", "off", None)], "a/off") is None
