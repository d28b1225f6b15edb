"""headerblocks: the blocks copied from a run's header are there exactly when the header
has them, as it has them (a credential's value redacted)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from anvil_metrics.post.blockkit import ABSENT
from anvil_metrics.post.headerblocks import (
    build_dataset,
    build_endpoint,
    build_prompt_ids,
    build_request_headers,
    verify_request_headers,
)


def _inputs(params: dict[str, Any]) -> Any:
    return SimpleNamespace(params=params)


def test_each_is_there_exactly_when_the_header_has_it() -> None:
    none = _inputs({})
    for build in (build_dataset, build_endpoint, build_prompt_ids, build_request_headers):
        assert build(none) is ABSENT
    given = _inputs({"endpoint": "responses", "prompt_ids": True,
                     "dataset": {"file": "d.jsonl", "format": None, "entries": 7, "x": 1},
                     "request_headers": {"X-Tenant": "a", "Authorization": "Bearer sk-1"}})
    assert build_endpoint(given) == "responses"
    assert build_prompt_ids(given) is True
    assert build_dataset(given) == {"file": "d.jsonl", "format": None, "entries": 7}
    assert build_request_headers(given) == {"X-Tenant": "a", "Authorization": "[redacted]"}


def test_a_stored_credential_is_named_without_its_value() -> None:
    problems: list[str] = []
    verify_request_headers({"request_headers": {"Authorization": "Bearer sk-9"}}, None,
                           problems)
    assert len(problems) == 1 and "sk-9" not in problems[0]
    assert problems[0].startswith("request_headers.Authorization: a credential's value")
