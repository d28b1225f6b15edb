"""cachecheck: unexpected prefix-cache hits, named in one line, and only when the run's
prompts should not have shared them.

Why: a hit the prompts should not have skips prefill, so the run's TTFT and prefill rate
are no longer cold figures; a check that stays silent publishes them as if they were, and
one that speaks for expected hits (shared-prefix mode, a reused nonce) cries wolf.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from anvil_metrics.post import cachecheck
from anvil_metrics.post.derive import RowColumns


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


def test_the_limit_is_the_expected_share_plus_one_block() -> None:
    params = {"prompt_sizing": {"expected_shared_tokens": 20}}
    assert cachecheck.expected_shared(params) == 20
    assert cachecheck.limit(params) == 20 + cachecheck.BLOCK_SLACK_TOKENS
    assert cachecheck.expected_shared({"prompt_sizing": {"expected_shared_tokens": "20"}}) is None
    rows = _rows([84, 85, None])
    assert cachecheck.unexpected_hits(rows, 20) == [rows[1]]
    assert cachecheck.rows_above(rows, 0) == rows[:2]


def test_the_params_are_read_from_the_header_line_alone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "requests.jsonl").write_bytes(b'{"type": "run", "params": {"a": 1}}\n{not json\n')
    assert cachecheck.header_params(run / "requests.jsonl") == {"a": 1}
    assert cachecheck.run_params(run) == {"a": 1}
    assert cachecheck.run_params(tmp_path / "nowhere") == {}
    (run / "requests.jsonl").write_bytes(b'{"type": "run", "params": [1]}\n')
    assert cachecheck.run_params(run) == {}
