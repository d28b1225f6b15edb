"""The messages between a distributed run's master and its workers, as plain data.

Locust carries custom messages as msgpack: dicts, lists, ints, floats, strings, bools, None
and bytes. Every anvil message is made of those alone, so a message can only ever be read
as data: a worker runs nothing that a peer on the master port sends it.

Every message is checked on receipt before anything acts on it (`check_message`, and
`WorkerSetup.from_wire` for the set-up). A damaged one (a missing field, a wrong type, a peer of
another anvil version) raises `WireError`, which names the message, the field, the value
(shortened) and what is allowed; the receiver logs that one line and drops the message
(see `refusing`), and a worker that cannot read its set-up says so in its hello.

The set-up (`WorkerSetup`) crosses as `setup.to_wire()`::

    {"version": 6, "run_id": str, "host": str, "api_key": str | None, "model": str,
     "scenario": {"source": str | None, "document": <the scenario's TOML-shaped document>},
     "calibration": {"method": str, "overhead_tokens": float, "tokens_per_word": float},
     "run_nonce": str, "shared": {"prefix_tokens": int, "group_size": int} | None,
     "words": [[planned size, body words], ...], "prefix_words": int | None,
     "sizes": [planned size, ...]}

Maps keyed by a token count travel as lists of pairs (`words`) or, in the scenario's
document, with string keys as in TOML (`context_distribution`): msgpack and JSON do not
keep integer keys everywhere, so no integer key is ever sent.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anvil_metrics.errors import MISSING, ScenarioError, WireError
from anvil_metrics.live.stuck import StuckReport
from anvil_metrics.load.scenario import Scenario, scenario_from_dict, scenario_to_dict
from anvil_metrics.post.schema import CALIBRATION_METHODS
from anvil_metrics.prep.prompts import Calibration, SharedPrefix
from anvil_metrics.records import RequestRecord

log = logging.getLogger("anvil")
# An open loop's ticket goes to its worker this long before it falls due, and the worker
# waits out the rest on its own clock (`worker.RemoteBudget`): the message's way (~1-4 ms,
# more on a busy master) is then not in the request's lag. A stop in that time still lets
# the request go (at most this late in the run's end). An agent job's follow-up is asked
# for this long before its wait ends, for the same reason (`live/agentahead.py`).
TICKET_LEAD_NS = 10_000_000

SETUP = "anvil_setup"
SETUP_VERSION = 6  # bump when the set-up's shape changes: an older worker then refuses it
# (6: `opening_tokens`, the chat template's tokens inside an agent prompt's first block)


def boot_id() -> str | None:
    """The kernel's boot id: two processes with the same one read the same monotonic
    clock (`perf_counter_ns` is CLOCK_MONOTONIC on Linux). None where unknown."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


# --- checking a field ----------------------------------------------------------------------

# A check: (is this value allowed?, what is allowed, for the error).
Check = tuple[Callable[[Any], bool], str]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def at_least(n: int) -> Check:
    return (lambda v: _is_int(v) and v >= n), f"a whole number >= {n}"


def optional(check: Check) -> Check:
    ok, allowed = check
    return (lambda v: v is None or ok(v)), f"null or {allowed}"


INT: Check = (_is_int, "a whole number")
STR: Check = (lambda v: isinstance(v, str), "a string")
TEXT: Check = (lambda v: isinstance(v, str) and bool(v), "a non-empty string")
DICT: Check = (lambda v: isinstance(v, dict), "a dict")
BOOL: Check = (lambda v: isinstance(v, bool), "true or false")
NUMBER: Check = (lambda v: _is_int(v) or (isinstance(v, float) and math.isfinite(v)),
                 "a finite number")
TICKET: Check = (lambda v: v is None or (
    isinstance(v, list) and len(v) == 6 and _is_int(v[0]) and v[0] >= 0
    and isinstance(v[1], bool) and _is_int(v[2]) and v[2] >= 1
    and (v[3] is None or _is_int(v[3])) and isinstance(v[4], bool)
    and (v[5] is None or (_is_int(v[5]) and v[5] >= 0))),
    "null or [request_index >= 0, warmup true/false, planned_context_tokens >= 1, "
    "due_ns (an integer on the worker's clock) or null, waited true/false, start (a "
    "budget of starts: its number >= 0) or null]")
COUNTS: Check = (lambda v: isinstance(v, list) and all(_is_int(n) and n >= 0 for n in v),
                 "a list of token counts")
SIZES: Check = (lambda v: isinstance(v, list) and len(v) > 0 and all(
    _is_int(x) and x >= 1 for x in v), "a non-empty list of planned sizes (whole numbers >= 1)")
LINES: Check = (lambda v: isinstance(v, list) and all(isinstance(x, bytes) for x in v),
                "a list of records, each one JSON line as bytes")


def need(data: dict[str, Any], key: str, check: Check, message: str, path: str = "",
         secret: bool = False) -> Any:
    """`data[key]` when `check` allows it; else WireError naming `message`, the field
    (`path` + `key`), its value (only its type when `secret`) and what is allowed."""
    ok, allowed = check
    value = data.get(key, MISSING)
    if value is MISSING or not ok(value):
        raise WireError(message, path + key, value, allowed, secret=secret)
    return value


# --- the small messages -----------------------------------------------------------------------

# A worker's report of its stuck requests (`live/stuck.py`): each field of `StuckReport`
STUCK: dict[str, Check] = {
    "threshold_s": NUMBER, "in_flight_requests": at_least(0),
    "waiting_first_byte_requests": at_least(0), "idle_mid_stream_requests": at_least(0),
    "oldest_s": optional(NUMBER), "headers_received_requests": at_least(0),
    "oldest_waiting_first_byte_s": optional(NUMBER),
    "oldest_idle_mid_stream_s": optional(NUMBER)}

# The fields each message must carry (more are ignored). `run_id` names the run a message
# belongs to: one of another run is well-formed, and its receiver ignores it.
MESSAGES: dict[str, dict[str, Check]] = {
    "anvil_hello": {"run_id": optional(TEXT), "worker": TEXT, "host": STR,
                    "pid": at_least(0), "boot_id": optional(STR), "error": optional(STR)},
    "anvil_ping": {"run_id": TEXT, "seq": at_least(0), "t_master_ns": INT},
    "anvil_pong": {"run_id": TEXT, "seq": at_least(0), "t_worker_ns": INT},
    "anvil_take": {"run_id": TEXT, "seq": at_least(1), "followup": BOOL},
    "anvil_drop": {"run_id": TEXT},
    "anvil_ticket": {"run_id": TEXT, "seq": at_least(1), "ticket": TICKET},
    "anvil_records": {"run_id": TEXT, "lines": LINES},
    "anvil_stop": {"run_id": TEXT},
    "anvil_dead": {"run_id": TEXT, "replica": at_least(0)},
    "anvil_done": {"run_id": TEXT, "sent": at_least(0), "health": optional(DICT)},
    "anvil_stuck": {"run_id": TEXT, **STUCK},
    "anvil_job_end": {"run_id": TEXT, "job": at_least(0), "answered": at_least(0),
                      "completed": BOOL},
}


# An agent job's end (`anvil_events.job_end`'s arguments): a worker's `anvil_job_end`
JOB_END = ("job", "answered", "completed")


def conversation_over(record: RequestRecord) -> bool:
    """No later turn of the record's conversation will be asked for: it failed, it was its
    conversation's last drawn turn, or it is no conversation's (what the worker's user
    decided, read back from the record for the master's budget)."""
    extra = record.extra or {}
    if "job" in extra:  # an agent job's request: its job ends by its worker's `anvil_drop`
        return False
    if record.failure is not None or "conversation" not in extra:
        return True
    turn, turns = extra.get("turn"), extra.get("turns")
    return not (isinstance(turn, int) and isinstance(turns, int) and turn < turns)


def stuck_to_wire(run_id: str, report: StuckReport) -> dict[str, Any]:
    """A worker's `anvil_stuck` message: the run and its report's fields."""
    return {"run_id": run_id, **{k: getattr(report, k) for k in STUCK}}


def stuck_from_wire(data: dict[str, Any]) -> StuckReport:
    """The report of an `anvil_stuck` message (checked: `check_message`)."""
    return StuckReport(**{k: data[k] for k in STUCK})


def check_message(message: str, data: Any) -> dict[str, Any]:
    """`data` if it is a dict whose fields `MESSAGES[message]` allows; else WireError."""
    if not isinstance(data, dict):
        raise WireError(message, "data", data, "a dict of fields")
    for key, check in MESSAGES[message].items():
        need(data, key, check, message)
    return data


def refusing(message: str, act: Callable[[Any], None], sender: Callable[[Any], str]
             ) -> Callable[..., None]:
    """A Locust listener for `message` that checks it first: a damaged one is logged on one
    line (naming `sender(msg)`) and dropped; a sound one is passed to `act(msg)`."""
    def listener(msg: Any, **_: Any) -> None:
        try:
            check_message(message, msg.data)
        except WireError as e:
            log.error("anvil: refused a message from %s: %s", sender(msg), e)
            return
        act(msg)
    return listener


# --- the set-up --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerSetup:
    """Everything a worker needs to send the run's requests exactly as a single process
    would: the scenario (as loaded on the master), the endpoint, the served model and the
    prompt calibration (word counts per planned size, so bodies are identical)."""

    run_id: str
    scenario: Scenario
    host: str
    api_key: str | None
    model: str
    calibration: Calibration
    run_nonce: str
    shared: SharedPrefix | None
    words: dict[int, int]
    prefix_words: int | None
    sizes: list[int]
    # a conversation run's sized texts (`prep.turns.TurnTexts`: turn, prefix, system), so a
    # worker's conversations are the master's byte for byte; None otherwise
    turn_texts: dict[str, str | None] | None = None
    # a dataset's entries as the master's --tokenizer counted them (`DatasetBodies.counted`):
    # a worker's rows get the same planned sizes; None: not counted
    dataset_counted: list[int] | None = None
    # a mix's trace classes: the chat template's tokens their blocks are sized around
    template_tokens: int = 0
    # agent jobs: the template's tokens before a message, inside each first block
    opening_tokens: int = 0

    def to_wire(self) -> dict[str, Any]:
        """The set-up as plain data (see the module docstring)."""
        return {
            "version": SETUP_VERSION,
            "run_id": self.run_id,
            "scenario": scenario_to_wire(self.scenario),
            "host": self.host,
            "api_key": self.api_key,
            "model": self.model,
            "calibration": calibration_to_wire(self.calibration),
            "run_nonce": self.run_nonce,
            "shared": shared_to_wire(self.shared),
            "words": [[size, n] for size, n in self.words.items()],
            "prefix_words": self.prefix_words,
            "sizes": list(self.sizes),
            "turn_texts": self.turn_texts,
            "dataset_counted": self.dataset_counted,
            "template_tokens": self.template_tokens,
            "opening_tokens": self.opening_tokens,
        }

    @classmethod
    def from_wire(cls, data: Any) -> WorkerSetup:
        """The set-up `to_wire` gave, every field checked; WireError on the first bad one."""
        if not isinstance(data, dict):
            raise WireError(SETUP, "data", data, "a dict of set-up fields (a master of "
                            "another anvil version sends something else: run one version)")
        need(data, "version", ((lambda v: _is_int(v) and v == SETUP_VERSION),
                               f"{SETUP_VERSION} (run the master and the workers from the "
                               "same anvil version)"), SETUP)
        return cls(
            run_id=need(data, "run_id", TEXT, SETUP),
            scenario=scenario_from_wire(need(data, "scenario", DICT, SETUP)),
            host=need(data, "host", TEXT, SETUP, secret=True),  # may hold user:password@
            api_key=need(data, "api_key", optional(STR), SETUP, secret=True),
            model=need(data, "model", STR, SETUP),
            calibration=calibration_from_wire(need(data, "calibration", DICT, SETUP)),
            run_nonce=need(data, "run_nonce", TEXT, SETUP),
            shared=shared_from_wire(need(data, "shared", optional(DICT), SETUP)),
            words=pairs_from_wire(need(data, "words", (lambda v: isinstance(v, list),
                                                       "a list of [size, words] pairs"),
                                       SETUP), "words"),
            prefix_words=need(data, "prefix_words", optional(at_least(1)), SETUP),
            sizes=list(need(data, "sizes", SIZES, SETUP)),
            turn_texts=_turn_texts_from_wire(need(data, "turn_texts", optional(DICT), SETUP)),
            dataset_counted=need(data, "dataset_counted", optional(COUNTS), SETUP),
            template_tokens=need(data, "template_tokens", at_least(0), SETUP),
            opening_tokens=need(data, "opening_tokens", at_least(0), SETUP),
        )


def _turn_texts_from_wire(d: dict[str, Any] | None) -> dict[str, str | None] | None:
    if d is None:
        return None
    for key, check in (("turn", TEXT), ("prefix", STR), ("system", optional(STR))):
        need(d, key, check, SETUP, "turn_texts.")
    return {k: d[k] for k in ("turn", "prefix", "system")}


def scenario_to_wire(sc: Scenario) -> dict[str, Any]:
    """The scenario's file form (a replay's `[trace]` and a `[dataset]` in it: each worker
    reads the same file, so it must be at that path on every worker's host)."""
    return {"source": sc.source, "document": scenario_to_dict(sc)}


def scenario_from_wire(d: dict[str, Any]) -> Scenario:
    """The scenario, checked by the same rows and rules as a scenario file
    (`scenario_from_dict`)."""
    source = need(d, "source", optional(STR), SETUP, "scenario.")
    doc = need(d, "document", DICT, SETUP, "scenario.")
    dist = doc.get("context_distribution")
    if isinstance(dist, dict):
        for k in dist:
            if not isinstance(k, str):
                raise WireError(SETUP, "scenario.document.context_distribution", k,
                                "keys that are token counts written as strings")
    try:
        return scenario_from_dict(doc, source=source)
    except ScenarioError as e:
        raise WireError(SETUP, f"scenario.document.{e.field}", e.value, e.allowed) from None


def calibration_to_wire(c: Calibration) -> dict[str, Any]:
    return {"method": c.method, "overhead_tokens": c.overhead_tokens,
            "tokens_per_word": c.tokens_per_word}


def calibration_from_wire(d: dict[str, Any]) -> Calibration:
    method = need(d, "method", ((lambda v: isinstance(v, str) and v in CALIBRATION_METHODS),
                                f"one of {list(CALIBRATION_METHODS)}"), SETUP, "calibration.")
    overhead = need(d, "overhead_tokens", NUMBER, SETUP, "calibration.")
    per_word = need(d, "tokens_per_word", ((lambda v: NUMBER[0](v) and v > 0),
                                           "a finite number > 0"), SETUP, "calibration.")
    return Calibration(method, float(overhead), float(per_word))


def shared_to_wire(s: SharedPrefix | None) -> dict[str, Any] | None:
    return None if s is None else {"prefix_tokens": s.prefix_tokens,
                                   "group_size": s.group_size}


def shared_from_wire(d: dict[str, Any] | None) -> SharedPrefix | None:
    if d is None:
        return None
    return SharedPrefix(need(d, "prefix_tokens", at_least(1), SETUP, "shared."),
                        need(d, "group_size", at_least(1), SETUP, "shared."))


def pairs_from_wire(pairs: list[Any], name: str) -> dict[int, int]:
    """`[[size, n], ...]` (sizes distinct, both >= 1) as the dict `{size: n}`, in order."""
    out: dict[int, int] = {}
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(
                _is_int(x) and x >= 1 for x in pair) and pair[0] not in out):
            raise WireError(SETUP, f"{name}[{i}]", pair,
                            "[planned size, count], whole numbers >= 1, each size once")
        out[pair[0]] = pair[1]
    return out
