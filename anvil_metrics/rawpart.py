"""`scan_raw` of a large `requests.jsonl` in several processes: each part after the first is
read by a child.

Why: reading is what post-processing a big run costs (a million request lines are ~1.1 GB
of JSON; parsing and checking them takes ~13 µs a line on a 2-vCPU VM), and a machine that
ran a load generator has more cores. The file is cut into one part per CPU this process
may use (at most `MAX_PARTS`), each cut at the first line start after an equal share of
the bytes; this process reads the first part as before while a child per other part
(`python -m anvil_metrics.rawpart FILE START STOP`, a fresh interpreter: nothing is forked,
so a gevent-patched Locust process can use it too) reads its own.

The outcome is exactly the one of reading the file in one pass (`rawfile._Reader`): a
child only does the part that does not depend on what came before — parse each line and
put a plain `"request"` line into columns (`_Reader._fast_request`) — and hands back every
other line as it is. This process then takes the children's lines in file order
(`merge_part`, one part after another): column rows are appended (line numbers, record
positions and worker codes shifted to the whole file's), other lines go through the
one-pass reader's own code. Where the state of the run changes what a plain request line
means (after a `run_end` line, or after an error that will be raised at the end), the merge
applies what the one-pass reader would have done with it. A child stops at the first
unparseable line (the one-pass reader raises there, and nothing after it matters).

What a child returns on its stdout, `Part`: a 16-byte head (the sizes of the two pieces
that follow), the pickled small fields, then `buf` as it lies in memory. The rows are most
of it (~70 MB for half a million) and cross the pipe once, straight into the buffer the
parent's merge uses, rather than being pickled and copied on each side.
- `buf`: the column rows it built (int64, `RAW_COLUMNS`), line numbers counted from 1 at the
  part's start, worker codes its own (`workers`, in code order), failures by its own row
  position;
- `segments`: in file order, `("rows", first, stop)` (rows of `buf`), `("line", n, raw)` (a
  line for the one-pass reader, with its newline if it had one);
- `lines`: how many lines it read.

A child that meets a value the columns do not model (`UnusualRecords`), or fails in any
way, hands nothing back: this process reads that part itself, as the one-pass reader would.
"""

from __future__ import annotations

import gc
import pickle
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.rawfile import COL, RAW_COLUMNS, UnusualRecords, _Reader, _until

MIN_BYTES = 64 * 2**20  # smaller files are read in one process (a child costs ~0.2 s)
MAX_PARTS = 8  # at most this many processes read one file
_HEAD = struct.Struct("<QQ")  # the sizes of the pickled fields and of `buf`, in bytes


@dataclass
class Part:
    buf: Any = b""  # the rows: any writable buffer of int64 (a bytearray, an array("q"))
    workers: list[str] = field(default_factory=list)
    failures: dict[int, tuple[Any, Any, Any, Any, Any]] = field(default_factory=dict)
    segments: list[tuple[Any, ...]] = field(default_factory=list)
    lines: int = 0


def split_offsets(path: Path, parts: int) -> list[int]:
    """Where parts 2… of `parts` start: the first line start after each equal share of the
    file's bytes, without repeats ([] when the file is too small to be worth a child)."""
    size = path.stat().st_size
    if size < MIN_BYTES or parts < 2:
        return []
    starts = (line_start_after(path, size * i // parts) for i in range(1, parts))
    return sorted({s for s in starts if s is not None and s > 0})


def line_start_after(path: Path, offset: int) -> int | None:
    """The first offset ≥ `offset` that starts a line (follows a newline), or None."""
    with open(path, "rb") as f:
        if offset > 0:
            f.seek(offset - 1)
            f.readline()  # to the end of the line `offset - 1` is in
        else:
            f.seek(0)
        start = f.tell()
        return start if f.read(1) else None


class _PartReader(_Reader):
    """The child's reader: a part of the file, from a line start to the end."""

    def __init__(self, p: Path) -> None:
        super().__init__(p, columns=True)
        self.header = {}  # the run header is in the first part; plain lines need only this
        self.segments: list[tuple[Any, ...]] = []
        self._rows_from = 0  # first row of the open "rows" segment

    def read_from(self, offset: int, stop: int | None = None) -> Part:
        """Read from `offset` (a line start) to `stop` (a line start) or the end. Raises
        UnusualRecords when a line has a value the columns do not model (the parent then
        reads this part itself)."""
        n = 0
        with open(self.p, "rb", buffering=1 << 20) as f:
            f.seek(offset)
            lines: Any = f if stop is None else _until(f, stop - offset)
            for n, raw in enumerate(lines, start=1):
                if not self._part_line(n, raw):
                    break
        self._close_rows()
        return Part(buf=self.buf, workers=list(self.worker_codes),
                    failures=self.failures, segments=self.segments, lines=n)

    def _part_line(self, n: int, raw: bytes) -> bool:
        """Take one line; False after an unparseable one (nothing after it matters)."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self._hand_over(n, raw)
            return False
        if raw[-1:] != b"\n" or not self._fast_request(n, obj):
            self._hand_over(n, raw)
        return True

    def _hand_over(self, n: int, raw: bytes) -> None:
        self._close_rows()
        self.segments.append(("line", n, raw))

    def _close_rows(self) -> None:
        self._flush()
        if self.n_records > self._rows_from:
            self.segments.append(("rows", self._rows_from, self.n_records))
            self._rows_from = self.n_records


def read_part(path: Path, offset: int, stop: int | None = None) -> Part:
    """The child's work, callable in-process (tests)."""
    return _PartReader(path).read_from(offset, stop)


def start_child(path: Path, offset: int, stop: int | None = None) -> subprocess.Popen[bytes]:
    """`python -m anvil_metrics.rawpart PATH OFFSET [STOP]`. Its stderr is not kept: a child
    that fails says nothing the parent's own read of that part will not say."""
    bound = [] if stop is None else [str(stop)]
    return subprocess.Popen(
        [sys.executable, "-m", "anvil_metrics.rawpart", str(path), str(offset), *bound],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)


def child_result(proc: subprocess.Popen[bytes]) -> Part | None:
    """The child's Part, or None if it failed or wrote anything else (the caller reads the
    part itself)."""
    try:
        part = _receive(proc.stdout)
    except Exception:  # noqa: BLE001 - whatever else the child wrote: read its part here
        part = None
    except BaseException:
        stop_child(proc)
        raise
    try:  # after its last byte (or its failure) the child exits by itself
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass  # killed below; its part is read here
    stop_child(proc)
    return part if proc.returncode == 0 else None


def _receive(stream: Any) -> Part | None:
    """A child's output as `main` writes it, or None if it is cut short or inconsistent.
    The rows' size must be what the fields describe before a buffer is made for it (a
    bytearray is zero-filled: a wrong size must not make the parent touch gigabytes)."""
    head = stream.read(_HEAD.size)
    if len(head) != _HEAD.size:
        return None
    fields_len, buf_len = _HEAD.unpack(head)
    fields = stream.read(fields_len)  # bytes: memory is taken only as they arrive
    if len(fields) != fields_len:
        return None
    workers, failures, segments, lines = pickle.loads(fields)
    rows = max((seg[2] for seg in segments if seg[0] == "rows"), default=0)
    if buf_len != rows * 8 * len(RAW_COLUMNS):
        return None
    buf = _read_into(stream, bytearray(buf_len))
    return None if buf is None else Part(buf, workers, failures, segments, lines)


def _read_into(stream: Any, buf: bytearray) -> bytearray | None:
    """`buf` filled from `stream`, or None if the stream ends first."""
    view, got = memoryview(buf), 0
    while got < len(buf):
        n = stream.readinto(view[got:])
        if not n:
            return None
        got += n
    return buf


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def merge_part(reader: _Reader, part: Part, line0: int) -> None:
    """Append the child's `part` (which began after line `line0`) to `reader`, as if
    `reader` had read those lines itself."""
    import numpy as np

    table = np.frombuffer(part.buf, dtype=np.int64).reshape(-1, len(RAW_COLUMNS))
    if not table.flags.writeable:  # a read-only buffer (bytes): changed below, so copied
        table = table.copy()
    table[:, COL["line"]] += line0
    failed = sorted(part.failures)
    for seg in part.segments:
        kind = seg[0]
        if kind == "line":
            n, raw = seg[1] + line0, seg[2]
            if raw[-1:] == b"\n":
                reader._line_columns(n, raw)
            else:
                reader._tail(n, raw)
        else:
            first, stop = seg[1], seg[2]
            reader.parsed += stop - first
            if reader.deferred is not None:
                continue  # parsed, not interpreted: the kept error is what will be raised
            if reader.run_end is not None:
                _after_run_end(reader, int(table[first, COL["line"]]))
                continue
            shift = reader.n_records - first
            lo, hi = np.searchsorted(failed, [first, stop]).tolist()
            for pos in failed[lo:hi]:
                reader.failures[pos + shift] = part.failures[pos]
            rows = table[first:stop]
            _recode_workers(reader, part.workers, rows)
            reader._flush()  # the reader's own rows first
            reader.buf.frombytes(memoryview(rows).cast("B"))  # rows: C-contiguous
            reader.n_records += stop - first


def _recode_workers(reader: _Reader, names: list[str], rows: Any) -> None:
    """Turn the child's worker codes in `rows` into the reader's, giving new names their
    codes in the order they first appear (as the one-pass reader does)."""
    import numpy as np

    column = rows[:, COL["worker"]]
    codes, first_at = np.unique(column, return_index=True)
    for code in codes[np.argsort(first_at)].tolist():
        if code >= 0:
            reader.worker_codes.setdefault(names[code], len(reader.worker_codes))
    # the child's -1 (no worker) indexes the trailing -1
    to_reader = np.array([reader.worker_codes.get(name, -1) for name in names] + [-1],
                         dtype=np.int64)
    rows[:, COL["worker"]] = to_reader[column]


def _after_run_end(reader: _Reader, n: int) -> None:
    """What the one-pass reader keeps for a request line after the `run_end` line (its own
    interpretation of such a line, which is all it looks at before keeping the error)."""
    reader._interpret(n, {"type": "request"})


def main(argv: list[str]) -> int:
    path, offset = Path(argv[0]), int(argv[1])
    stop = int(argv[2]) if len(argv) > 2 else None
    gc.disable()  # as _Reader.read: nothing read forms a cycle
    try:
        part = read_part(path, offset, stop)
    except UnusualRecords:
        return 3  # the parent reads this part itself, and says what is unusual where
    out = sys.stdout.buffer
    # plain values (the child runs as __main__: its Part class is not the parent's)
    fields = pickle.dumps((part.workers, part.failures, part.segments, part.lines),
                          protocol=pickle.HIGHEST_PROTOCOL)
    rows = memoryview(part.buf).cast("B")
    out.write(_HEAD.pack(len(fields), len(rows)))
    out.write(fields)
    out.write(rows)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
