"""Calibration cache: a stored calibration read back, a damaged or unwritable cache ignored."""

from __future__ import annotations

from pathlib import Path

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
