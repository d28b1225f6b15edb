"""What a client could have measured, from the simulator's send stamps (`--stamp-send`):
the truth the end-to-end timing tests judge anvil's stamps against.

Why one place: test_truth judges each request's stamps and test_summarize a campaign's
aggregated deltas by the same two facts:

- a chunk cannot be read before it was sent, and chunks read together (the same anvil
  stamp: `chunk_deltas_ns` 0) cannot be read before the last of them was sent. Beside a
  busy machine the kernel delivered 15 chunks sent over 112 ms in one read, 125 ms after
  the first was sent, while the client's loop never waited more than 9 ms: such a delay is
  the delivery's, not the client's, and is taken out (`readable_ns`);
- beyond that, a stamp is late only by the client's own waits, which its loop-lag monitor
  records: no later than two of its worst wake-ups plus an interval and a delivery
  (`lag_bounds_ms`; test_truth's docstring says why two).
"""

from __future__ import annotations

LAGMON_INTERVAL_MS, DELIVERY_MS = 1.0, 1.0


def readable_ns(rec: dict) -> dict[str, int]:
    """For a raw request record of a run against a `--stamp-send` simulator: per stamp
    (`first_output_ns`, `first_content_ns`, `end_ns`), the earliest moment its bytes could
    have been read — the send of the last chunk read together with that stamp's chunk."""
    srv = rec["extra"]["server"]
    sent = srv["chunks_sent_ns"]
    stamps, t = [], rec["start_ns"]
    for delta in rec["chunk_deltas_ns"]:
        t += delta
        stamps.append(t)
    assert len(sent) == len(stamps), (len(sent), len(stamps))  # one send stamp per chunk

    def readable(k: int) -> int:
        j = k
        while j + 1 < len(stamps) and stamps[j + 1] == stamps[k]:
            j += 1
        return max(sent[k:j + 1])

    out = {"first_output_ns": readable(0), "end_ns": srv["last_sent_ns"]}  # none after it
    assert stamps[0] == rec["first_output_ns"] and sent[0] == srv["first_output_sent_ns"]
    if "c" in rec["chunk_channels"]:
        k = rec["chunk_channels"].index("c")
        assert (stamps[k], sent[k]) == (rec["first_content_ns"], srv["first_content_sent_ns"])
        out["first_content_ns"] = readable(k)
    return out


def lag_bounds_ms(doc: dict) -> tuple[float, float]:
    """(typical, every-request) bound in ms on a stamp's lag behind `readable_ns`, from the
    run's own loop lag (benchmark.json `client.loop_lag_ms`): the typical stamp is no later
    than the loop's p99 wake-up plus an interval of the monitor and a delivery; no stamp is
    later than two of its worst wake-ups plus those. Why two: a stall holds the monitor and
    the streams alike, and after it the hub runs every ready greenlet in one turn of its
    loop, the monitor among them; a stream served after the monitor in that turn is late by
    the monitor's lag plus the rest of the turn (16 streams' bunched chunks parsed one after
    another), and that rest is the lag the monitor sees at its next wake-up (seen: a first
    output 408 ms late, the loop's max 365)."""
    lag = doc["client"]["loop_lag_ms"]
    assert lag["samples"] > 10 and lag["max"] >= lag["p99"] >= 0, lag
    slack = LAGMON_INTERVAL_MS + DELIVERY_MS
    return lag["p99"] + slack, 2 * lag["max"] + slack
