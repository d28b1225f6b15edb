"""The recorder: every finished raw record, as it happens, to where it belongs.

`Recorder` is the one listener on `anvil_events.request_record` a run installs (it is given
that hook, so this module does not import Locust: `anvil postprocess` and `anvil run` use
its helpers without starting it), so what it records is exactly what any other listener
sees. It hands each record to its sinks
(`RecordSink`): on a single process or a distributed master, `RawWriter` (the
`requests.jsonl` file) and the live figures; on a distributed worker, the shipper that
batches records to the master (`cluster.worker.RecordShipper`).

`RawWriter` appends `requests.jsonl`. Each line is flushed to the OS when written: a killed process
loses at most the line being written (which `rawread` tolerates as a torn last line), never
a finished request. The run folder is created exclusively, so two runs started in the same
second get distinct folders (`benchmark-…Z`, `benchmark-…Z-2`, …) and never share a file.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson

from anvil_metrics.records import RAW_SCHEMA, RequestRecord


class RecordSink(Protocol):
    """Where finished records go."""

    def take(self, record: RequestRecord) -> None:
        """Take one finished record (called in the order records finish)."""


class Hook(Protocol):
    """A Locust `EventHook` (`anvil_events.request_record`)."""

    def add_listener(self, handler: Any) -> Any: ...

    def remove_listener(self, handler: Any) -> None: ...


class Recorder:
    """The run's one listener on `hook` (`anvil_events.request_record`): each record to
    every sink, in order, from `start()` to `stop()`."""

    def __init__(self, hook: Hook, *sinks: RecordSink) -> None:
        self.hook = hook
        self.sinks = sinks

    def start(self) -> None:
        self.hook.add_listener(self._on_record)

    def stop(self) -> None:
        self.hook.remove_listener(self._on_record)

    def _on_record(self, record: RequestRecord, **_: Any) -> None:
        for sink in self.sinks:
            sink.take(record)


def utc_iso(ts: float | None = None) -> str:
    """UTC `YYYY-MM-DDTHH:MM:SSZ` (the spec's wall-clock stamp format)."""
    dt = datetime.fromtimestamp(time.time() if ts is None else ts, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")




def new_run_id(now: float | None = None) -> str:
    """`benchmark-YYYYMMDDTHHMMSSZ` of `now` (UTC)."""
    stamp = datetime.fromtimestamp(time.time() if now is None else now, tz=UTC)
    return "benchmark-" + stamp.strftime("%Y%m%dT%H%M%SZ")


def create_run_dir(results_dir: str | Path, now: float | None = None) -> tuple[str, Path]:
    """Create `<results_dir>/<run_id>` exclusively; returns (run_id, path)."""
    root = Path(results_dir)
    root.mkdir(parents=True, exist_ok=True)
    base = new_run_id(now)
    n = 1
    while True:
        run_id = base if n == 1 else f"{base}-{n}"
        path = root / run_id
        try:
            path.mkdir()
            return run_id, path
        except FileExistsError:
            n += 1


class RawWriter:
    """Append-only `requests.jsonl` writer; one JSON object per line, flushed per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = open(path, "ab")
        self._lock = threading.Lock()

    def write(self, obj: dict[str, Any]) -> None:
        line = orjson.dumps(obj) + b"\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()

    def write_header(self, run_id: str, params: dict[str, Any]) -> dict[str, Any]:
        wall_ns = time.time_ns()
        perf_ns = time.perf_counter_ns()
        header = {
            "type": "run",
            "schema": RAW_SCHEMA,
            "run_id": run_id,
            "started_at": utc_iso(wall_ns / 1e9),
            "wall_anchor_ns": wall_ns,
            "perf_anchor_ns": perf_ns,
            "host": os.uname().nodename,
            "pid": os.getpid(),
            "params": params,
        }
        self.write(header)
        return header

    def take(self, record: RequestRecord) -> None:
        """Append `record` (a `RecordSink`)."""
        self.write(record.to_json_dict())

    def write_end(self, extra: dict[str, Any] | None = None) -> None:
        end = {"type": "run_end", "finished_at": utc_iso(), "end_perf_ns": time.perf_counter_ns()}
        if extra:
            end.update(extra)
        self.write(end)

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.flush()
                os.fsync(self._f.fileno())
                self._f.close()
