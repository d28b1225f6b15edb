"""``--burst N``: token chunks written N at a time, pre-serialised, in one socket write.

Why: to measure a client's capacity (SSE events parsed per CPU-second) the simulator must never
be the limit. Per token it costs a timer wake, a bytes format and a write; with bursts it costs
one wake and one write per N tokens, and each stream's chunk bytes are encoded once (without
``--stamp-send``) and only joined afterwards. Real servers send such bursts too (vLLM's
multi-step scheduling, speculative decoding).

The plan, for an answer of T tokens (token i due at ``prefill_end + i * interval`` as always):
burst k holds tokens ``kN … min(kN + N, T) - 1`` and is written at the deadline of its last
token, so no token leaves before its own deadline; the first burst therefore leaves at
``prefill_end + (min(N, T) - 1) * interval``. Every SSE event is still its own HTTP chunk
(the simulator's framing promise); only the socket write is shared. The last burst also holds
the finish chunk, the usage chunk and ``[DONE]`` as configured, and the chunked terminator. The
response head and role chunk go out at once as today (or, with ``--role-chunk
with-first-token``, in front of the first burst). With ``--stamp-send`` each chunk is encoded
at write time with its own stamp (all of one burst's stamps a few µs apart, before the write).

``--burst 1`` (the default) never reaches this module: the server then builds plain
`ChatStream`s, token by token, exactly as before.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from anvil_metrics.sim.chat import DONE_EVENT, ROLE_TAIL, ChatStream, t0_header
from anvil_metrics.sim.ledger import LEDGER

_monotonic_ns = time.monotonic_ns


class BurstChatStream(ChatStream):
    """A `ChatStream` that writes `cfg.burst` token chunks per deadline (see module doc)."""

    __slots__ = ("_burst", "_total", "_cycle_r", "_cycle_c")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._burst = max(1, self._cfg.burst)
        self._total = self._plan.total
        # pre-serialised events of each piece, repeated so any burst is one slice (no stamps)
        self._cycle_r: list[bytes] | None = None
        self._cycle_c: list[bytes] | None = None

    def burst_due_ns(self, i: int) -> int:
        """Deadline of the burst that starts at token `i`: that of its last token."""
        last = min(i + self._burst, self._total) - 1
        return self._prefill_end + max(last, 0) * self._interval

    def _cycle(self, channel: str) -> list[bytes]:
        bodies = self._bodies_r if channel == "r" else self._bodies_c
        events = [self._enc.event(tail) for tail in bodies]
        repeat = 1 + -(-self._burst // len(events))  # any slice [s, s + burst) with s < len fits
        return events * repeat

    def _token_events(self, start: int, stop: int) -> list[bytes]:
        """Encoded events of tokens `start` … `stop - 1` (none of them the finish token)."""
        if start >= stop:
            return []
        r = self._reasoning
        if self._enc.stamp:  # each chunk its own stamp, taken now
            event, out = self._enc.event, []
            for i in range(start, stop):
                if i < r:
                    out.append(event(self._bodies_r[i % len(self._bodies_r)]))
                else:
                    out.append(event(self._bodies_c[(i - r) % len(self._bodies_c)]))
            return out
        out = []
        if start < r:
            if self._cycle_r is None:
                self._cycle_r = self._cycle("r")
            s = start % len(self._bodies_r)
            out += self._cycle_r[s : s + min(stop, r) - start]
            start = r
        if start < stop:
            if self._cycle_c is None:
                self._cycle_c = self._cycle("c")
            s = (start - r) % len(self._bodies_c)
            out += self._cycle_c[s : s + stop - start]
        return out

    def fire(self) -> None:
        """Write the burst starting at token `_next` in one write; schedule the next burst.

        Called at the prefill deadline (by `start`, or by a prefix cache's `PrefillDone`), it
        first waits for the first burst's own deadline.
        """
        conn = self._conn
        if conn.closed:
            return
        try:
            i = self._next
            due = self.burst_due_ns(i)
            if _monotonic_ns() < due:
                self._sched.at(due, self)
                return
            parts: list[bytes] = []
            if i == 0:
                LEDGER.first_token(self)
            if not self._head_sent:
                head = conn.stream_head(extra=t0_header(self._cfg, self._t0, self._start))
                parts.append(head + self._enc.event(ROLE_TAIL))
                self._head_sent = True
            stop = i + self._burst
            if stop <= self._last:  # a whole burst of ordinary tokens
                parts += self._token_events(i, stop)
                conn.write(b"".join(parts))
                self._next = stop
                self._sched.at(self.burst_due_ns(stop), self)
                return
            last = max(self._last, 0)  # the finish token (index 0 of an empty answer)
            parts += self._token_events(i, last)
            parts += self._closing_events(last)
            conn.stream_end(b"".join(parts))
            LEDGER.completed(self)
        except Exception:
            conn.abort()
            raise

    def _closing_events(self, i: int) -> list[bytes]:
        """Finish chunk of token `i`, then usage and ``[DONE]`` as configured (as `_finish`)."""
        events = [self._enc.event(self._finish_tail(i))]
        if self._include_usage and not self._cfg.usage_in_finish_chunk:
            events.append(self._enc.event(b'"choices":[],"usage":%s}' % orjson.dumps(self._usage)))
        if self._send_done:
            events.append(DONE_EVENT)
        return events
