"""`tests/shards.py`, the runner `make test` uses, and `tests/claims.py`, how its shards share
the files out: the order, the claim, every test run once, the shards' environment, and that a
run with no tests fails."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import claims  # noqa: E402
import shards  # noqa: E402


def skip_speed_check(monkeypatch) -> None:
    """`main` first times 10M additions to print the machine's speed beside the suite's time
    (`shards.speed_s`): ~0.9 CPU-s a call that no test here reads, so a constant stands in."""
    monkeypatch.setattr(shards, "speed_s", lambda: 0.0)


def test_files_are_ordered_longest_first_and_an_unrecorded_one_first_of_all() -> None:
    weights = {"a": 10.0, "b": 7.0, "c": 5.0, "d": 4.0}
    assert shards.order(["d", "new", "b", "a", "c"], weights) == ["new", "a", "b", "c", "d"]


def test_a_file_is_claimed_by_one_caller_only(tmp_path: Path) -> None:
    assert claims.claim(tmp_path, "tests/unit/test_x.py") is True
    assert claims.claim(tmp_path, "tests/unit/test_x.py") is False
    assert claims.claim(tmp_path, "tests/unit/test_y.py") is True


def test_every_test_runs_once_in_one_of_the_shards(tmp_path: Path, monkeypatch,
                                                     capsys) -> None:
    files = ["tests/unit/test_jsonio.py", "tests/unit/post/test_stats.py"]
    monkeypatch.setattr(shards, "test_files", lambda: files)
    skip_speed_check(monkeypatch)
    assert shards.main(["--jobs", "2", "--keep", str(tmp_path)]) == 0
    ran = [case.get("classname") + "::" + case.get("name")
           for i in (0, 1) for case in ET.parse(tmp_path / f"shard-{i}.xml").iter("testcase")]
    assert len(ran) == len(set(ran)) > 0  # nothing twice
    assert {shards._file_of(name.split("::")[0]) for name in ran} == set(files)  # each file
    by_shard = [shards.read_junit(tmp_path / f"shard-{i}.xml").by_file_s for i in (0, 1)]
    assert not set(by_shard[0]) & set(by_shard[1])  # a file is run whole, in one shard
    assert f"{len(ran)} tests: 0 failed" in capsys.readouterr().out


def test_one_bytecode_cache_for_every_shard_where_python_writes_none(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    env = shards.shard_env(tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    kept = Path(sys.prefix) / "anvil-pycache"  # in the venv, kept between runs
    assert env["PYTHONPYCACHEPREFIX"] == str(kept if sys.prefix != sys.base_prefix
                                             else tmp_path / "pycache")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    assert "PYTHONPYCACHEPREFIX" not in shards.shard_env(tmp_path)  # left as it is


def test_a_run_that_collects_no_test_fails(capsys, monkeypatch) -> None:
    monkeypatch.setattr(shards, "test_files", lambda: ["tests/test_shards.py"])
    skip_speed_check(monkeypatch)
    code = shards.main(["--jobs", "1", "-k", "no_test_is_named_like_this_at_all"])
    assert code == shards.NO_TESTS
    assert "no tests ran" in capsys.readouterr().err
