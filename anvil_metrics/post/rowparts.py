"""The rows of a large `benchmark.json` decoded into columns in parts, a child process each.

Why: `anvil verify` of a million rows spends two thirds of its time decoding them
(`rowmodel`: msgspec into typed rows, then columns), and a machine has more than one core.
The rows are cut into one part per CPU (at most `rawpart.MAX_PARTS`), each decoded by a
child (`python -m anvil_metrics.post.rowparts`), and this process joins their columns in
order, as if it had taken the rows a block at a time itself (`RowBlocks`, which `docscan`
uses for a file read in one process).

It relies on the layout anvil writes (`docscan`'s: each row `    {` … `    }`, rows joined
by `,`, the array closing on a line `  ]`; no JSON string holds a raw newline). Where the
parts meet: each cut, an equal share of the bytes after the rows' key, moves to the end of
the first row that ends at or after it (`\n    }`), so one part ends with that row and the
next starts with the comma after it. A part that reaches the rows' close says where; the
parts after it lie in the document's tail and are dropped. Anything else — a block that is
not rows, a part without its close, a child that fails — gives None, and the one-process
read says what it is. (A child's columns cross a pipe pickled, between one host's
processes, as `rawpart`'s rows do.)
"""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.heap import keep_freed_memory
from anvil_metrics.post.rawchild import fill

OPEN = b'\n  "request_timings": ['
CLOSE = b"\n  ]"
ROW_END = b"\n    }"
BLOCK_BYTES = 1 << 20  # rows decoded at a time (~900): their objects stay in the CPU caches
MIN_BYTES = 256 * 2**20  # smaller files are decoded here (a child costs ~0.3 s to start)


def close_at(buf: bytes) -> int:
    """`buf.find(CLOSE)`, by way of its rare last byte: rows hold no `]` but in a string,
    and `find` of the whole line checks every line's indent (~50 times slower)."""
    at = buf.find(b"]")
    while at >= 0 and buf[at - 3:at + 1] != CLOSE:
        at = buf.find(b"]", at + 1)
    return at - 3 if at >= 3 else -1


class RowBlocks:
    """Rows' text taken whole rows at a time into columns: each part after the first starts
    with the comma that ends the row before it (the first too, for a part of the file that
    starts after a row: `after_row`)."""

    def __init__(self, after_row: bool = False) -> None:
        self.blocks: list[RowColumns] = []
        self.after_row = after_row

    def take(self, part: bytes) -> bool:
        """False when `part` is not such rows (not JSON, a row the columns do not model, a
        trailing comma or only white space, other fields than the first block's): whatever
        it is, the whole parse says."""
        if not part:
            return True  # the array closes right after the rows taken last
        if self.blocks or self.after_row:
            if part[:1] != b",":
                return False
            part = part[1:]
        rows = RowColumns.from_text(b"[" + part + b"]")
        if rows is None or not len(rows) or (self.blocks
                                              and rows.absent != self.blocks[0].absent):
            return False
        self.blocks.append(rows)
        return True

    def columns(self) -> RowColumns | None:
        """Every row taken, as one set of columns."""
        return RowColumns.concat(self.blocks) if self.blocks else RowColumns.from_rows([])


def read_range(path: Path, start: int, stop: int | None) -> tuple[int, RowColumns | None]:
    """The rows from `start` (the rows' start, or just after a row's end) to `stop` (just
    after a row's end) or their close: (the close's offset, -1 if not reached; the rows,
    None when they are not rows as `RowBlocks` takes them)."""
    blocks = RowBlocks(after_row=start > 0 and _ends_row(path, start))
    with open(path, "rb") as f:
        f.seek(start)
        buf, at = b"", start  # `buf` starts at offset `at`
        while True:
            block = f.read(BLOCK_BYTES if stop is None else min(BLOCK_BYTES, stop - at
                                                                - len(buf)))
            buf += block
            close = close_at(buf)
            if close >= 0:
                return at + close, (blocks.columns() if blocks.take(buf[:close]) else None)
            if not block:  # the range is read: it ends with a whole row (or the file ends)
                ok = stop is not None and blocks.take(buf)
                return -1, blocks.columns() if ok else None
            cut = buf.rfind(ROW_END) + len(ROW_END)
            if cut >= len(ROW_END):
                if not blocks.take(buf[:cut]):
                    return -1, None
                buf, at = buf[cut:], at + cut


def _ends_row(path: Path, offset: int) -> bool:
    """`offset` is just after a row's end (not the rows' start, just after the key)."""
    with open(path, "rb") as f:
        f.seek(offset - len(ROW_END))
        return f.read(len(ROW_END)) == ROW_END


def cuts(path: Path, rows_start: int, parts: int) -> list[int]:
    """Where parts 2… of the rows after `rows_start` start: just after the first row that
    ends at or after each equal share of the bytes, without repeats."""
    size = path.stat().st_size
    found: list[int] = []
    with open(path, "rb") as f:
        for k in range(1, parts):
            share = rows_start + (size - rows_start) * k // parts
            f.seek(share)
            text = f.read(BLOCK_BYTES)
            at = text.find(ROW_END)
            if at >= 0 and (not found or share + at + len(ROW_END) > found[-1]):
                found.append(share + at + len(ROW_END))
    return found


def read_in_parts(path: Path, rows_start: int, parts: int) -> tuple[RowColumns, int] | None:
    """The rows after `rows_start` (just after the rows' key) as columns, the first part
    decoded here while a child decodes each other one, and the offset just after their
    close; None when the parts do not add up to the rows (see the module's docstring)."""
    bounds = [rows_start, *cuts(path, rows_start, parts)]
    ranges = list(zip(bounds, [*bounds[1:], None], strict=True))
    children = [subprocess.Popen(
        [sys.executable, "-m", "anvil_metrics.post.rowparts", str(path), str(start),
         *([] if stop is None else [str(stop)])],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        for start, stop in ranges[1:]]
    taken: list[RowColumns] = []
    try:
        close, rows = read_range(path, *ranges[0])
        for child in [None, *children]:
            if child is not None:
                close, rows = _result(child)
            if rows is None or (taken and len(rows) and rows.absent != taken[0].absent):
                return None
            if len(rows) or not taken:
                taken.append(rows)
            if close >= 0:
                return RowColumns.concat(taken), close + len(CLOSE)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.communicate()
    return None


_SIZE = struct.Struct("<Q")  # the size of the pickled head that comes first


def _arrays(rows: RowColumns) -> list[Any]:
    """`rows`' arrays in the order they cross the pipe."""
    return [*rows.floats.values(), *rows.counts.values(), *rows.present.values(),
            rows.usage_source]


def _result(child: subprocess.Popen[bytes]) -> tuple[int, RowColumns | None]:
    """A child's (close, rows), or (-1, None) if it failed or wrote anything else: `main`
    writes (close, the columns' names and length) pickled, then each column's bytes as it
    lies in memory, read here straight into arrays made for them."""
    out: Any = child.stdout
    try:
        (size,) = _SIZE.unpack(out.read(_SIZE.size))
        close, shape = pickle.loads(out.read(size))
        rows = None
        if shape is not None:
            n, floats, counts, present, absent = shape
            rows = RowColumns(floats={k: np.empty(n) for k in floats},
                              counts={k: np.empty(n, dtype=np.int64) for k in counts},
                              present={k: np.empty(n, dtype=bool) for k in present},
                              usage_source=np.empty(n, dtype=bool), absent=frozenset(absent))
            for array in _arrays(rows):
                if not fill(out, array):
                    return -1, None
    except Exception:  # noqa: BLE001 - whatever the child wrote: the one-process read says
        return -1, None
    child.wait()
    return (close, rows) if child.returncode == 0 and type(close) is int else (-1, None)


def main(argv: list[str]) -> int:
    keep_freed_memory()
    path, start = Path(argv[0]), int(argv[1])
    stop = int(argv[2]) if len(argv) > 2 else None
    close, rows = read_range(path, start, stop)
    shape = None if rows is None else (len(rows), list(rows.floats), list(rows.counts),
                                       list(rows.present), sorted(rows.absent))
    head = pickle.dumps((close, shape), protocol=pickle.HIGHEST_PROTOCOL)
    out = sys.stdout.buffer
    out.write(_SIZE.pack(len(head)) + head)
    for array in [] if rows is None else _arrays(rows):
        out.write(memoryview(np.ascontiguousarray(array)).cast("B"))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
