"""`scan_raw`: a `requests.jsonl` read as columns, a large one in several processes (a child
process for each part).

Why: reading is what post-processing a big run costs (a million request lines are ~1.1 GB
of JSON; decoding and checking them takes ~3 µs a line on a 2-vCPU VM), and a machine that
ran a load generator has more cores. The file is cut into one part per CPU this process
may use (at most `MAX_PARTS`), each cut at the first line start after an equal share of
the bytes, and a child per part (`rawchild.py`) reads its own while this process waits:
the parts are alike, so they end together.

The outcome is exactly the one of reading the file in one pass (`rawread.RawReader`): a
child only does the part that does not depend on what came before — parse each line and
put a valid `"request"` line into columns (`ColumnBuilder.add`) — and hands back every
other line as it is. This process then takes the children's lines in file order
(`merge_part`, one part after another): column rows are appended (line numbers, record
positions and worker codes shifted to the whole file's), other lines go through the
one-pass reader's own code. Where the state of the run changes what a plain request line
means (after a `run_end` line, or after an error that will be raised at the end), the merge
applies what the one-pass reader would have done with it. A child stops at the first
unparseable line (the one-pass reader raises there, and nothing after it matters).

A child that fails in any way, or whose output (`rawchild.Part`) is cut short or does not
add up, hands nothing back: this process reads that part itself, as the one-pass reader
would. (The pipe between parent and child on one host carries the small fields pickled;
nothing that crosses a network is ever unpickled.)
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anvil_metrics.post.rawchild import FRAME, Part, fill, read_part
from anvil_metrics.post.rawcolumns import COL, RAW_COLUMNS, RawColumns
from anvil_metrics.post.rawread import RawReader, no_cyclic_gc

__all__ = ["MAX_PARTS", "MIN_BYTES", "read_part", "read_parts", "scan_raw", "split_offsets"]

MIN_BYTES = 64 * 2**20  # smaller files are read in one process (a child costs ~0.2 s)
MAX_PARTS = 8  # at most this many processes read one file
MAX_FRAME = 1 << 30  # the most a child may say one piece of its output holds
_ROW_BYTES = 8 * len(RAW_COLUMNS)


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


def scan_raw(path: str | Path, *, parallel: bool = True) -> RawColumns:
    """Read a `requests.jsonl` as `rawread.read_raw` does — same checks, same errors, same
    notes — into columns instead of RequestRecord objects (`RawColumns`): what `anvil
    postprocess` needs of a run of any size, without its chunk timings or usage objects.

    A large file is read in one part per CPU this process may use (a child process for
    each part after the first) when `parallel`; the outcome is the same.
    """
    p = Path(path)
    reader = RawReader(p, columns=True)
    splits = _split_offsets(p) if parallel else []
    with no_cyclic_gc():
        if splits:
            read_parts(reader, splits)
        else:
            reader.read_lines()
    return reader.raw_columns()


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _split_offsets(p: Path) -> list[int]:
    try:
        return split_offsets(p, min(usable_cpus(), MAX_PARTS))
    except OSError:
        return []  # the one-pass read says what is wrong with the file


def read_parts(reader: RawReader, splits: list[int],
               read_in_process: Callable[[Path, int, int | None], Part] | None = None
               ) -> None:
    """The part of the file from its start to `splits[0]`, and from each split to the next
    (or the end), is read by a child process each (by `read_in_process(path, start, stop)`
    instead, if given: tests) and merged into `reader` in file order; a part whose child
    failed is read here. (This process waits meanwhile: a child per CPU, all alike.)"""
    p = reader.p
    parts = list(zip([0, *splits], [*splits, None], strict=True))
    children = ([start_child(p, start, stop) for start, stop in parts]
                if read_in_process is None else [])
    # a thread per child takes its rows in as they come (the pipe never waits for this one)
    results: list[list[Part | None]] = [[] for _ in children]
    takers = [threading.Thread(target=lambda c=c, r=r: r.append(child_result(c)),
                               daemon=True) for c, r in zip(children, results, strict=True)]
    for taker in takers:
        taker.start()
    taken = 0  # children whose result was taken
    n = 0
    try:
        for start, stop in parts:
            if children:
                takers[taken].join()
                part = results[taken][0]
                taken += 1
            else:
                part = read_in_process(p, start, stop)  # type: ignore[misc]
            if part is None:  # the child failed: read its part here
                n = reader.read_lines(start=start, stop=stop, line0=n)
            else:
                merge_part(reader, part, n)
                n += part.lines
    finally:
        for child in children[taken:]:  # an error (raised here) made them pointless
            stop_child(child)


def start_child(path: Path, offset: int, stop: int | None = None) -> subprocess.Popen[bytes]:
    """`python -m anvil_metrics.post.rawchild PATH OFFSET [STOP]`. Its stderr is not kept: a child
    that fails says nothing the parent's own read of that part will not say."""
    bound = [] if stop is None else [str(stop)]
    return subprocess.Popen(
        [sys.executable, "-m", "anvil_metrics.post.rawchild", str(path), str(offset), *bound],
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
    proc.stdout.close()  # type: ignore[union-attr]
    return part if proc.returncode == 0 else None


def _receive(stream: Any) -> Part | None:
    """A child's output as `rawchild.main` writes it, or None if it is cut short or does
    not add up. Each block is read into an array made for it (never zero-filled, and no
    larger than `MAX_FRAME`: a wrong size must not make this process touch gigabytes)."""
    import numpy as np

    blocks = []
    while (size := _frame(stream)) != 0:
        if size is None or not 0 < size <= MAX_FRAME or size % _ROW_BYTES:
            return None
        blocks.append(np.empty(size, dtype=np.uint8))
        if not fill(stream, blocks[-1]):
            return None
    size = _frame(stream)
    fields = stream.read(size) if size is not None and size <= MAX_FRAME else b""
    if size is None or len(fields) != size:
        return None
    workers, failures, segments, lines = pickle.loads(fields)
    rows = max((seg[2] for seg in segments if seg[0] == "rows"), default=0)
    if sum(len(b) for b in blocks) != rows * _ROW_BYTES:
        return None
    return Part(blocks, workers, failures, segments, lines)


def _frame(stream: Any) -> int | None:
    head = stream.read(FRAME.size)
    return FRAME.unpack(head)[0] if len(head) == FRAME.size else None


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """End a child that is no longer needed (its taker thread reads its pipe to the end)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def merge_part(reader: RawReader, part: Part, line0: int) -> None:
    """Append the child's `part` (which began after line `line0`) to `reader`, as if
    `reader` had read those lines itself."""
    import numpy as np

    blocks = _blocks(part.buf)
    starts = np.cumsum([0, *map(len, blocks)]).tolist()
    failed = sorted(part.failures)
    for seg in part.segments:
        if seg[0] == "line":
            n, raw = seg[1] + line0, seg[2]
            if raw[-1:] == b"\n":
                reader.line(n, raw)
            else:
                reader.tail(n, raw)
            continue
        first, stop = seg[1], seg[2]
        if reader.deferred is not None or reader.run_end is not None:
            # parsed, not interpreted: the kept error is what will be raised; after the
            # run_end line, the one-pass reader keeps the error of its first request line
            reader.skip(stop - first)
            if reader.deferred is None:
                k = bisect_right(starts, first) - 1
                line = int(blocks[k][first - starts[k], COL["line"]]) + line0
                reader.interpret(line, {"type": "request"})
            continue
        for k, rows in enumerate(blocks):  # the segment's rows, block by block
            lo, hi = max(first, starts[k]), min(stop, starts[k + 1])
            if lo < hi:
                rows = rows[lo - starts[k]:hi - starts[k]]
                rows[:, COL["line"]] += line0
                _recode_workers(reader, part.workers, rows)
                at, to = np.searchsorted(failed, [lo, hi]).tolist()
                reader.append_rows(rows, {pos: part.failures[pos] for pos in failed[at:to]},
                                   lo)


def _blocks(buf: Any) -> list[Any]:
    """A part's rows as writable int64 arrays of rows: its blocks as they came (a list), or
    its one buffer (copied if read-only: bytes)."""
    import numpy as np

    blocks = [np.frombuffer(b, dtype=np.int64).reshape(-1, len(RAW_COLUMNS))
              for b in (buf if isinstance(buf, list) else [buf])]
    return [b if b.flags.writeable else b.copy() for b in blocks]


def _recode_workers(reader: RawReader, names: list[str], rows: Any) -> None:
    """Turn the child's worker codes in `rows` into the reader's, giving new names their
    codes in the order they first appear (as the one-pass reader does)."""
    import numpy as np

    column = rows[:, COL["worker"]]
    codes, first_at = np.unique(column, return_index=True)
    for code in codes[np.argsort(first_at)].tolist():
        if code >= 0:
            reader.cols.worker_codes.setdefault(names[code], len(reader.cols.worker_codes))
    # the child's -1 (no worker) indexes the trailing -1
    to_reader = np.array([reader.cols.worker_codes.get(name, -1) for name in names] + [-1],
                         dtype=np.int64)
    rows[:, COL["worker"]] = to_reader[column]
