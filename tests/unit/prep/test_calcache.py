"""Calibration cache and the unexpected prefix-cache-hit check."""

from __future__ import annotations

from pathlib import Path

from anvil_metrics.post import cachecheck
from anvil_metrics.prep import calcache
from anvil_metrics.prep.prompts import Calibration


def test_cache_round_trip_and_key_stability(tmp_path: Path) -> None:
    key, parts = calcache.cache_key(base_url="http://h:1/v1", model="m", seed=0, counter="x")
    key2, _ = calcache.cache_key(seed=0, counter="x", model="m", base_url="http://h:1/v1")
    assert key == key2  # order of the parts does not matter
    assert calcache.cache_key(base_url="http://h:1/v1", model="m2", seed=0, counter="x")[0] != key
    assert calcache.load(tmp_path, key) is None
    entry = calcache.CachedCalibration(Calibration("tokenize", 12.5, 1.77), {4096: 2300},
                                       {4096: 4097}, None)
    path = calcache.store(tmp_path, key, parts, entry)
    assert path is not None and path.parent == tmp_path / ".cache"
    assert calcache.load(tmp_path, key) == entry


def test_a_damaged_cache_file_is_ignored(tmp_path: Path) -> None:
    key, _ = calcache.cache_key(model="m")
    f = tmp_path / ".cache" / f"calibration-{key}.json"
    f.parent.mkdir()
    for text in ("{", "[]", '{"version": 1}', '{"version": 99, "words": {}}', "null"):
        f.write_text(text)
        assert calcache.load(tmp_path, key) is None, text


def test_store_in_an_unwritable_place_does_not_raise(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where the results folder should be
    entry = calcache.CachedCalibration(Calibration("probe", 0, 1.3), {}, {}, None)
    assert calcache.store(blocker, "k", {}, entry) is None


def _rows(cached: list[int | None]) -> list[dict]:
    out = []
    for c in cached:
        row = {"prompt_tokens": 4096}
        if c is not None:
            row["cached_tokens"] = c
        out.append(row)
    return out


def test_unexpected_cache_hits_are_reported_once_in_a_line() -> None:
    params = {"prompt_sizing": {"expected_shared_tokens": 20}}
    assert cachecheck.warning_for(_rows([0, 16, 80, None]), params) is None  # within slack
    line = cachecheck.warning_for(_rows([0, 4000, 2048]), params)
    assert line is not None and "\n" not in line
    assert "2 of 3 requests" in line and "4000 of 4096" in line
    # expected hits: shared-prefix mode, a reused nonce
    assert cachecheck.warning_for(_rows([4000]), {**params, "nonce_reused": True}) is None
    assert cachecheck.warning_for(_rows([4000]), {**params, "shared_prefix": {"x": 1}}) is None
    # a raw header without the figure (older runs): no claim either way
    assert cachecheck.warning_for(_rows([4000]), {}) is None


def test_the_column_check_gives_the_row_check_s_line() -> None:
    """`warning_for_columns` (what post-processing uses) says what `warning_for` says of the
    same rows, including a hit whose prompt_tokens is null and ties for the worst hit."""
    import numpy as np

    from anvil_metrics.post.derive import RowColumns

    params = {"prompt_sizing": {"expected_shared_tokens": 20}}
    cached = [None, 0, 4000, 85, 84, 4000, 2048, None]
    prompt = [4096, 4096, None, 4096, 4096, 5000, 4096, None]
    rows = []
    for c, p in zip(cached, prompt, strict=True):
        row = {"prompt_tokens": p}
        if c is not None:
            row["cached_tokens"] = c
        rows.append(row)
    columns = RowColumns(
        floats={}, usage_source=np.zeros(len(rows), dtype=bool),
        counts={"cached_tokens": np.array([c or 0 for c in cached]),
                "prompt_tokens": np.array([p or 0 for p in prompt])},
        present={"cached_tokens": np.array([c is not None for c in cached]),
                 "prompt_tokens": np.array([p is not None for p in prompt])})
    line = cachecheck.warning_for(rows, params)
    assert line is not None and "4 of 8 requests" in line and "4000 of None" in line
    assert cachecheck.warning_for_columns(columns, params) == line
    for other in ({**params, "nonce_reused": True}, {}):
        assert cachecheck.warning_for_columns(columns, other) is None
    quiet = {"prompt_sizing": {"expected_shared_tokens": 4000}}
    assert cachecheck.warning_for_columns(columns, quiet) is None
    assert cachecheck.warning_for(rows, quiet) is None
