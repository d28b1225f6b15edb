"""`post/jobsblock`: the `jobs` block's typed definition decodes a whole block and refuses
a field out of its bounds or its words (the build and verify are tested beside them)."""

from __future__ import annotations

import msgspec
import pytest

from anvil_metrics.post.jobsblock import INVALID_OVERFLOW_SHARE, Jobs

BLOCK = {"start_at": "first", "started": 3, "completed": 2, "cut": 1,
         "latency_p50_ms": 900.0, "latency_p95_ms": 1200.0, "latency_p99_ms": 1200.0,
         "jobs_per_hour": 720.0, "gpus": None, "jobs_per_hour_per_gpu": None,
         "model_share": 0.5, "tool_share": 0.3, "join_share": 0.15, "other_share": 0.05,
         "requests_per_job": 6.0, "prompt_tokens_per_job": 30000.0,
         "output_tokens_per_job": 600.0, "expected_reuse": 0.8, "reported_reuse": 0.79,
         "expected_reuse_p50": 0.8, "reported_reuse_p50": None, "requests": 14,
         "context_overflows": 0, "overflow_share": 0.0, "validity": "valid"}


def test_a_whole_block_decodes() -> None:
    jobs = msgspec.convert(BLOCK, Jobs)
    assert jobs.completed == 2 and jobs.reported_reuse_p50 is None
    assert INVALID_OVERFLOW_SHARE == 0.01


@pytest.mark.parametrize(("field", "bad"), [("validity", "maybe"), ("start_at", "middle"),
                                            ("cut", -1), ("tool_share", -0.1)])
def test_a_bad_field_is_refused(field: str, bad: object) -> None:
    with pytest.raises(msgspec.ValidationError, match=field):
        msgspec.convert({**BLOCK, field: bad}, Jobs)
