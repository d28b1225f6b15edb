"""The recorder: one listener, every record to every sink in order, none after stop."""

from __future__ import annotations

from pathlib import Path

from anvil_metrics.events import anvil_events
from anvil_metrics.live.recorder import RawWriter, Recorder
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.records import RequestRecord


class _Sink:
    def __init__(self) -> None:
        self.taken: list[int] = []

    def take(self, record: RequestRecord) -> None:
        self.taken.append(record.request_index)


def test_each_record_reaches_every_sink_in_order_until_stop(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    writer = RawWriter(path)
    writer.write_header("benchmark-20260801T160039Z", {})
    a, b = _Sink(), _Sink()
    recorder = Recorder(anvil_events.request_record, writer, a, b)
    recorder.start()
    for i in range(3):
        anvil_events.request_record.fire(record=RequestRecord(i, start_ns=i, end_ns=i + 1))
    recorder.stop()
    anvil_events.request_record.fire(record=RequestRecord(9, start_ns=0, end_ns=1))
    writer.close()
    assert a.taken == b.taken == [0, 1, 2]
    assert [r.request_index for r in read_raw(path).records] == [0, 1, 2]
