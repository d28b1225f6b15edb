"""`post/cancelblock`: the `cancel` block counts the failures of kind `aborted` by phase,
and verify names a changed figure, or an aborted failure without the block."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fullbench import full_benchmark

from anvil_metrics.post.cancelblock import build_cancel, summary_lines
from anvil_metrics.post.verify import verify_benchmark


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return full_benchmark(tmp_path_factory.mktemp("cancel"))


def test_the_block_is_the_aborted_failures(doc: dict[str, Any]) -> None:
    aborted = [f for f in doc["failures"] if f["kind"] == "aborted"]
    assert doc["cancel"]["aborted"] == len(aborted) == 1
    assert doc["cancel"]["share"] == 1 / doc["requests"]
    assert "decode 1" in summary_lines(doc)[0]
    fake = [{"kind": "aborted", "phase": p} for p in ("prefill", "prefill", "headers")]
    block = build_cancel({"rate": 0.5, "after": 30.0, "seed": 0}, fake + [{"kind": "x"}], 8)
    assert block["phases"] == {"headers": 1, "prefill": 2, "decode": 0}
    assert block["share"] == 3 / 8
    assert build_cancel({"rate": 1, "after": "prefill", "seed": 0}, [], 0)["share"] is None


@pytest.mark.parametrize("key,value", [("aborted", 2), ("share", 0.5),
                                       ("phases", {"headers": 0, "prefill": 1, "decode": 0})])
def test_verify_names_a_changed_figure(doc: dict[str, Any], key: str, value: Any) -> None:
    assert verify_benchmark(doc) == []
    changed = orjson.loads(orjson.dumps(doc))
    changed["cancel"][key] = value
    assert any(p.startswith(f"cancel.{key}:") for p in verify_benchmark(changed))


def test_an_aborted_failure_needs_the_block_and_a_plan_its_rules(doc: dict[str, Any]) -> None:
    changed = orjson.loads(orjson.dumps(doc))
    del changed["cancel"]
    assert any("kind 'aborted' in a file with no cancel block" in p
               for p in verify_benchmark(changed))
    changed = orjson.loads(orjson.dumps(doc))
    changed["cancel"]["plan"]["rate"] = 0
    assert any(p.startswith("cancel.plan:") for p in verify_benchmark(changed))
