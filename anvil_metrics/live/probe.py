"""`--probe-rate R`: the head-of-line probe, how much the load delays an unrelated request.

Why: a load's own latencies say how its requests fare; they do not say what a newcomer
waits before the server starts on it (a full batch, a queue, a prefill it must wait
behind). A probe is a tiny request — a short prompt unique to it (so no prefix cache
answers it), `max_tokens` 1, streamed — whose time to first output is that wait plus one
short prefill. Sent idle before the load (`--probe-idle N`, one at a time: the baseline)
and at Poisson times during it (`load/arrivals.py`'s schedule, its own seed), the
difference of their TTFTs is the delay the load imposes.

Why their own connections: vLLM's `--probe-request-rate` sends its probes through the
benchmark's own connection pool, so a probe waits behind the load *in the client* (a free
connection, the pool's queue) and the client's wait is taken for the server's. Here each
probe in flight holds its own `ChatClient` (its own TCP connection; idle ones are reused
by later probes, never by the users), outside the request budget, the concurrency cap and
the run's records: its line goes to `probe.jsonl` beside the run, flushed as written, never
to `requests.jsonl`, so no row, figure or failure count of the run includes a probe.

Where: one greenlet of the process that owns the run's session (the local process, or a
distributed run's master): one schedule for the whole run, as its arrivals are. Each line:

    {"type": "plan", "rate_rps": R, "idle": N, "seed": S}            # the first line
    {"type": "probe", "probe": k, "phase": "idle"|"load", "step": i|null, "due_ns": ...,
     "start_ns": ..., "first_output_ns": ...|null, "end_ns": ...|null, "failure": kind|null}

`step`: the sweep step in force when the probe was sent (null outside a stepped run).
`post/probeblock.py` builds the benchmark's `probe` block from it, and verify recomputes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import orjson
from gevent.pool import Group

from anvil_metrics.load.arrivals import ArrivalPlan, Schedule
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.post.probeblock import PROBE_FILE
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient
from anvil_metrics.wire.observe import StreamObserver

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 256  # probes at once (a dead server must not grow the greenlets unbounded)
SEED_OFFSET = 7919  # the probes' schedule is not the load's (same seed, other draws)
STOP_WAIT_S = 10.0  # at the end, how long probes in flight may take to finish


class ProbeRunner:
    """The probes of one run (module docstring): `idle_baseline()` before the load,
    `start()` as it begins, `stop()` when it ends. `step_now()`: the sweep step in force."""

    def __init__(self, endpoint: Endpoint, make_client: Callable[[], ChatClient], model: str,
                 rate_rps: float, idle: int, seed: int, nonce: str, run_dir: Path,
                 step_now: Callable[[], int | None]) -> None:
        self.endpoint, self.model, self.nonce = endpoint, model, nonce
        self.plan = ArrivalPlan(rate_rps, "poisson", 1.0, seed)
        self.idle, self._make_client, self.step_now = idle, make_client, step_now
        self._file = open(run_dir / PROBE_FILE, "ab")  # noqa: SIM115 - open for the run
        self._write({"type": "plan", "rate_rps": rate_rps, "idle": idle, "seed": seed})
        self._free: list[ChatClient] = []  # idle probe connections, never the users'
        self._group = Group()
        self._loop: gevent.Greenlet | None = None
        self._k = 0

    def _write(self, line: dict[str, Any]) -> None:
        self._file.write(orjson.dumps(line) + b"\n")
        self._file.flush()

    def _probe(self, k: int, phase: str, due_ns: int) -> None:
        """Send probe `k` and write its line."""
        client = self._free.pop() if self._free else self._make_client()
        step = self.step_now() if phase == "load" else None
        body = orjson.dumps({"model": self.model, "max_tokens": 1, "stream": True,
                             "messages": [{"role": "user",
                                           "content": f"probe {self.nonce} {k}: say ok"}]})
        obs = StreamObserver(k, due_ns, max_tokens=1)
        try:
            client.stream_chat(body, obs, headers=b"x-anvil-probe: %d\r\n" % k)
        finally:
            self._free.append(client)
        rec = obs.finish()
        failure = rec.failure.kind if rec.failure is not None else None
        self._write({"type": "probe", "probe": k, "phase": phase, "step": step,
                     "due_ns": due_ns, "start_ns": rec.start_ns,
                     "first_output_ns": rec.first_output_ns, "end_ns": rec.end_ns,
                     "failure": failure})

    def idle_baseline(self) -> None:
        """The idle probes, one after another, before any load is sent."""
        for _ in range(self.idle):
            self._k += 1
            self._probe(self._k - 1, "idle", time.perf_counter_ns())

    def start(self) -> None:
        """The load's probes: one greenlet following the Poisson schedule from now."""
        self._loop = gevent.spawn(self._run, time.perf_counter_ns())

    def _run(self, origin_ns: int) -> None:
        schedule = Schedule(self.plan)
        for i in range(1 << 62):
            due = origin_ns + schedule.offset_ns(i)
            gevent.sleep(max(0.0, (due - time.perf_counter_ns()) / 1e9))
            if len(self._group) >= MAX_IN_FLIGHT:
                continue  # skipped, not queued: a probe never waits in the client
            self._k += 1
            self._group.spawn(self._probe, self._k - 1, "load", due)

    def stop(self) -> None:
        """No new probe; those in flight get `STOP_WAIT_S` to finish; the file closed."""
        if self._loop is not None:
            self._loop.kill()
        self._group.join(timeout=STOP_WAIT_S)
        self._group.kill()
        for client in self._free:
            client.close()
        self._file.close()
        log.info("anvil: %d probes sent (%s)", self._k, PROBE_FILE)


def start_probe(sc: Scenario, endpoint: Endpoint, api_key: str | None, model: str, nonce: str,
                run_dir: Path, step_now: Callable[[], int | None]) -> ProbeRunner | None:
    """With `--probe-rate`, the run's probes, their idle baseline sent now (the load waits
    for it); None without. Their seed: the arrivals' plus a constant (its own draws)."""
    if sc.probe_rate is None:
        return None
    to = sc.timeouts

    def client() -> ChatClient:
        return ChatClient(endpoint, api_key, connect_timeout_s=to.connect_s,
                          network_timeout_s=to.first_byte_s, idle_timeout_s=to.idle_s,
                          total_timeout_s=to.total_s, extra_headers=sc.headers)

    seed = (sc.arrivals.seed if sc.arrivals is not None else 0) + SEED_OFFSET
    probe = ProbeRunner(endpoint, client, model, sc.probe_rate, sc.probe_idle, seed, nonce,
                        run_dir, step_now)
    probe.idle_baseline()
    return probe
