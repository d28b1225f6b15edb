"""`tests/shards.py`, the runner `make test` uses: how files are dealt, the shards'
environment, and that a run with no tests fails."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import shards  # noqa: E402


def test_files_are_dealt_longest_first_to_the_least_loaded_shard() -> None:
    weights = {"a": 10.0, "b": 7.0, "c": 5.0, "d": 4.0, "e": 3.0}
    dealt = shards.deal(list(weights), weights, 2)
    assert sorted(f for s in dealt for f in s.files) == sorted(weights)  # each once
    # a->0, b->1, c->1 (7 < 10), d->0 (12 > 10), e->1 (12 < 14)
    assert [s.files for s in dealt] == [["a", "d"], ["b", "c", "e"]]
    assert [s.weight_s for s in dealt] == [14.0, 15.0]


def test_a_file_without_a_recorded_time_weighs_the_median() -> None:
    dealt = shards.deal(["new", "x", "y", "z"], {"x": 1.0, "y": 2.0, "z": 9.0}, 1)
    assert dealt[0].weight_s == 1.0 + 2.0 + 9.0 + 2.0


def test_one_bytecode_cache_for_every_shard_where_python_writes_none(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    env = shards.shard_env(tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pycache")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    assert "PYTHONPYCACHEPREFIX" not in shards.shard_env(tmp_path)  # left as it is


def test_a_run_that_collects_no_test_fails(capsys, monkeypatch) -> None:
    monkeypatch.setattr(shards, "test_files", lambda: ["tests/test_shards.py"])
    code = shards.main(["--jobs", "1", "-k", "no_test_is_named_like_this_at_all"])
    assert code == shards.NO_TESTS
    assert "no tests ran" in capsys.readouterr().err
