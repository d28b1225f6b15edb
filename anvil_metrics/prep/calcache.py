"""Prompt calibrations remembered per (endpoint, model, template switches, seed).

Calibrating by probes costs one prefill per count, and a 393k-token prefill can take
minutes; even with a tokenize endpoint, a campaign of runs recounts the same sizes. The
word counts a calibration found depend only on what the server's tokenizer and chat
template see, so they are stored in `<results>/.cache/calibration-<key>.json` and reused.

The key hashes everything that changes the count of a prompt of given words: the endpoint
(credentials stripped), the model, how the count was obtained, the system prompt, the body
fields the chat template reads (`chat_template_kwargs`, `reasoning_effort`), the seed and
the shared-prefix layout. A server that changed its tokenizer under the same name is not
detected by the key: each run still records the server's own count of every prompt (so the
error stays visible in `prompt_calibration`), and `--recalibrate` ignores the cache.
A damaged cache file is ignored, never fatal.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.jsonio import atomic_write_json
from anvil_metrics.prep.prompts import Calibration

CACHE_DIR = ".cache"
CACHE_VERSION = 1


@dataclass(frozen=True, slots=True)
class CachedCalibration:
    calibration: Calibration
    words: dict[int, int]  # planned size -> body words
    counted: dict[int, int]  # planned size -> the server's count when it was calibrated
    prefix_words: int | None


def cache_key(**parts: Any) -> tuple[str, dict[str, Any]]:
    """A short stable hash of `parts` (JSON-serialisable) and the parts themselves."""
    canon = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canon).hexdigest()[:16], parts


def _path(results_dir: str | Path, key: str) -> Path:
    return Path(results_dir) / CACHE_DIR / f"calibration-{key}.json"


def load(results_dir: str | Path, key: str) -> CachedCalibration | None:
    """The cached calibration for `key`, or None (absent, unreadable or another version)."""
    try:
        doc = orjson.loads(_path(results_dir, key).read_bytes())
        if doc.get("version") != CACHE_VERSION:
            return None
        cal = doc["calibration"]
        return CachedCalibration(
            Calibration(str(cal["method"]), float(cal["overhead_tokens"]),
                        float(cal["tokens_per_word"])),
            {int(k): int(v) for k, v in doc["words"].items()},
            {int(k): int(v) for k, v in doc.get("counted", {}).items()},
            None if doc.get("prefix_words") is None else int(doc["prefix_words"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(results_dir: str | Path, key: str, parts: dict[str, Any], entry: CachedCalibration
          ) -> Path | None:
    """Write (atomically) the calibration for `key`; None if the folder is not writable."""
    path = _path(results_dir, key)
    doc = {
        "version": CACHE_VERSION,
        "key": parts,
        "calibration": {"method": entry.calibration.method,
                        "overhead_tokens": entry.calibration.overhead_tokens,
                        "tokens_per_word": entry.calibration.tokens_per_word},
        "words": {str(k): v for k, v in sorted(entry.words.items())},
        "counted": {str(k): v for k, v in sorted(entry.counted.items())},
        "prefix_words": entry.prefix_words,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, doc)
    except OSError:
        return None
    return path
