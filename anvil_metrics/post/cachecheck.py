"""Did the server serve this run's prompts from its prefix cache when it should not have?

Each request's prompt is unique after a few tokens (`prompts.py`), so a server's prefix
cache can legitimately serve only the chat template header, the system prompt and the
start of the run's head line: `expected_shared_tokens` in the raw header. A request whose
`usage.prompt_tokens_details.cached_tokens` goes well beyond that had its prefill (partly)
skipped, so its TTFT and prefill rate do not measure what the run claims, e.g. a rerun
that reused a nonce by accident, or a server that caches across something we did not
expect. The run still stands; it says so.

Expected hits are not flagged: shared-prefix mode (the point of it), a reused nonce
(`--run-nonce`, on purpose) and conversations (each turn's history; the benchmark's
`conversation` block compares what was cached with what could be).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# cache block granularity differs per server (vLLM 16 tokens, others up to 64): a hit may
# round the legitimately shared head up by one block
BLOCK_SLACK_TOKENS = 64


def unexpected_hits(rows: Sequence[Mapping[str, Any]], expected_shared_tokens: int
                    ) -> list[Mapping[str, Any]]:
    """The rows whose `cached_tokens` exceed what the run's prompts could share."""
    return rows_above(rows, _limit(expected_shared_tokens))


def rows_above(rows: Sequence[Mapping[str, Any]], cached_limit: int) -> list[Mapping[str, Any]]:
    """The rows whose `cached_tokens` exceed `cached_limit` (a row without them has 0)."""
    return [r for r in rows if (r.get("cached_tokens") or 0) > cached_limit]


def expected_shared(params: Mapping[str, Any]) -> int | None:
    """How many tokens the run's prompts may share (`expected_shared_tokens`), or None
    when hits are expected (shared-prefix mode, a reused nonce) or were never counted."""
    if (params.get("nonce_reused") or params.get("shared_prefix")
            or params.get("conversation") or params.get("trace") or params.get("dataset")):
        return None  # (a conversation's history, a trace's blocks: their blocks compare)
    sizing = params.get("prompt_sizing") or {}
    expected = sizing.get("expected_shared_tokens")
    return expected if isinstance(expected, int) else None


def warning_for(rows: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str | None:
    """One line when cached tokens show hits the run's prompts should not have, else None."""
    expected = expected_shared(params)
    if expected is None:
        return None
    return _warning(unexpected_hits(rows, expected), len(rows), expected)


def warning_for_scan(scanned: Any, params: Mapping[str, Any]) -> str | None:
    """`warning_for` of a `docscan.ScannedBenchmark` scanned with `cached_above=limit(params)`
    (the same line)."""
    expected = expected_shared(params)
    if expected is None:
        return None
    return _warning(scanned.cached_hits, scanned.rows, expected)


def limit(params: Mapping[str, Any]) -> int | None:
    """The `cached_tokens` above which a row is an unexpected hit, or None (no check)."""
    expected = expected_shared(params)
    return None if expected is None else _limit(expected)


def _limit(expected: int) -> int:
    return expected + BLOCK_SLACK_TOKENS


def warning_for_columns(rows: Any, params: Mapping[str, Any]) -> str | None:
    """`warning_for` of the rows a `derive.RowColumns` holds (the same line)."""
    expected = expected_shared(params)
    if expected is None:
        return None
    counts, present = rows.counts, rows.present
    hit = present["cached_tokens"] & (counts["cached_tokens"] > _limit(expected))
    hits = [{"cached_tokens": c, "prompt_tokens": p if has else None} for c, p, has in zip(
        counts["cached_tokens"][hit].tolist(), counts["prompt_tokens"][hit].tolist(),
        present["prompt_tokens"][hit].tolist(), strict=True)]
    return _warning(hits, len(rows), expected)


def _warning(hits: Sequence[Mapping[str, Any]], total: int, expected: int) -> str | None:
    if not hits:
        return None
    worst = max(hits, key=lambda r: r["cached_tokens"])
    return (
        f"{len(hits)} of {total} requests were served partly from the server's prefix "
        f"cache (up to {worst['cached_tokens']} of {worst.get('prompt_tokens')} prompt tokens, "
        f"at most ~{expected} expected): their TTFT and prefill rate are not cold-prefill "
        "figures. Was the run nonce reused, or the same prompts sent earlier?"
    )


def header_params(raw_path: Path) -> dict[str, Any]:
    """The run's `params` from the first line of its `requests.jsonl` alone (a run of a
    million requests is not read to learn its header)."""
    import orjson

    with open(raw_path, "rb") as f:
        header = orjson.loads(f.readline())
    params = header.get("params") if isinstance(header, dict) else None
    return params if isinstance(params, dict) else {}


def run_params(run_dir: str | Path) -> dict[str, Any]:
    """`header_params` of a run folder's raw file, {} if it cannot be read (the check is
    never a failure of the run)."""
    try:
        return header_params(Path(run_dir) / "requests.jsonl")
    except Exception:  # noqa: BLE001 - a check, never a failure of the run
        return {}
