"""The master<->worker messages as plain data: the set-up round-trips exactly through
Locust's own msgpack framing (and gives byte-identical request bodies), and every damaged
message is refused with one log line, never acted on."""

from __future__ import annotations

import datetime
import logging
import pickle
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import pytest
from locust.rpc.protocol import Message

from anvil_metrics.cluster.master import MasterAgent, MasterCoordinator
from anvil_metrics.cluster.wire import MESSAGES, SETUP_VERSION, WorkerSetup, stuck_from_wire
from anvil_metrics.cluster.worker import WorkerAgent, WorkerSession
from anvil_metrics.errors import WireError
from anvil_metrics.events import anvil_events
from anvil_metrics.live.abort import FailureWatch
from anvil_metrics.live.control import RequestBudget, Ticket
from anvil_metrics.live.stuck import StuckWatch
from anvil_metrics.load.body import BodyBuilder
from anvil_metrics.load.options import AbortRule
from anvil_metrics.load.scenario import load_scenario, scenario_from_dict, scenario_to_dict
from anvil_metrics.post.schema import CALIBRATION_METHODS
from anvil_metrics.prep.prompts import NO_CALIBRATION, Calibration, PromptFactory, SharedPrefix
from anvil_metrics.records import Failure, RequestRecord, worker_identity
from anvil_metrics.urls import api_key_from_env
from anvil_metrics.wire.observe import StreamObserver

REPO = Path(__file__).resolve().parents[3]


def over_locust(msg_type: str, data: Any) -> Any:
    """`data` as a peer receives it: through Locust's own msgpack framing."""
    return Message.unserialize(Message(msg_type, data, "node").serialize()).data


def _setup(doc: dict[str, Any], calibration: Calibration = NO_CALIBRATION,
           shared: SharedPrefix | None = None, api_key: str | None = None
           ) -> tuple[WorkerSetup, BodyBuilder]:
    """A set-up as the master builds it, and the master's own bodies."""
    sc = scenario_from_dict({"measurement_protocol": "wire", **doc}, source="wire.toml")
    prompts = PromptFactory(calibration, sc.context_seed, "nonce-1", sc.system_prompt, shared)
    bodies = BodyBuilder(sc, "the-model", prompts)
    sizes = sc.planned_sizes()
    bodies.prepare(sizes)
    setup = WorkerSetup("run-1", sc, "http://127.0.0.1:9", api_key, "the-model", calibration,
                        "nonce-1", shared, dict(prompts.words), prompts.prefix_words, sizes)
    return setup, bodies


PLAIN: dict[str, Any] = {}
RICH = {
    "concurrency": 3, "requests": 11, "warmup_requests": 2, "max_tokens": 64,
    "context_tokens": 2048, "max_context_tokens": 4096, "context_seed": 7,
    "context_distribution": {"1500": 3, "300": 5, "900": 1},  # not sorted: order is kept
    "serve_flags": {"reasoning_effort": "high", "thinking_mode": "off"},
    "request": {"include_usage": False, "fixed_output_tokens": True, "system_prompt": "Be brief.",
                "extra_body": {"temperature": 0.0, "top_p": 0.95, "seed": 3, "stop": ["\n\n"],
                               "chat_template_kwargs": {"custom": [1, {"deep": None}]},
                               "logit_bias": {"50256": -100}}},
    "meta": {"engine": "vllm", "gpu": None, "model": "m"},
    "headers": {"X-Tenant": "a", "X-Api-Key": "sk-h"},  # the workers send them too
    "timeouts": {"connect_s": 2, "first_byte_s": 12.5, "idle_s": 3.25, "total_s": 99},
}
SHARED = {"context_distribution": {"1024": 4, "2048": 4},
          "serve_flags": {"shared_prefix_burst": True},
          "shared_prefix": {"prefix_tokens": 512, "group_size": 4}}

CASES = [
    pytest.param(PLAIN, NO_CALIBRATION, None, None, id="defaults"),
    pytest.param(RICH, Calibration("probe", 21.25, 1.31), None, "sk-x", id="rich"),
    pytest.param(SHARED, Calibration("tokenize", 9.0, 1.27), SharedPrefix(512, 4), None,
                 id="shared-prefix"),
    *(pytest.param(PLAIN, Calibration(m, 3.5, 1.2), None, None, id=f"calibration-{m}")
      for m in CALIBRATION_METHODS),
]


@pytest.mark.parametrize("doc,calibration,shared,api_key", CASES)
def test_the_setup_round_trips_and_builds_the_same_bodies(doc: dict, calibration: Calibration,
                                                          shared: SharedPrefix | None,
                                                          api_key: str | None) -> None:
    setup, master_bodies = _setup(doc, calibration, shared, api_key)
    wire = over_locust("anvil_setup", setup.to_wire())
    back = WorkerSetup.from_wire(wire)
    assert back == setup
    assert back.scenario.headers == doc.get("headers", {})
    assert list(back.scenario.context_distribution) == list(setup.scenario.context_distribution)
    assert back.scenario.planned_sizes() == setup.scenario.planned_sizes()
    worker = WorkerSession(back, lambda t, d: None)
    try:
        for size in set(setup.sizes):
            for index, warmup in ((0, False), (1, False), (5, True), (123_456, False)):
                assert (worker.bodies.build(size, index, warmup)
                        == master_bodies.build(size, index, warmup))
    finally:
        worker.finish()


def test_a_toml_date_in_extra_body_crosses_as_the_json_the_body_carries() -> None:
    extra = {"when": datetime.date(2026, 1, 2), "at": datetime.datetime(2026, 1, 2, 3, 4, 5)}
    setup, master_bodies = _setup({"request": {"extra_body": extra}})
    assert setup.scenario.extra_body == {"when": "2026-01-02", "at": "2026-01-02T03:04:05"}
    back = WorkerSetup.from_wire(over_locust("anvil_setup", setup.to_wire()))
    assert back == setup
    size = setup.sizes[0]
    bodies = BodyBuilder(back.scenario, back.model, PromptFactory(
        back.calibration, back.scenario.context_seed, back.run_nonce,
        back.scenario.system_prompt, back.shared, back.words, back.prefix_words))
    assert bodies.build(size, 3) == master_bodies.build(size, 3)


def test_every_scenario_file_round_trips_through_its_document() -> None:
    files = sorted((REPO / "scenarios").glob("*.toml"))
    assert files
    for path in files:
        sc = load_scenario(path)
        assert scenario_from_dict(scenario_to_dict(sc), source=sc.source) == sc, path


# --- a worker refuses a damaged set-up -----------------------------------------------------


class FakeRunner:
    """Locust's runner as anvil's agents use it: registered handlers, sent messages."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}
        self.sent: list[tuple[str, Any, str | None]] = []
        self.clients: dict[str, Any] = {}
        self.stopped = 0

    def register_message(self, msg_type: str, listener: Any, concurrent: bool = False) -> None:
        self.handlers[msg_type] = listener

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None
                     ) -> None:
        self.sent.append((msg_type, data, client_id))

    def stop(self) -> None:
        self.stopped += 1

    def receive(self, msg_type: str, data: Any, node: str = "node") -> None:
        msg = Message.unserialize(Message(msg_type, data, node).serialize())
        self.handlers[msg_type](environment=None, msg=msg)


def _worker() -> tuple[WorkerAgent, FakeRunner, list]:
    runner = FakeRunner()
    current: list = []
    agent = WorkerAgent(SimpleNamespace(runner=runner), current.append)
    return agent, runner, current


def _good_wire() -> dict[str, Any]:
    return _setup(PLAIN, api_key="sk-secret-wire-0123456789")[0].to_wire()


def _without(key: str) -> dict[str, Any]:
    wire = _good_wire()
    del wire[key]
    return wire


def _with(path: str, value: Any) -> dict[str, Any]:
    wire = _good_wire()
    *parents, last = path.split(".")
    d = wire
    for p in parents:
        d = d[p]
    d[last] = value
    return wire


DAMAGED = [
    pytest.param(pickle.dumps({"run_id": "run-1"}), "data = <", id="pickle-blob"),
    pytest.param(["run-1"], "data = ['run-1']", id="a-list"),
    pytest.param(None, "data = None", id="none"),
    pytest.param(_without("run_id"), "run_id is missing", id="missing-run-id"),
    pytest.param(_without("version"), "version is missing", id="missing-version"),
    pytest.param(_with("version", 1), "version = 1", id="other-version"),
    # the shape before `opening_tokens` (agent prompts): a worker of that version is refused
    pytest.param({k: v for k, v in _with("version", SETUP_VERSION - 1).items()
                  if k != "opening_tokens"},
                 f"version = {SETUP_VERSION - 1}", id="previous-version"),
    pytest.param(_with("sizes", "4096"), "sizes = '4096'", id="sizes-a-string"),
    pytest.param(_with("sizes", [4096, True]), "sizes = [4096, True]", id="sizes-a-bool"),
    pytest.param(_with("words", {"4096": 10}), "words = <a dict", id="words-a-dict"),
    pytest.param(_with("words", [[4096, 10], [4096, 11]]), "words[1] = [4096, 11]",
                 id="words-twice"),
    pytest.param(_with("api_key", ["sk-secret-wire-0123456789"]), "api_key = <a list>",
                 id="api-key-a-list"),
    pytest.param(_with("calibration.method", "guess"), "calibration.method = 'guess'",
                 id="calibration-method"),
    pytest.param(_with("calibration.tokens_per_word", 0.0),
                 "calibration.tokens_per_word = 0.0", id="tokens-per-word-zero"),
    pytest.param(_with("shared", {"prefix_tokens": 512}), "shared.group_size is missing",
                 id="shared-partial"),
    pytest.param(_with("scenario.document.concurrency", 0),
                 "scenario.document.concurrency = 0", id="scenario-rule"),
    pytest.param(_with("scenario.document.context_distribution", {4096: 1}),
                 "scenario.document.context_distribution = 4096", id="int-key"),
    pytest.param(_with("scenario.document.timeouts", {"idle_s": "soon"}),
                 "scenario.document.timeouts.idle_s = 'soon'", id="timeout-a-string"),
    pytest.param(_with("scenario.document.request", {"extra_body": {1: 2}}),
                 "scenario.document.request.extra_body = <a dict of 1 field>",
                 id="extra-body-int-key"),
]


@pytest.mark.parametrize("data,shown", DAMAGED)
def test_a_damaged_setup_is_refused_with_one_line_and_runs_nothing(
        data: Any, shown: str, caplog: pytest.LogCaptureFixture) -> None:
    agent, runner, current = _worker()
    with caplog.at_level(logging.DEBUG, logger="anvil"):
        runner.receive("anvil_setup", data)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is None
    text = record.getMessage()
    assert "anvil_setup: " in text and shown in text and "\n" not in text
    assert "sk-secret-wire" not in text
    assert agent.session is None and current == [None]
    ((msg_type, hello, _),) = runner.sent  # the hello, nothing else
    assert msg_type == "anvil_hello" and hello["run_id"] is None
    assert hello["error"] and shown in hello["error"] and hello["worker"] == worker_identity()


def test_a_sound_setup_makes_a_session_and_a_clean_hello(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    agent, runner, current = _worker()
    with caplog.at_level(logging.INFO, logger="anvil"):
        runner.receive("anvil_setup", _good_wire())
    try:
        assert not caplog.records
        assert agent.session is not None and current == [agent.session]
        ((msg_type, hello, _),) = runner.sent
        assert msg_type == "anvil_hello" and hello["run_id"] == "run-1"
        assert hello["error"] is None
    finally:
        agent.session.finish()


# --- the small messages -------------------------------------------------------------------


def _set_up_worker() -> tuple[WorkerAgent, FakeRunner]:
    agent, runner, _ = _worker()
    runner.receive("anvil_setup", _good_wire())
    runner.sent.clear()
    return agent, runner


BAD_TO_WORKER = [
    ("anvil_ticket", {"run_id": "run-1", "seq": 1,
                      "ticket": ["0", False, 4096, None, False, None]}, "ticket"),
    ("anvil_ticket", {"run_id": "run-1", "seq": 1,
                      "ticket": [0, 0, 4096, None, False, None]}, "ticket"),
    ("anvil_ticket", {"run_id": "run-1", "seq": 1,
                      "ticket": [0, False, 4096, None, False, -1]}, "ticket"),
    ("anvil_ticket", {"run_id": "run-1", "ticket": None}, "seq"),
    ("anvil_ticket", "run-1", "data"),
    ("anvil_ping", {"run_id": "run-1", "seq": 0}, "t_master_ns"),
    ("anvil_ping", {"run_id": "run-1", "seq": "0", "t_master_ns": 5}, "seq"),
    ("anvil_stop", {"run_id": 7}, "run_id"),
    ("anvil_stop", [], "data"),
]


@pytest.mark.parametrize("msg_type,data,field", BAD_TO_WORKER)
def test_a_damaged_message_to_a_worker_is_refused(msg_type: str, data: Any, field: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    agent, runner = _set_up_worker()
    session = agent.session
    assert session is not None
    waiting = gevent.spawn(session.budget.take)
    gevent.sleep(0)
    runner.sent.clear()
    try:
        with caplog.at_level(logging.DEBUG, logger="anvil"):
            runner.receive(msg_type, data)
        (record,) = caplog.records
        text = record.getMessage()
        assert record.levelno == logging.ERROR and record.exc_info is None
        assert f"{msg_type}: {field} " in text and "\n" not in text
        assert runner.sent == [] and runner.stopped == 0  # nothing answered, nothing done
        assert not waiting.ready() and not session.finished
    finally:
        waiting.kill()
        session.finish()


def test_sound_messages_to_a_worker_still_act() -> None:
    agent, runner = _set_up_worker()
    session = agent.session
    assert session is not None
    waiting = gevent.spawn(session.budget.take)
    gevent.sleep(0)
    runner.receive("anvil_ticket",
                   {"run_id": "run-1", "seq": 1, "ticket": [4, True, 2048, None, False, None]})
    assert waiting.get(timeout=1) == Ticket(4, True, 2048)
    runner.receive("anvil_ticket", {"run_id": "other", "seq": 1, "ticket": None})  # ignored
    runner.receive("anvil_ping", {"run_id": "run-1", "seq": 3, "t_master_ns": 11})
    assert [m[0] for m in runner.sent] == ["anvil_take", "anvil_pong"]
    assert runner.sent[-1][1]["seq"] == 3 and runner.sent[-1][1]["t_master_ns"] == 11
    runner.receive("anvil_stop", {"run_id": "run-1"})
    assert runner.stopped == 1 and session.finished


def _master() -> tuple[MasterCoordinator, FakeRunner]:
    runner = FakeRunner()
    env = SimpleNamespace(runner=runner, events=SimpleNamespace(
        worker_connect=SimpleNamespace(add_listener=lambda f: None)))
    agent = MasterAgent(env)
    session = SimpleNamespace(run_id="run-1", budget=RequestBudget(4, 0, [4096]), writer=None)
    coordinator = agent.start_run(session, _setup(PLAIN)[0])
    coordinator.add_worker("A")
    runner.clients["A"] = SimpleNamespace(state="running")
    runner.sent.clear()
    return coordinator, runner


STUCK_SOUND = {"run_id": "run-1", "threshold_s": 30.0, "in_flight_requests": 4,
               "waiting_first_byte_requests": 2, "idle_mid_stream_requests": 1,
               "oldest_s": 45.0, "headers_received_requests": 1,
               "oldest_waiting_first_byte_s": 45.0, "oldest_idle_mid_stream_s": 31.0}
HELLO = {"run_id": "run-1", "worker": "h:1", "host": "h", "pid": 1, "boot_id": None,
         "error": None}
BAD_TO_MASTER = [
    ("anvil_hello", {**HELLO, "pid": "1"}, "pid"),
    ("anvil_hello", {**HELLO, "worker": 7}, "worker"),
    ("anvil_hello", b"\x80\x04", "data"),
    ("anvil_pong", {"run_id": "run-1", "seq": 0, "t_master_ns": 1}, "t_worker_ns"),
    ("anvil_take", {"run_id": "run-1", "seq": "1", "followup": False}, "seq"),
    ("anvil_take", {"seq": 1, "followup": False}, "run_id"),
    ("anvil_take", {"run_id": "run-1", "seq": 1}, "followup"),
    ("anvil_take", {"run_id": "run-1", "seq": 1, "followup": 1}, "followup"),
    ("anvil_records", {"run_id": "run-1", "lines": [b"{}", "{}"]}, "lines"),
    ("anvil_records", {"run_id": "run-1", "lines": b"{}"}, "lines"),
    ("anvil_done", {"run_id": "run-1", "sent": -1, "health": None}, "sent"),
    ("anvil_done", {"run_id": "run-1", "sent": 0, "health": [1]}, "health"),
    ("anvil_stuck", {**STUCK_SOUND, "waiting_first_byte_requests": -1},
     "waiting_first_byte_requests"),
    ("anvil_stuck", {**STUCK_SOUND, "oldest_s": "45"}, "oldest_s"),
    ("anvil_stuck", {k: v for k, v in STUCK_SOUND.items() if k != "threshold_s"},
     "threshold_s"),
]


@pytest.mark.parametrize("msg_type,data,field", BAD_TO_MASTER)
def test_a_damaged_message_to_the_master_is_refused(msg_type: str, data: Any, field: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    c, runner = _master()
    with caplog.at_level(logging.DEBUG, logger="anvil"):
        runner.receive(msg_type, data, node="A")
        gevent.sleep(0)
    (record,) = caplog.records
    text = record.getMessage()
    assert record.levelno == logging.ERROR and record.exc_info is None
    assert f"worker A: {msg_type}: {field} " in text and "\n" not in text
    w = c.workers["A"]
    assert runner.sent == [] and not c.outstanding  # no ticket granted
    assert not w.hello.is_set() and w.done is None and w.received == 0


def test_every_message_type_is_checked() -> None:
    assert set(MESSAGES) == {"anvil_hello", "anvil_ping", "anvil_pong", "anvil_take", "anvil_drop",
                             "anvil_ticket", "anvil_records", "anvil_stop", "anvil_done",
                             "anvil_stuck", "anvil_job_end", "anvil_dead"}
    c, runner = _master()
    runner.receive("anvil_hello", HELLO, node="A")
    runner.receive("anvil_take", {"run_id": "run-1", "seq": 1, "followup": False}, node="A")
    gevent.sleep(0)
    assert c.workers["A"].hello.is_set()
    assert [m[0] for m in runner.sent] == ["anvil_ticket"]


def test_a_workers_stuck_requests_reach_the_masters_report_when_they_change() -> None:
    """A worker's watch sends its report when it differs from the last one sent (never
    the same twice); the master merges the latest of each worker into its own report."""
    agent, wrunner = _set_up_worker()
    session = agent.session
    assert session is not None
    waiting = StreamObserver(0, 0)
    waiting.begin(0)
    session.in_flight.add(waiting)
    try:
        for now_s in (10, 31, 31, 32):
            session.stuck.check(now_s * 1_000_000_000)
        sent = [data for msg_type, data, _ in wrunner.sent if msg_type == "anvil_stuck"]
        assert [(d["in_flight_requests"], d["waiting_first_byte_requests"], d["oldest_s"])
                for d in sent] == [(1, 0, None), (1, 1, 31.0), (1, 1, 32.0)]
        assert stuck_from_wire(sent[-1]) == session.stuck.latest
    finally:
        session.finish()
    runner = FakeRunner()
    env = SimpleNamespace(runner=runner, events=SimpleNamespace(
        worker_connect=SimpleNamespace(add_listener=lambda f: None)))
    master = SimpleNamespace(run_id="run-1", budget=RequestBudget(4, 0, [4096]), writer=None,
                             stuck=StuckWatch(30.0, set()))
    c = MasterAgent(env).start_run(master, _setup(PLAIN)[0])
    for node in ("A", "B"):
        c.add_worker(node)
    runner.receive("anvil_stuck", sent[-1], node="A")
    runner.receive("anvil_stuck", STUCK_SOUND, node="B")
    runner.receive("anvil_stuck", {**STUCK_SOUND, "run_id": "other"}, node="B")  # ignored
    r = master.stuck.report()
    assert (r.in_flight_requests, r.waiting_first_byte_requests, r.idle_mid_stream_requests,
            r.headers_received_requests, r.oldest_s) == (5, 3, 1, 1, 45.0)


def test_a_workers_job_end_is_fired_again_on_the_master() -> None:
    """An agent job's end on a worker (`anvil_events.job_end`) goes to the master as
    `anvil_job_end`, where it is fired again for the live job figures; a damaged one or one
    of another run is not, and a finished worker sends none."""
    agent, wrunner = _set_up_worker()
    session = agent.session
    assert session is not None
    try:
        anvil_events.job_end.fire(job=7, answered=12, completed=True)
    finally:
        session.finish()
    anvil_events.job_end.fire(job=8, answered=1, completed=False)  # after its finish
    sent = [data for msg_type, data, _ in wrunner.sent if msg_type == "anvil_job_end"]
    assert sent == [{"run_id": session.run_id, "job": 7, "answered": 12, "completed": True}]
    c, runner = _master()
    runner.receive("anvil_hello", HELLO, node="A")
    heard: list[tuple[int, int, bool]] = []

    def hear(job: int, answered: int, completed: bool, **_: Any) -> None:
        heard.append((job, answered, completed))

    anvil_events.job_end.add_listener(hear)
    try:
        runner.receive("anvil_job_end", {**sent[0], "run_id": "run-1"}, node="A")
        runner.receive("anvil_job_end", {**sent[0], "run_id": "other"}, node="A")
        runner.receive("anvil_job_end", {"run_id": "run-1", "job": -1, "answered": 1,
                                         "completed": True}, node="A")
    finally:
        anvil_events.job_end.remove_listener(hear)
    assert heard == [(7, 12, True)]


def test_the_master_routes_messages_to_its_run_until_the_run_ends() -> None:
    """`start_run` makes the run's coordinator, which the workers' messages go to;
    after `end_run` (the run is written) they are dropped."""
    runner = FakeRunner()
    env = SimpleNamespace(runner=runner, events=SimpleNamespace(
        worker_connect=SimpleNamespace(add_listener=lambda f: None)))
    agent = MasterAgent(env)
    assert agent.coordinator is None
    session = SimpleNamespace(run_id="run-1", budget=RequestBudget(4, 0, [4096]), writer=None)
    c = agent.start_run(session, _setup(PLAIN)[0])
    assert agent.coordinator is c and c.session is session
    c.add_worker("A")
    runner.receive("anvil_hello", HELLO, node="A")
    assert c.workers["A"].hello.is_set()
    agent.end_run()
    c.workers["A"].hello.clear()
    runner.receive("anvil_hello", HELLO, node="A")
    assert agent.coordinator is None and not c.workers["A"].hello.is_set()


def test_wire_error_names_message_field_value_and_what_is_allowed() -> None:
    e = WireError("anvil_take", "seq", "x" * 500, "a whole number >= 1")
    assert str(e).startswith("anvil_take: seq = 'xxx") and str(e).endswith(
        "... is not allowed; expected a whole number >= 1")
    assert len(str(e)) < 130  # the value cut to 60 characters


def test_the_api_key_comes_from_one_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANVIL_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert api_key_from_env() is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert api_key_from_env() == "sk-openai"
    monkeypatch.setenv("ANVIL_API_KEY", "")
    assert api_key_from_env() == "sk-openai"
    monkeypatch.setenv("ANVIL_API_KEY", "sk-anvil")
    assert api_key_from_env() == "sk-anvil"
    setup = replace(_setup(PLAIN)[0], api_key="sk-master")
    session = WorkerSession(setup, lambda t, d: None)  # a worker's own key wins
    try:
        assert session.api_key == "sk-anvil"
    finally:
        session.finish()

def _back_to_back() -> tuple[FakeRunner, FakeRunner, MasterAgent, WorkerAgent]:
    """A master and a worker wired back to back through Locust's framing (worker "W")."""
    master_runner, worker_runner = FakeRunner(), FakeRunner()
    env = SimpleNamespace(runner=master_runner, events=SimpleNamespace(
        worker_connect=SimpleNamespace(add_listener=lambda f: None)))
    master = MasterAgent(env)
    worker = WorkerAgent(SimpleNamespace(runner=worker_runner), lambda s: None)
    master_runner.send_message = (  # type: ignore[method-assign]
        lambda t, d=None, client_id=None: worker_runner.receive(t, d, node="master"))
    worker_runner.send_message = (  # type: ignore[method-assign]
        lambda t, d=None, client_id=None: master_runner.receive(t, d, node="W"))
    return master_runner, worker_runner, master, worker


def test_the_master_refuses_the_run_when_its_only_worker_refuses_the_setup(
        caplog: pytest.LogCaptureFixture) -> None:
    """Master and worker wired back to back through Locust's framing: a set-up the worker
    cannot read comes back as a hello with `error`, and the master refuses the run."""
    master_runner, worker_runner, master, worker = _back_to_back()
    session = SimpleNamespace(run_id="run-1", budget=RequestBudget(4, 0, [4096]), writer=None)
    c = master.start_run(session, _setup(PLAIN)[0])
    c.setup_wire = {**c.setup_wire, "version": 0}  # as from a master of another version
    with caplog.at_level(logging.INFO, logger="anvil"), pytest.raises(
            RuntimeError, match="no worker could set up the run"):
        c.set_up_workers(["W"])
    assert worker.session is None
    assert c.workers["W"].info["error"].startswith("anvil_setup: version = 0 is not allowed")
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]
    assert "could not set up the run: anvil_setup: version = 0" in caplog.records[1].getMessage()


def test_a_replays_setup_carries_its_trace_and_builds_the_same_bodies(tmp_path: Path) -> None:
    """A worker of a replay reads the same trace file and builds byte-identical bodies
    (the template's tokens travel as the calibration's overhead); a damaged trace field is
    one WireError naming it."""
    from tracebuild import mooncake_trace

    from anvil_metrics.load.body import TraceBodies
    from anvil_metrics.load.trace import TracePlan
    from anvil_metrics.prep.traceprompts import TracePrompts

    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 30)
    plan = TracePlan(str(path), "mooncake", 2.0, 20, 512, None)
    sc = replace(scenario_from_dict({"measurement_protocol": "wire", "requests": 20}),
                 trace=plan, warmup_requests=0)
    cal = Calibration("tokenize", 9.0, 1.0)
    master = TraceBodies(sc, "the-model", plan.read(), TracePrompts("nonce-1", 512, 9))
    setup = WorkerSetup("run-1", sc, "http://127.0.0.1:9", None, "the-model", cal, "nonce-1",
                        None, {}, None, [100])
    got = WorkerSetup.from_wire(over_locust("anvil_setup", setup.to_wire()))
    assert got.scenario.trace == plan and got.scenario.requests == 20
    session = WorkerSession(got, lambda *a: None)
    assert all(session.bodies.build_parts(0, i) == master.build_parts(0, i) for i in range(20))
    wire = setup.to_wire()
    wire["scenario"]["document"]["trace"]["speed"] = 0  # checked as a file's [trace] is
    with pytest.raises(WireError, match="scenario.document.trace.speed"):
        WorkerSetup.from_wire(wire)


def test_a_conversation_or_dataset_setup_gives_the_workers_the_same_bodies(tmp_path: Path
                                                                          ) -> None:
    """A conversation run's sized texts travel in the set-up, a dataset's path with the
    scenario: a worker's conversations and single prompts are the master's byte for byte."""
    from anvil_metrics.load.body import ConversationBodies, DatasetBodies
    from anvil_metrics.load.dataset import DatasetPlan
    from anvil_metrics.prep.turns import ConversationPrompts, TurnSizes, size_turn_texts

    sc = scenario_from_dict({"measurement_protocol": "wire", "max_tokens": 8,
                             "conversation": {"turns": 3, "turn_tokens": 30,
                                              "system_prompt_tokens": 10}})
    texts = size_turn_texts(TurnSizes(30, 0, 10), NO_CALIBRATION, 0, "nonce-1")
    master = ConversationBodies(sc, "the-model", ConversationPrompts(texts, "nonce-1"))
    setup = WorkerSetup("run-1", sc, "http://127.0.0.1:9", None, "the-model", NO_CALIBRATION,
                        "nonce-1", None, {}, None, [100],
                        {"turn": texts.turn, "prefix": texts.prefix, "system": texts.system})
    got = WorkerSetup.from_wire(over_locust("anvil_setup", setup.to_wire()))
    worker = WorkerSession(got, lambda *a: None).conversations
    assert worker is not None
    a, b = master.start(5), worker.start(5)
    assert a.header == b.header
    for _ in range(3):
        assert a.next_body() == b.next_body()
        a.answered("fine", 40)
        b.answered("fine", 40)
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    plain = replace(scenario_from_dict({"measurement_protocol": "wire"}),
                    dataset=DatasetPlan(str(data)))
    setup = WorkerSetup("run-1", plain, "http://127.0.0.1:9", None, "m", NO_CALIBRATION,
                        "nonce-1", None, {}, None, [100])
    got = WorkerSetup.from_wire(over_locust("anvil_setup", setup.to_wire()))
    assert got.scenario.dataset == DatasetPlan(str(data))
    bodies = WorkerSession(got, lambda *a: None).bodies
    assert isinstance(bodies, DatasetBodies)
    mine = DatasetBodies(plain, "m", DatasetPlan(str(data)).read())
    assert [bodies.build_parts(0, i) for i in range(3)] == [mine.build_parts(0, i)
                                                            for i in range(3)]


def test_a_datasets_counts_cross_to_the_workers_as_their_planned_sizes(tmp_path: Path
                                                                       ) -> None:
    """The master's --tokenizer counts of a dataset's entries travel in the set-up: a
    worker's requests have the same planned sizes as the master's; a damaged list is
    refused naming the field."""
    from anvil_metrics.load.body import DatasetBodies
    from anvil_metrics.load.dataset import DatasetPlan

    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "one"}\n{"prompt": "two two"}\n{"prompt": "three"}\n')
    plain = replace(scenario_from_dict({"measurement_protocol": "wire"}),
                    dataset=DatasetPlan(str(data)))
    master = DatasetBodies(plain, "m", DatasetPlan(str(data)).read(), [11, 12, 13])
    setup = WorkerSetup("run-1", plain, "http://127.0.0.1:9", None, "m", NO_CALIBRATION,
                        "nonce-1", None, {}, None, [100], dataset_counted=master.counted)
    got = WorkerSetup.from_wire(over_locust("anvil_setup", setup.to_wire()))
    bodies = WorkerSession(got, lambda *a: None).bodies
    assert isinstance(bodies, DatasetBodies)
    assert [bodies.planned(i, 100) for i in range(5)] == [
        master.planned(i, 100) for i in range(5)] == [11, 12, 13, 11, 12]
    uncounted = WorkerSetup.from_wire(over_locust("anvil_setup", replace(
        setup, dataset_counted=None).to_wire()))
    assert WorkerSession(uncounted, lambda *a: None).bodies.planned(0, 100) is None
    with pytest.raises(WireError, match="dataset_counted"):
        WorkerSetup.from_wire({**setup.to_wire(), "dataset_counted": [3, "x"]})


def test_a_replica_the_master_counts_dead_is_skipped_by_every_workers_balancer(
        caplog: pytest.LogCaptureFixture) -> None:
    """Master and worker back to back: the master's FailureWatch counts replica 1 dead
    (10 connection failures in a row there), `anvil_dead` reaches the worker, checked, and
    its least-in-flight balancer sends nothing more to replica 1; a replica the run does
    not have is refused with one line."""
    master_runner, worker_runner, master, worker = _back_to_back()
    master_runner.clients["W"] = SimpleNamespace(state="running")
    watch = FailureWatch(AbortRule(after_failures=10), 1, ["http://a", "http://b"],
                         lambda reason: None)
    session = SimpleNamespace(run_id="run-1", budget=RequestBudget(4, 0, [4096]), writer=None,
                              watch=watch)
    setup = replace(_setup({"balance": "least-in-flight"})[0],
                    host="http://127.0.0.1:9,http://127.0.0.1:8")
    c = master.start_run(session, setup)
    watch.on_dead.append(lambda replica: c.tell_workers("anvil_dead", replica=replica))
    c.add_worker("W")  # its set-up crosses; the worker's session has both replicas
    s = worker.session
    assert s is not None and s.balancer.dead == [False, False]
    balancer = s.balancer
    picks = [balancer.pick(i) for i in range(4)]
    assert sorted(picks) == [0, 0, 1, 1]  # both live: each gets its share
    for i in range(10):
        watch.take(RequestRecord(i, 0, 1, failure=Failure("connection", "refused", None),
                                 extra={"replica": 1}))
    assert watch.reasons[1] is not None and balancer.dead == [False, True]
    assert [balancer.pick(i) for i in range(4, 8)] == [0, 0, 0, 0]
    with caplog.at_level(logging.DEBUG, logger="anvil"):
        c.tell_workers("anvil_dead", replica=2)  # no such replica in this run
        c.tell_workers("anvil_dead", replica="1")  # damaged
    assert balancer.dead == [False, True]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("\n" not in x for x in lines)
    assert "anvil_dead: replica = 2 is not allowed" in lines[0]
    assert "anvil_dead: replica " in lines[1]
    s.finish()
