"""`anvil check multimodal` against real simulator processes: it passes on the scripted
simulator, fails in each way the script can answer wrong, fails (never errors) on the
ordinary text-only simulator and errors when nothing listens."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import GONE_SINCE, anvil, load_json, set_script_faults
from simfork import start_simulator

from anvil_metrics.checks.runner import run_checks
from anvil_metrics.checks.suite import CheckOptions

NOT_TESTED = ["video", "multi-image ordering", "32-image ceiling", "concurrency above one",
              "host-memory pressure"]


@pytest.fixture(scope="module")
def scripted() -> Iterator[str]:
    with start_simulator(["--script"]) as sim:
        yield sim.url


def set_faults(url: str, faults: list[str]) -> None:
    set_script_faults(url, faults)


def check(url: str, faults: list[str] | None = None, **options: Any) -> dict[str, Any]:
    if faults is not None:
        set_faults(url, faults)
    doc = run_checks(url, ["multimodal"], options=CheckOptions(**options))
    return doc["checks"]["multimodal"]


def by_id(suite: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in suite["cases"]}


def test_the_cli_passes_on_the_scripted_simulator(scripted: str, tmp_path: Path) -> None:
    set_faults(scripted, [])
    out = tmp_path / "checks.json"
    proc = anvil("check", "multimodal", "--host", scripted, "--out", str(out),
                 "--transport", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    suite = load_json(out)["checks"]["multimodal"]
    assert (suite["result"], suite["passed"], suite["total"]) == ("pass", 4, 4)
    assert suite["transport"] == "cpu" and suite["not_tested"] == NOT_TESTED
    assert suite["general_image_seconds"] >= 0 and suite["ocr_seconds"] >= 0
    assert set(by_id(suite)) == {"scene_1", "scene_2", "ocr_1", "ocr_2"}
    assert all(c["prompt_tokens"] > 256 for c in suite["cases"])


def test_another_seed_draws_other_images_and_still_passes(scripted: str) -> None:
    zero = check(scripted, [])
    one = check(scripted, seed=1)
    assert zero["result"] == one["result"] == "pass" and one["transport"] is None
    assert [c["expected"] for c in zero["cases"]] != [c["expected"] for c in one["cases"]]


def test_a_wrong_count_fails_the_scenes_only(scripted: str) -> None:
    suite = check(scripted, ["multimodal:wrong_count"])
    cases = by_id(suite)
    assert suite["result"] == "fail"
    assert not cases["scene_1"]["passed"] and not cases["scene_2"]["passed"]
    assert "counted" in cases["scene_1"]["error"]
    assert cases["ocr_1"]["passed"] and cases["ocr_2"]["passed"]
    assert suite["general_image_seconds"] is not None  # a wrong answer is still an answer


def test_a_misread_text_fails_the_ocr_only(scripted: str) -> None:
    suite = check(scripted, ["multimodal:wrong_text"])
    cases = by_id(suite)
    assert suite["result"] == "fail"
    assert cases["scene_1"]["passed"] and cases["scene_2"]["passed"]
    assert not cases["ocr_1"]["passed"] and not cases["ocr_2"]["passed"]


def test_a_refused_image_fails_and_times_nothing(scripted: str) -> None:
    suite = check(scripted, ["multimodal:refuse"])
    assert suite["result"] == "fail" and suite["passed"] == 0
    assert all(c["error_kind"] == "refused" for c in suite["cases"])
    assert suite["general_image_seconds"] is None and suite["ocr_seconds"] is None


def test_the_text_only_simulator_fails_never_errors() -> None:
    with start_simulator([]) as sim:
        suite = check(sim.url)
    assert suite["result"] == "fail" and suite["passed"] == 0
    assert all(c["error_kind"] == "refused" and "only text content parts" in c["error"]
               for c in suite["cases"])


def test_a_down_server_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc = run_checks(f"http://127.0.0.1:{port}", ["multimodal"], model="m",
                     options=CheckOptions(timeout_s=5), ask=GONE_SINCE)
    suite = doc["checks"]["multimodal"]
    assert suite["result"] == "error" and suite["total"] == 4
    assert all(c["error_kind"] == "transport" for c in suite["cases"])
