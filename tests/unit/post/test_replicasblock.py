"""`post/replicasblock`: the `replicas` block counts each replica's rows and failures, its
latencies and the balance, and verify names a changed figure or a row's replica without
the block."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fullbench import full_benchmark

from anvil_metrics.post.replicasblock import summary_lines
from anvil_metrics.post.verify import verify_benchmark


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return full_benchmark(tmp_path_factory.mktemp("replicas"))


def test_the_block_counts_each_replicas_rows_and_failures(doc: dict[str, Any]) -> None:
    rows, failures = doc["request_timings"], doc["failures"]
    ends = doc["replicas"]["endpoints"]
    assert [e["url"] for e in ends] == ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]
    for k, e in enumerate(ends):
        assert e["completed"] == sum(r["replica"] == k for r in rows)
        assert e["failed"] == sum(f.get("replica") == k for f in failures)
        assert e["requests"] == e["completed"] + e["failed"] > 0
    counts = [e["requests"] for e in ends]
    assert doc["replicas"]["balance"] == max(counts) / min(counts)
    assert len(summary_lines(doc)) == 2 + len(ends)


@pytest.mark.parametrize("path,value", [(("balance",), 9.0),
                                        (("endpoints", 1, "failed"), 7),
                                        (("endpoints", 0, "ttft_p50_ms"), 123.0)])
def test_verify_names_a_changed_figure(doc: dict[str, Any], path: tuple, value: Any) -> None:
    assert verify_benchmark(doc) == []
    changed = orjson.loads(orjson.dumps(doc))
    target = changed["replicas"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert any(p.startswith(f"replicas.{'' if len(path) == 1 else 'endpoints['}")
               and path[-1] in p for p in verify_benchmark(changed))


def test_a_rows_replica_needs_the_block(doc: dict[str, Any]) -> None:
    changed = orjson.loads(orjson.dumps(doc))
    del changed["replicas"]
    assert any("replica: set, but the file has no replicas block" in p
               for p in verify_benchmark(changed))
