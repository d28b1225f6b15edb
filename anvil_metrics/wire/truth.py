"""The simulator's own send stamps, kept beside a stream's: the truth anvil is tested against.

Why its own piece: anvil's simulator with `--stamp-send` (same host, same clock) sends, in a
response header, the moment the request reached it (`anvil-t0-ns`), and in every chunk the
moment just before it wrote that chunk (`"anvil_sent_ns"`). The truth tests and the timing
benchmarks set each client stamp against them. A real server sends neither, so the client
attaches a `SendStamps` to a stream's observer only when the response carries the header:
streams from real servers pay nothing for it, not even a lookup per chunk.

What it keeps goes to the raw record's `extra.server`: `t0_ns`, `first_output_sent_ns`,
`first_content_sent_ns`, `last_sent_ns`, and `chunks_sent_ns` — each output chunk's send
stamp in order, so that chunk i's bias is its arrival (`start_ns + cumsum(chunk_deltas_ns)`)
minus `chunks_sent_ns[i]`.
"""

from __future__ import annotations

from typing import Any

T0_HEADER = "anvil-t0-ns"
CHUNK_KEY = "anvil_sent_ns"


class SendStamps:
    """One stream's send stamps from a stamping server."""

    __slots__ = ("stamps",)

    def __init__(self, t0_ns: int) -> None:
        self.stamps: dict[str, Any] = {"t0_ns": t0_ns}

    def chunk(self, chunk: dict[str, Any], output: bool, content: bool) -> None:
        """A parsed chunk: `output` when it carried a reasoning, content or tool-call delta,
        `content` when a content or tool-call delta."""
        sent_ns = chunk.get(CHUNK_KEY)
        if sent_ns is None:
            return
        stamps = self.stamps
        stamps["last_sent_ns"] = sent_ns
        if output:
            stamps.setdefault("chunks_sent_ns", []).append(sent_ns)
            stamps.setdefault("first_output_sent_ns", sent_ns)
            if content:
                stamps.setdefault("first_content_sent_ns", sent_ns)


def from_headers(get: Any) -> SendStamps | None:
    """A `SendStamps` when the response headers (`get(name)`) carry the simulator's t0."""
    t0 = get(T0_HEADER)
    return SendStamps(int(t0)) if t0 else None
