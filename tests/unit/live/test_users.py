"""users: one task of the Locust user, with a stand-in client that plays a stream — the
record anvil fires, the one Locust request event (or none, for a cancelled request), and
the ticket always given back.

Why: every figure comes from the records this user fires; a record lost when the client
raises, a ticket kept when a stream fails, or a cancelled request counted as a Locust
failure would change a run's counts or hang its budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from greenlet import GreenletExit
from locust.env import Environment

from anvil_metrics.events import anvil_events
from anvil_metrics.live import users
from anvil_metrics.live.balance import Balancer
from anvil_metrics.live.control import Ticket
from anvil_metrics.live.prefillgate import PrefillGate
from anvil_metrics.live.runctx import set_run
from anvil_metrics.load.body import RequestBodies
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.records import RequestRecord
from anvil_metrics.urls import parse_replicas
from anvil_metrics.wire.observe import StreamObserver
from anvil_metrics.wire.transport import SendStats

MS = 1_000_000


def _completes(obs: StreamObserver) -> int:
    t = obs.start_ns
    obs.begin(t, obs.due_ns)
    obs.on_data('{"choices": [{"delta": {"role": "assistant"}}]}', t + 1 * MS)
    obs.on_data('{"choices": [{"delta": {"content": "a"}}]}', t + 2 * MS)
    obs.on_data('{"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]}',
                t + 3 * MS)
    obs.on_data('{"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}',
                t + 4 * MS)
    obs.on_data("[DONE]", t + 5 * MS)
    return 321


def _busy(obs: StreamObserver) -> int:
    obs.on_head(503)
    obs.fail("http_error", "503 busy", obs.start_ns + MS, phase="headers")
    return 0


def _raises(obs: StreamObserver) -> int:
    raise RuntimeError("bug in the client")


def _stopped(obs: StreamObserver) -> int:
    obs.on_data('{"choices": [{"delta": {"content": "a"}}]}', obs.start_ns + MS)
    raise GreenletExit


class _Client:
    play: Callable[[StreamObserver], int] = _completes

    def __init__(self, endpoint: Any = None, *args: Any, **kwargs: Any) -> None:
        self.closed = False
        self.endpoint = endpoint

    def connect(self) -> None:
        pass

    def stream_chat(self, body: Any, obs: StreamObserver, headers: bytes = b"",
                    cancel_after: Any = None) -> int:
        return type(self).play(obs)

    def close(self) -> None:
        self.closed = True


class _Budget:
    def __init__(self, ticket: Ticket | None) -> None:
        self.ticket = ticket
        self.returned: list[Ticket] = []
        self.users_ready = 0

    def user_ready(self) -> None:
        self.users_ready += 1

    def take(self) -> Ticket | None:
        return self.ticket

    def give_back(self, ticket: Ticket, conversation_over: bool = True) -> None:
        self.returned.append(ticket)


class _Bodies(RequestBodies):
    def build_parts(self, size: int, index: int, warmup: bool = False) -> tuple[bytes, ...]:
        return (b"{}",)


@pytest.fixture
def heard() -> Iterator[dict[str, list]]:
    got: dict[str, list] = {"records": [], "first_content": []}

    def record(record: RequestRecord, **kw: Any) -> None:
        got["records"].append(record)

    def content(**kw: Any) -> None:
        got["first_content"].append(kw)

    anvil_events.request_record.add_listener(record)
    anvil_events.first_content.add_listener(content)
    yield got
    anvil_events.request_record.remove_listener(record)
    anvil_events.first_content.remove_listener(content)


def _user(monkeypatch: pytest.MonkeyPatch, play: Callable[[StreamObserver], int],
          ticket: Ticket, conversations: Any = None, gate: PrefillGate | None = None,
          hosts: str = "http://127.0.0.1:9"
          ) -> tuple[users.ChatUser, _Budget, list[dict]]:
    monkeypatch.setattr(users, "ChatClient", _Client)
    monkeypatch.setattr(_Client, "play", staticmethod(play))
    env = Environment(user_classes=[users.ChatUser])
    budget = _Budget(ticket)
    replicas = parse_replicas(hosts)
    set_run(env, SimpleNamespace(endpoint=replicas[0], replicas=replicas, api_key=None,
                                 balancer=Balancer(len(replicas)),
                                 scenario=Scenario(measurement_protocol="p"), budget=budget,
                                 bodies=_Bodies(), worker="h:1",
                                 conversations=conversations, send_stats=SendStats(),
                                 in_flight=set(), prefill_gate=gate))
    fired: list[dict] = []
    env.events.request.add_listener(lambda **kw: fired.append(kw))
    user = users.ChatUser(env)
    user.on_start()
    assert budget.users_ready == 1  # its start said so (an open loop's arrivals wait for it)
    return user, budget, fired


def test_a_completed_stream_is_recorded_and_counted_once(monkeypatch, heard) -> None:
    ticket = Ticket(request_index=7, warmup=False, planned_context_tokens=128)
    user, budget, fired = _user(monkeypatch, _completes, ticket)
    user.chat()
    (record,) = heard["records"]
    assert (record.request_index, record.planned_context_tokens, record.worker) == (7, 128, "h:1")
    assert record.ok and record.content_chunks == 2 and record.end_ns - record.start_ns == 5 * MS
    assert record.usage == {"prompt_tokens": 9, "completion_tokens": 2}
    assert record.extra["first_chunk_ns"] == record.start_ns + MS
    assert record.extra["start_delay_ns"] >= 0
    assert [kw["request_index"] for kw in heard["first_content"]] == [7]
    (event,) = fired
    assert (event["name"], event["exception"], event["response_length"]) == (
        users.REQUEST_NAME, None, 321)
    assert event["response_time"] == 5.0 and event["context"] == {"request_index": 7}
    assert budget.returned == [ticket]
    user.on_stop()
    assert user.client.closed


def test_a_failed_stream_is_a_locust_failure_by_kind_and_status(monkeypatch, heard) -> None:
    ticket = Ticket(request_index=0, warmup=True, planned_context_tokens=64)
    user, budget, fired = _user(monkeypatch, _busy, ticket)
    user.chat()
    assert heard["records"][0].failure.kind == "http_error"
    (event,) = fired
    assert event["name"] == users.WARMUP_NAME
    assert isinstance(event["exception"], users.StreamFailure)
    assert str(event["exception"]) == "http_error HTTP 503 (headers)"
    assert budget.returned == [ticket]


@pytest.mark.parametrize("play", [_completes, _busy, _raises])
def test_a_gated_request_records_its_wait_and_frees_its_slot_however_it_ends(
        monkeypatch, heard, play) -> None:
    gate = PrefillGate(1)
    user, budget, _ = _user(monkeypatch, play, Ticket(request_index=3, warmup=False,
                                                     planned_context_tokens=64), gate=gate)
    user.chat()
    (record,) = heard["records"]
    assert record.extra["prefill_gate_wait_ns"] >= 0  # it waited nothing: the gate was free
    assert gate.free == 1  # freed at its first token, or at its end without one


def test_a_client_that_raises_gives_a_client_error_record(monkeypatch, heard) -> None:
    ticket = Ticket(request_index=1, warmup=False, planned_context_tokens=64)
    user, budget, fired = _user(monkeypatch, _raises, ticket)
    user.chat()
    failure = heard["records"][0].failure
    assert (failure.kind, failure.message, failure.phase) == (
        "client_error", "RuntimeError: bug in the client", "prefill")
    assert str(fired[0]["exception"]) == "client_error (prefill)"
    assert budget.returned == [ticket]


def test_a_stopped_request_is_recorded_cancelled_and_not_counted_by_locust(
        monkeypatch, heard) -> None:
    ticket = Ticket(request_index=2, warmup=False, planned_context_tokens=64)
    user, budget, fired = _user(monkeypatch, _stopped, ticket)
    with pytest.raises(GreenletExit):
        user.chat()
    failure = heard["records"][0].failure
    assert (failure.kind, failure.phase) == ("cancelled", "decode")
    assert fired == [] and budget.returned == [ticket]


def test_an_open_loop_ticket_is_late_from_its_due_time(monkeypatch, heard) -> None:
    import time

    due = time.perf_counter_ns() - 50 * MS  # fell due 50 ms ago
    ticket = Ticket(request_index=3, warmup=False, planned_context_tokens=64, due_ns=due,
                    waited=True)
    user, _, _ = _user(monkeypatch, _completes, ticket)
    user.chat()
    record = heard["records"][0]
    assert record.extra["start_delay_ns"] == record.start_ns - due >= 50 * MS
    assert record.extra["waited_for_user"] is True


def test_without_a_run_the_user_has_no_client() -> None:
    env = Environment(user_classes=[users.ChatUser])
    user = users.ChatUser(env)
    user.on_start()
    assert user.run is None and user.client is None
    assert user.wait_time() == 0.0
    user.on_stop()  # nothing to close


def test_every_consumer_reads_the_clients_one_start_stamp(monkeypatch, heard) -> None:
    perf_ns, wall_s = 7_000 * MS, 1_000.0  # this process's clocks, held still
    monkeypatch.setattr(users, "time", SimpleNamespace(perf_counter_ns=lambda: perf_ns,
                                                       time=lambda: wall_s))

    def connects_then_streams(obs: StreamObserver) -> int:
        assert obs.start_ns == perf_ns  # the user's provisional stamp
        obs.begin(perf_ns + 30 * MS, obs.due_ns)  # the client's, after a 30 ms connect
        return _completes(obs)

    ticket = Ticket(request_index=4, warmup=False, planned_context_tokens=64)
    user, _, fired = _user(monkeypatch, connects_then_streams, ticket)
    user.chat()
    (record,) = heard["records"]
    assert record.start_ns == perf_ns + 30 * MS
    assert [kw["start_ns"] for kw in heard["first_content"]] == [record.start_ns]
    assert record.extra["start_delay_ns"] == 30 * MS  # due when the user was free
    (event,) = fired
    assert event["response_time"] == 5.0  # from the client's stamp, not the provisional one
    assert event["start_time"] == pytest.approx(wall_s + 0.030, abs=1e-9)  # the same instant


class _Turns:
    """A budget that hands out tickets 10, 11, 12, … (a conversation takes several: its
    first by `take`, its later turns by `take_followup`), and keeps what it was told."""

    followup_lead_ns = 0

    def __init__(self) -> None:
        self.next = 10
        self.asked: list[str] = []
        self.over: list[bool] = []

    def take(self) -> Ticket:
        self.asked.append("take")
        return self._ticket()

    def take_followup(self) -> Ticket:
        self.asked.append("followup")
        return self._ticket()

    def _ticket(self) -> Ticket:
        self.next += 1
        return Ticket(request_index=self.next - 1, warmup=False, planned_context_tokens=64)

    def give_back(self, ticket: Ticket, conversation_over: bool = True) -> None:
        self.over.append(conversation_over)

    def conversation_dropped(self) -> None:
        self.asked.append("dropped")


def test_a_conversation_sends_its_history_its_header_and_waits_its_think_time(
        monkeypatch, heard) -> None:
    """Two conversations of two turns (think 0.5 s): turn 2 sends turn 1's messages and the
    answer the stream gave ("ab"), the same session header, and waits the think time first;
    the records carry the conversation, the turn and the previous prompt's count (9)."""
    import orjson

    from anvil_metrics.load.body import ConversationBodies
    from anvil_metrics.load.scenario import scenario_from_dict
    from anvil_metrics.prep.prompts import Calibration
    from anvil_metrics.prep.turns import ConversationPrompts, TurnSizes, size_turn_texts

    sc = scenario_from_dict({"measurement_protocol": "p", "max_tokens": 8,
                             "max_context_tokens": 4096,
                             "conversation": {"turns": 2, "turn_tokens": 20,
                                              "think_time": 0.5}})
    texts = size_turn_texts(TurnSizes(20), Calibration("none", 0.0, 1.3), 0, "nonce")
    sent: list[tuple[dict, bytes]] = []

    class Client(_Client):
        def stream_chat(self, body: Any, obs: StreamObserver, headers: bytes = b"",
                        cancel_after: Any = None) -> int:
            sent.append((orjson.loads(b"".join(body)), headers))
            return _completes(obs)

    convs = ConversationBodies(sc, "m", ConversationPrompts(texts, "nonce"))
    user, _, _ = _user(monkeypatch, _completes, None, convs)  # type: ignore[arg-type]
    user.run.budget = _Turns()
    monkeypatch.setattr(user, "client", Client())
    waits = []
    for _ in range(4):
        user.chat()
        waits.append(user.wait_time())
    assert waits == [0.5, 0.0, 0.5, 0.0]  # the think time, before turn 2 only
    # a conversation's first turn starts it, its second is a follow-up and ends it
    assert user.run.budget.asked == ["take", "followup", "take", "followup"]
    assert user.run.budget.over == [False, True, False, True]
    (b1, h1), (b2, h2), (b3, h3), _ = sent
    assert h1 == h2 == b"X-Session-ID: nonce-10\r\n" and h3 == b"X-Session-ID: nonce-12\r\n"
    assert b2["messages"][:len(b1["messages"])] == b1["messages"]
    assert b2["messages"][len(b1["messages"])] == {"role": "assistant", "content": "ab"}
    assert len(b2["messages"]) == len(b1["messages"]) + 2
    assert [(r.extra["conversation"], r.extra["turn"], r.extra["history_tokens"])
            for r in heard["records"]] == [(10, 1, None), (10, 2, 9), (12, 1, None),
                                           (12, 2, 9)]
    assert all(r.planned_context_tokens is None for r in heard["records"])
    # stopped in the think time after a first turn: the conversation takes no more
    user.chat()
    user.on_stop()
    assert user.run.budget.asked[-2:] == ["take", "dropped"] and user._talk.over
    user.on_stop()  # once only
    assert user.run.budget.asked.count("dropped") == 1


@pytest.mark.parametrize("play", [_completes, _busy, _raises, _stopped])
def test_a_request_is_in_flight_from_its_send_until_recorded(monkeypatch, heard,
                                                             play: Callable) -> None:
    """The run's set of requests in flight (what the stuck-request watch scans) holds the
    request's observer while the client has it, and not once it is recorded, however it
    ended."""
    seen: list[bool] = []

    def playing(obs: StreamObserver) -> int:
        seen.append(obs in user.run.in_flight)
        return play(obs)

    ticket = Ticket(request_index=4, warmup=False, planned_context_tokens=64)
    user, _, _ = _user(monkeypatch, playing, ticket)
    try:
        user.chat()
    except GreenletExit:
        pass
    assert seen == [True] and len(heard["records"]) == 1
    assert user.run.in_flight == set()


@pytest.mark.parametrize("index", [4, 7])
def test_replicas_take_requests_round_robin_by_index(monkeypatch, heard, index: int) -> None:
    """`--host A,B`: request i goes on the user's connection to replica i % 2, and its
    record names that replica; one host records none."""
    sent_to: list[str] = []

    def playing(obs: StreamObserver) -> int:
        return _completes(obs)

    ticket = Ticket(request_index=index, warmup=False, planned_context_tokens=64)
    user, _, _ = _user(monkeypatch, playing, ticket,
                       hosts="http://127.0.0.1:9,http://127.0.0.1:10")
    monkeypatch.setattr(_Client, "stream_chat", lambda self, body, obs, headers=b"",
                        cancel_after=None: sent_to.append(self.endpoint.base_url)
                        or _completes(obs))
    user.chat()
    (record,) = heard["records"]
    assert record.extra["replica"] == index % 2
    assert sent_to == [f"http://127.0.0.1:{9 + index % 2}/v1"]
    user.on_stop()
    assert all(c.closed for c in user._replica_clients)
