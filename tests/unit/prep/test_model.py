"""model: the served model found from `/v1/models`, a typed name checked against it, and
each way the list can fail named in one line.

Why: a model name with a typo would otherwise be a whole run of HTTP 404s; a server
without a list must not be second-guessed either.
"""

from __future__ import annotations

from typing import Any

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.prep.model import check_model_served, discover_model
from anvil_metrics.urls import Endpoint


class _Client:
    endpoint = Endpoint.parse("http://127.0.0.1:9")

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def get_json(self, path: str) -> tuple[int, Any]:
        self.asked.append(path)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_first_listed_model_is_the_one() -> None:
    client = _Client((200, {"data": [{"id": "a"}, {"id": "b"}]}))
    assert discover_model(client) == "a" and client.asked == ["/models"]


@pytest.mark.parametrize(("answer", "says"), [
    (ConnectionRefusedError("refused"), "cannot reach http://127.0.0.1:9/v1/models (refused)"),
    ((404, None), "could not discover a model from http://127.0.0.1:9/v1/models (HTTP 404)"),
    ((200, {"data": []}), "(HTTP 200); pass --model NAME"),
    ((200, {"data": [{"name": "x"}]}), "could not discover a model"),
])
def test_no_model_to_discover_is_named(answer: Any, says: str) -> None:
    with pytest.raises(UsageError) as e:
        discover_model(_Client(answer))
    assert says in str(e.value)


def test_a_model_not_served_is_refused_with_what_is() -> None:
    client = _Client((200, {"data": [{"id": "a"}, {"id": "b"}]}))
    check_model_served(client, "b")
    with pytest.raises(UsageError, match=r"^--model 'c' is not served by http://127\.0\.0\.1:9/v1; "
                                         r"it serves: a, b$"):
        check_model_served(client, "c")


@pytest.mark.parametrize("answer", [OSError("down"), (404, None), (200, {"data": "x"}),
                                    (200, {"data": []})])
def test_without_a_list_the_name_is_not_second_guessed(answer: Any) -> None:
    check_model_served(_Client(answer), "anything")
