"""`anvil check` against real servers (`make test-real SERVER=...`): every suite runs to
completion within its time budget and reports honestly.

The tiny model (random weights wired to think, then babble; tests/realserver/
make_tiny_model.py) answers nothing correctly, so every semantic suite must come out
"fail" — a "pass" would mean a check passes by accident — and none may be an "error": the
server was up and answered every request. Two things behave as on a real model and are
pinned: with thinking disabled no reasoning leaks (vLLM's qwen3 parser; transformers
serve's one whitespace-only reasoning delta is not reasoning), and retrieval's prompts land
within ±0.5 % of their planned size by the server's own `usage.prompt_tokens`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import anvil, load_json

from anvil_metrics.checks.docverify import verify_checks

pytestmark = pytest.mark.real

SERVER = os.environ.get("ANVIL_REAL_SERVER", "")
URL = os.environ.get("ANVIL_REAL_URL", "")
MODEL = os.environ.get("ANVIL_REAL_MODEL", "")
# retrieval's context, near_limit's size and the whole command's budget, per server. A
# prefill near vLLM's 131,072-token limit takes this CPU build minutes (measured: in 8
# minutes retrieval at 128,000 had finished its two short sizing probes and one full-size
# probe and was still on the next; with 4 cases it needs over half an hour), so here both
# long suites run at sizes a CPU finishes within the budget; near_limit's size is given, as
# on a server that does not say its limit (transformers serve), and its seconds are
# reported all the same.
PLAN = {
    "vllm": {"suites": "all,near_limit", "context": 16384, "near": 24000, "budget_s": 600},
    "transformers": {"suites": "all,near_limit", "context": 8192, "near": 12000,
                     "budget_s": 480},
    "llama": {"suites": "all", "context": 16384, "budget_s": 480},
}


def test_every_suite_runs_and_reports_honestly(tmp_path: Path) -> None:
    plan = PLAN[SERVER]
    out = tmp_path / "checks.json"
    # the tiny model never stops on its own: 64 tokens per answer keep every suite within
    # its budget (a real model stops at its answer; --max-tokens is the user's cost cap)
    args = ["check", plan["suites"], "--host", URL, "--model", MODEL, "--out", str(out),
            "--timeout", "300", "--max-tokens", "64"]
    if plan.get("context"):
        args += ["--context", str(plan["context"])]
    if plan.get("near"):
        args += ["--near-limit", str(plan["near"])]
    t0 = time.monotonic()
    proc = anvil(*args, timeout=plan["budget_s"])
    took = time.monotonic() - t0
    print(f"\n[{SERVER}] anvil check in {took:.1f} s:\n{proc.stdout}{proc.stderr}")
    assert proc.returncode in (0, 1), proc.stderr
    doc = load_json(out)
    assert verify_checks(doc) == []
    checks = doc["checks"]
    for name, s in checks.items():
        assert s["result"] != "error", (name, s.get("error"), s["cases"][:2])
        # random weights answer nothing right: a pass would be a check passing by accident
        assert s["result"] == "fail", (name, s["cases"][:2])
    leak = checks["reasoning_leakage"]
    assert leak["thinking_disabled_reasoning_leakage"] is False, leak["cases"]
    for case in checks["retrieval"]["cases"]:
        planned, measured = case["planned_tokens"], case["prompt_tokens"]
        assert measured is not None and abs(measured - planned) <= 0.005 * planned, case
