"""A run's set-up against the server (`live/prepare.py`): the model resolved, every planned
prompt sized (counted by the simulator's /tokenize on 127.0.0.1), the calibration stored and
found again, a plan past the server's context refused; and the shared-token allowance worked
out by hand.

Why: a prompt sized wrong, or a calibration cache that answers for another run's shape,
skews every figure of the run without failing a request.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from simfork import start_simulator

from anvil_metrics.errors import UsageError
from anvil_metrics.live.prepare import (
    check_server_limit,
    expected_shared_tokens,
    prepare_requests,
)
from anvil_metrics.load.options import RunOptions
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.prep.prompts import Calibration, PromptFactory, SharedPrefix, request_prefix
from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.urls import Endpoint

SIM = ("--prefill-ms", "1", "--reasoning-tokens", "1", "--content-tokens", "2",
       "--interval-ms", "1", "--max-context", "2048")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """One simulator (SIM) for every test here: none reads its state, and each keeps its
    calibration cache in its own results folder (a simulator ~0.4 CPU-s and ~0.5 s to start)."""
    with start_simulator(list(SIM)) as started:
        yield started


def scenario(**over: object) -> Scenario:
    fields: dict[str, object] = dict(
        measurement_protocol="test", requests=4, context_tokens=128, max_context_tokens=256,
        max_tokens=8, context_distribution={128: 1, 256: 1})
    return Scenario(**(fields | over))  # type: ignore[arg-type]


def opts(sim: SimProcess, tmp_path: Path, **over: object) -> RunOptions:
    return replace(RunOptions(scenario=scenario(), host=sim.url, users=1,
                              results_dir=str(tmp_path), server_metrics=False), **over)


def test_prompts_are_sized_by_the_server_and_the_calibration_is_found_again(
        sim: SimProcess, tmp_path: Path) -> None:
    o = opts(sim, tmp_path)
    endpoint = Endpoint.parse(o.host)
    sizes = o.scenario.planned_sizes()
    first = prepare_requests(o, endpoint, "abcd", sizes, None)
    assert first.model == "sim-model"  # the server's own first model
    assert first.prompts.calibration.method != "none"
    assert first.sizing["cache"] == "stored"
    assert set(first.sizing["counted"]) == {"128", "256"}
    # the server counted each planned size to within a few tokens of the plan
    assert all(abs(v - int(k)) <= 3 for k, v in first.sizing["counted"].items()), first.sizing
    body = orjson.loads(b"".join(first.bodies.build_parts(128, 0)))
    assert body["model"] == "sim-model" and body["messages"][-1]["role"] == "user"
    again = prepare_requests(o, endpoint, "abcd", sizes, None)
    assert again.sizing["cache"] == "hit" and again.sizing["cache_key"] == (
        first.sizing["cache_key"])
    off = prepare_requests(replace(o, calibrate=False), endpoint, "abcd", sizes, None)
    assert off.sizing["cache"] == "off" and off.prompts.calibration.method == "none"


def test_a_plan_past_the_servers_context_or_another_model_is_refused(
        sim: SimProcess, tmp_path: Path) -> None:
    big = scenario(context_tokens=2040, max_context_tokens=2040, max_tokens=16,
                   context_distribution={2040: 1})
    o = opts(sim, tmp_path, scenario=big)
    with pytest.raises(UsageError, match="context limit is 2048 tokens"):
        prepare_requests(o, Endpoint.parse(o.host), "abcd", big.planned_sizes(), None)
    other = opts(sim, tmp_path, scenario=scenario(meta={"model": "other"}))
    with pytest.raises(UsageError, match="'other' is not served"):
        prepare_requests(other, Endpoint.parse(other.host), "abcd", [128], None)


def test_the_servers_limit_is_the_largest_prompt_plus_max_tokens() -> None:
    sc = scenario(max_tokens=100)
    check_server_limit(None, [5000], sc)  # an unknown limit refuses nothing
    check_server_limit(356, [128, 256], sc)  # 256 + 100 = 356: fits exactly
    with pytest.raises(UsageError) as exc:
        check_server_limit(355, [256, 128], sc)
    assert str(exc.value).startswith(
        "the server's context limit is 355 tokens (max_model_len), but the scenario plans "
        "256 + max_tokens 100 = 356; plan sizes of at most 255")


def test_the_shared_tokens_allowed_are_counted_else_estimated() -> None:
    cal = Calibration("probe", 10.0, 1.5)
    prompts = PromptFactory(cal, 0, "abcd", "Be brief.")
    lead = request_prefix("abcd", 0).rstrip()
    assert len(lead.split()) == 5  # "Request <index> of run abcd."
    # estimated: overhead + tokens per word x (5 + 2 words), rounded down, plus 8
    assert expected_shared_tokens(prompts, None, "Be brief.") == int(10 + 1.5 * 7) + 8
    seen: list[list[dict]] = []
    assert expected_shared_tokens(prompts, lambda m: seen.append(m) or 42, "Be brief.") == 42
    assert seen == [[{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": lead}]]

    def broken(_messages: object) -> int:
        raise RuntimeError("no count")

    assert expected_shared_tokens(prompts, broken, "Be brief.") == 28  # the estimate
    shared = PromptFactory(cal, 0, "abcd", None, SharedPrefix(prefix_tokens=900, group_size=4))
    assert expected_shared_tokens(shared, broken, None) == 900  # the group's whole prefix


def test_a_datasets_entries_are_counted_before_the_load_with_a_local_tokenizer(
        sim: SimProcess, tmp_path: Path, monkeypatch) -> None:
    """`--tokenizer` with a dataset: the local tokenizer counts each entry the run sends
    (its templated messages) before the load, and that count is the request's planned size;
    without one, a dataset prompt has none (the server's count is its size)."""
    from types import SimpleNamespace

    from anvil_metrics.live import prepare
    from anvil_metrics.load.dataset import DatasetEntry

    entries = [DatasetEntry(None, (f"question {k} " * (k + 1),)) for k in range(5)]
    counted: list[list[dict]] = []

    def count(messages: list[dict]) -> int:
        counted.append(messages)
        return 10 + len(messages[-1]["content"])

    local = SimpleNamespace(source="tokenizer t.json", max_model_len=None, count=count)
    monkeypatch.setattr(prepare, "server_counter", lambda client, fields, path: local)
    o = opts(sim, tmp_path, tokenizer_path="t.json", scenario=scenario(requests=3))
    ready = prepare_requests(o, Endpoint.parse(o.host), "n", [128], None, dataset=entries)
    want = [10 + len(e.turns[0]) for e in entries[:3]]  # the 3 entries 3 requests send
    assert [ready.bodies.planned(k, 128) for k in range(6)] == [*want, None, None, want[0]]
    assert counted == [ready.bodies.messages(k) for k in range(3)]
    plain = prepare_requests(replace(o, tokenizer_path=None), Endpoint.parse(o.host), "n",
                             [128], None, dataset=entries)
    assert plain.bodies.planned(0, 128) is None
