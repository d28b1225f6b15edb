"""serversteady: each server's (each role's) steady state from its own gauges, the window's
halves compared by the rank test; built into the roles and recomputed by verify."""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson

from anvil_metrics.post.serversteady import MIN_SAMPLES, halves, judge
from anvil_metrics.post.significance import mann_whitney
from anvil_metrics.telemetry.serverfields import ServerSteady
from anvil_metrics.telemetry.servermetrics import ClientFigures, server_block
from anvil_metrics.telemetry.serverroles import check_role_files, with_roles
from tests.unit.telemetry.test_servermetrics import vllm

N = 20  # samples in each synthetic window
STEADY_RUNNING = [8.0, 8, 7, 8, 8, 8, 8, 7, 8, 8, 8, 8, 8, 7, 8, 8, 8, 8, 8, 8]
GROWING_WAITING = [0.0] * 10 + [3.0, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # a queue that builds


def test_a_gauge_that_holds_is_steady_and_one_that_grows_drifts() -> None:
    verdict, why = judge({"requests_running": STEADY_RUNNING,
                          "requests_waiting": [0.0] * N}, N)
    assert why == "" and verdict is not None
    assert verdict["verdict"] == "steady" and verdict["samples"] == N
    run = verdict["gauges"]["requests_running"]
    assert (run["first_p50"], run["second_p50"], run["moved"]) == (8.0, 8.0, False)
    assert run["p_value"] == mann_whitney(STEADY_RUNNING[10:], STEADY_RUNNING[:10]).p_two_sided
    assert verdict["gauges"]["requests_waiting"]["p_value"] == 1.0  # every value tied
    msgspec.convert(verdict, ServerSteady)  # what it builds is what the definition says

    verdict, _ = judge({"requests_running": STEADY_RUNNING, "requests_waiting": GROWING_WAITING},
                       N)
    assert verdict is not None and verdict["verdict"] == "drifting"
    wait = verdict["gauges"]["requests_waiting"]
    # nearest-rank p50 of 10 values is the 5th: 0, and 7 of 3..12
    assert (wait["first_p50"], wait["second_p50"], wait["moved"]) == (0.0, 7.0, True)
    assert wait["p_value"] < 0.001
    assert verdict["reason"].startswith("requests_waiting: p50 0 in the window's first half, "
                                        "7 in its second")


def test_a_small_move_or_one_within_noise_is_not_drift() -> None:
    # 8 → 9: one request, 12.5 %, beyond noise: moved
    small = halves([8.0] * 10 + [9.0] * 10)
    assert small is not None and small["second_p50"] == 9.0 and small["moved"] is True
    tiny = halves([100.0] * 10 + [105.0] * 10)  # 5 %: a change, not one worth calling
    assert tiny is not None and tiny["p_value"] < 0.001 and tiny["moved"] is False
    noisy = halves([0.0, 5.0] * 5 + [5.0, 0.0] * 5)  # halves alike in rank
    assert noisy is not None and noisy["moved"] is False and noisy["p_value"] > 0.5


def test_too_few_samples_is_null_and_no_gauge_is_unknown() -> None:
    verdict, why = judge({"requests_running": [1.0] * 13, "requests_waiting": []}, 13)
    assert verdict is None and why.startswith("too few metrics samples in the window to "
                                              "judge: 13 (at least 14")
    assert MIN_SAMPLES == 14
    verdict, _ = judge({"requests_running": [], "requests_waiting": []}, N)
    assert verdict is not None and verdict["verdict"] == "unknown"
    assert verdict["gauges"] == {"requests_running": None, "requests_waiting": None}


def _role_file(folder: Path, role: str, running: list[float], waiting: list[float]) -> None:
    """A role's samples file: one vLLM scrape per value, the first and last marked."""
    lines = [{"type": "scrape", "url": f"http://{role}/metrics"}]
    for i, (r, w) in enumerate(zip(running, waiting, strict=True)):
        mark = "first" if i == 0 else "last" if i == len(running) - 1 else None
        series = vllm(r, w, 0.5, 0, 0, 0, (0.1 * i, i), (0.3 * i, i), (0.0, i),
                      (10.0 * i, i), (4.0 * i, i))
        lines.append({"type": "sample", "seq": i, "t_ns": i, "done_ns": i, "mark": mark,
                      "ok": True, "series": series})
    (folder / f"server_metrics.{role}.jsonl").write_bytes(
        b"".join(orjson.dumps(x) + b"\n" for x in lines))


def test_each_role_gets_its_own_verdict_and_verify_recomputes_it(tmp_path: Path) -> None:
    _role_file(tmp_path, "prefill", STEADY_RUNNING, [0.0] * N)
    _role_file(tmp_path, "decode", STEADY_RUNNING, GROWING_WAITING)
    _role_file(tmp_path, "router", [1.0] * 5, [0.0] * 5)
    top = server_block({"engine": "vllm", "version": None, "max_model_len": None,
                        "metrics_url": None}, None, ClientFigures(None, None, 0, 0.0, 0),
                       None, "scraped per role: see roles")
    params = {"roles": {r: f"http://{r}/metrics" for r in ("prefill", "decode", "router")}}
    block = with_roles(top, params, tmp_path, None, judge)
    roles = block["roles"]
    assert roles["prefill"]["steady_state"]["verdict"] == "steady"
    assert roles["decode"]["steady_state"]["verdict"] == "drifting"
    assert roles["router"]["steady_state"] is None
    assert roles["router"]["null_reasons"]["steady_state"].startswith("too few metrics "
                                                                      "samples")
    problems: list[str] = []
    check_role_files({"server": block}, None, tmp_path, problems, judge)
    assert problems == []
    roles["decode"]["steady_state"]["verdict"] = "steady"  # a verdict edited is caught
    check_role_files({"server": block}, None, tmp_path, problems, judge)
    assert len(problems) == 1 and problems[0].startswith("server.roles.decode.steady_state: ")
