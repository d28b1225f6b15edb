"""truth: the simulator's send stamps kept beside a stream's — each output chunk's in
order, the first output's and first content's once, the last of any chunk — and none for
a server that sends no header.

Why: the truth tests judge every client stamp against these; a first-content stamp taken
from a reasoning chunk would make anvil's TTFT look early by the whole reasoning phase.
"""

from __future__ import annotations

from anvil_metrics.wire.truth import CHUNK_KEY, T0_HEADER, SendStamps, from_headers


def test_no_header_no_stamps() -> None:
    assert from_headers({}.get) is None
    assert from_headers({T0_HEADER: ""}.get) is None
    assert from_headers({T0_HEADER: "1234"}.get).stamps == {"t0_ns": 1234}


def test_stamps_of_a_reasoning_then_content_stream() -> None:
    s = SendStamps(100)
    s.chunk({CHUNK_KEY: 110}, output=False, content=False)  # role only
    s.chunk({CHUNK_KEY: 120}, output=True, content=False)  # reasoning
    s.chunk({CHUNK_KEY: 130}, output=True, content=True)
    s.chunk({CHUNK_KEY: 140}, output=True, content=True)
    s.chunk({}, output=True, content=True)  # a chunk without a stamp changes nothing
    s.chunk({CHUNK_KEY: 150}, output=False, content=False)  # usage
    assert s.stamps == {"t0_ns": 100, "last_sent_ns": 150, "chunks_sent_ns": [120, 130, 140],
                        "first_output_sent_ns": 120, "first_content_sent_ns": 130}
