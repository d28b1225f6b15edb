"""One part of a large `requests.jsonl`, read in a child process of `rawpart.scan_raw`.

`python -m anvil_metrics.post.rawchild FILE START [STOP]` reads the lines from byte START (a
line start) to STOP (a line start) or the end: each valid `"request"` line (`records.
decode_line`, `line_problem`) goes straight into column rows (`ColumnBuilder.add`), every
other line is handed back as it is, for the parent's one-pass reader to judge in file order
(`rawpart.merge_part`). It stops at the first unparseable line (the one-pass reader raises
there; nothing after it matters).

Why a module of its own: a child is a fresh interpreter (nothing is forked, so a
gevent-patched Locust process can use it too), and it imports only what reading needs —
no numpy, no benchmark rules — so it starts in a tenth of a second.

What a child writes on its stdout: each block of rows as soon as it is full (its size,
`FRAME`, then its bytes as they lie in memory: ~100 MB for half a million rows cross the
pipe while the child reads on, and the parent's thread takes them in as they come), a
size of 0, then the size and bytes of the small fields pickled (parent and child are one
host's processes, never a network's) — together, a `Part`:
- `buf`: the column rows it built (int64, `RAW_COLUMNS`), line numbers counted from 1 at the
  part's start, worker codes its own (`workers`, in code order), failures by its own row
  position;
- `segments`: in file order, `("rows", first, stop)` (rows of `buf`), `("line", n, raw)` (a
  line for the one-pass reader, with its newline if it had one);
- `lines`: how many lines it read.
"""

from __future__ import annotations

import gc
import pickle
import struct
import sys
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import orjson

from anvil_metrics.post.rawcolumns import ColumnBuilder
from anvil_metrics.records import decode_line, line_problem

FRAME = struct.Struct("<Q")  # the size of the piece that follows it


BATCH_BYTES = 1 << 20  # lines read at a time (`readlines`: no Python code per line)


def line_batches(f: BinaryIO, size: int | None = None) -> Iterator[list[bytes]]:
    """The lines of `f` from where it stands, a batch at a time: all of them, or those
    within its next `size` bytes (`size` ends a line)."""
    while size is None or size > 0:
        batch = f.readlines(BATCH_BYTES if size is None else min(size, BATCH_BYTES))
        if not batch:
            return
        if size is not None:
            got = sum(map(len, batch))
            if got > size:  # `size` ends one of them: the batch ends there
                batch = batch[:bisect_left(list(accumulate(map(len, batch))), size) + 1]
                got = size
            size -= got
        yield batch


def fill(stream: Any, buf: Any) -> bool:
    """`buf` (any writable buffer) filled from `stream` (a child's pipe); False if the
    stream ends first."""
    view, got = memoryview(buf).cast("B"), 0
    while got < len(view):
        n = stream.readinto(view[got:])
        if not n:
            return False
        got += n
    return True


@dataclass
class Part:
    buf: Any = b""  # the rows, int64: one buffer (read here), or a list of them (received)
    workers: list[str] = field(default_factory=list)
    failures: dict[int, tuple[Any, Any, Any, Any, Any]] = field(default_factory=dict)
    segments: list[tuple[Any, ...]] = field(default_factory=list)
    lines: int = 0


class _PartReader:
    """The child's reader: a part of the file, from a line start to its stop or the end.
    Plain request lines become column rows; every other line is handed back as it is."""

    def __init__(self, p: Path,
                 sink: Callable[[bytes | bytearray], None] | None = None) -> None:
        self.p = p
        self.cols = ColumnBuilder(sink)
        self.segments: list[tuple[Any, ...]] = []
        self._rows_from = 0  # first row of the open "rows" segment

    def read_from(self, offset: int, stop: int | None = None) -> Part:
        """Read from `offset` (a line start) to `stop` (a line start) or the end. The
        file's first line (the run's header) is handed back as it is."""
        n = 0
        with open(self.p, "rb", buffering=1 << 20) as f:
            f.seek(offset)
            for batch in line_batches(f, None if stop is None else stop - offset):
                for raw in batch:
                    n += 1
                    if offset == 0 and n == 1:
                        self._hand_over(n, raw)
                    elif not self._part_line(n, raw):
                        break
                else:
                    continue
                break
        self._close_rows()
        buf = b"" if self.cols.sink is not None else b"".join(self.cols.parts())
        return Part(buf=buf, workers=list(self.cols.worker_codes),
                    failures=self.cols.failures, segments=self.segments, lines=n)

    def _part_line(self, n: int, raw: bytes) -> bool:
        """Take one line; False after an unparseable one (nothing after it matters)."""
        try:
            line = decode_line(raw)
        except msgspec.MsgspecError:
            line = None
        if line is not None and raw[-1:] == b"\n" and line_problem(line) is None:
            self.cols.add(n, line)
            return True
        self._hand_over(n, raw)
        if line is None:
            try:
                orjson.loads(raw)
            except orjson.JSONDecodeError:
                return False
        return True

    def _hand_over(self, n: int, raw: bytes) -> None:
        self._close_rows()
        self.segments.append(("line", n, raw))

    def _close_rows(self) -> None:
        if self.cols.n_records > self._rows_from:
            self.segments.append(("rows", self._rows_from, self.cols.n_records))
            self._rows_from = self.cols.n_records


def read_part(path: Path, offset: int, stop: int | None = None,
              sink: Callable[[bytes | bytearray], None] | None = None) -> Part:
    """The child's work, callable in-process (tests); with `sink`, each block of rows goes
    there as soon as it is full, and the Part's `buf` is empty."""
    reader = _PartReader(path, sink)
    part = reader.read_from(offset, stop)
    reader.cols.drain()
    return part


def main(argv: list[str]) -> int:
    path, offset = Path(argv[0]), int(argv[1])
    stop = int(argv[2]) if len(argv) > 2 else None
    gc.disable()  # as rawread.no_cyclic_gc: nothing read forms a cycle
    out = sys.stdout.buffer

    def send(rows: bytes | bytearray) -> None:
        out.write(FRAME.pack(len(rows)))
        out.write(rows)

    part = read_part(path, offset, stop, sink=send)
    # plain values (the child runs as __main__: its Part class is not the parent's)
    fields = pickle.dumps((part.workers, part.failures, part.segments, part.lines),
                          protocol=pickle.HIGHEST_PROTOCOL)
    out.write(FRAME.pack(0) + FRAME.pack(len(fields)) + fields)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
