"""`post/mixblock`: the `mix` block is its rows' counts and figures by class and model, and
verify names a changed figure at its own path."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fullbench import full_benchmark

from anvil_metrics.post.mixblock import summary_lines
from anvil_metrics.post.verify import verify_benchmark


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return full_benchmark(tmp_path_factory.mktemp("mix"))


def test_each_group_counts_its_rows_and_shares_them(doc: dict[str, Any]) -> None:
    rows = doc["request_timings"]
    block = doc["mix"]
    for key, column in (("classes", "class_index"), ("models", "model_index")):
        for i, g in enumerate(block[key]):
            mine = [r for r in rows if r[column] == i]
            assert g["requests"] == len(mine)
            assert g["share"] == len(mine) / len(rows)
            assert g["output_tokens_mean"] == (
                sum(r["output_tokens"] for r in mine) / len(mine) if mine else None)
    assert [c["expected_share"] for c in block["classes"]] == [0.25, 0.75]
    # model "c" is class b's own (0.75); the round-robin's two share class a's 0.25
    assert [m["expected_share"] for m in block["models"]] == [0.125, 0.125, 0.75]
    lines = summary_lines(doc)
    assert lines[0].startswith("class") and any(line.startswith("lora") for line in lines)


@pytest.mark.parametrize("path", [("classes", 0, "requests"), ("models", 2, "share"),
                                  ("classes", 1, "e2e_p50_ms")])
def test_verify_names_a_changed_figure(doc: dict[str, Any], path: tuple) -> None:
    assert verify_benchmark(doc) == []
    changed = orjson.loads(orjson.dumps(doc))
    key, i, field = path
    g = changed["mix"][key][i]
    g[field] = (g[field] or 0) + 1
    problems = verify_benchmark(changed)
    assert any(p.startswith(f"mix.{key}[{i}].{field}:") for p in problems), problems


def test_rows_that_name_a_class_need_the_block(doc: dict[str, Any]) -> None:
    changed = orjson.loads(orjson.dumps(doc))
    del changed["mix"]
    problems = verify_benchmark(changed)
    assert any("class_index: set, but the file has no mix block" in p for p in problems)
