"""Strict JSON and atomic writes: the one place anvil turns values into JSON files, and
the one way it reads a JSON file a user named.

Why strict: orjson writes NaN and ±inf as `null` without complaint, which would turn a bug
into a plausible-looking value in a benchmark, so every value is checked first and a
non-finite float (or a value JSON has no type for) raises before the disk is touched.

Why atomic: `atomic_write_json` / `atomic_write_bytes` write a temporary file in the target's
directory, fsync it and `os.replace` it over the target, so a reader sees the old file or the
new one, never a mix, and a crash never leaves a half-written result.

Why one reader (`read_json`): `anvil verify`, `report`, `summarize` and the campaign
commands each read files a user points them at, and each said in its own words that one
was missing or was not JSON. Here it is said once, on one line: the file, what is wrong
(it does not exist, it is a folder, the OS's reason it cannot be read, orjson's message
with the line and column) and what was expected.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import queue
import reprlib
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeAlias

import orjson

from anvil_metrics.errors import UsageError

# A JSON value as orjson parses it, and a JSON object: what a document, a block or a raw
# line is before a typed definition (`fieldtypes`) reads it
JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"

# keys sorted, 2-space indent: the layout of the spec's example files
JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
# the standard library's C encoder, refusing NaN/±inf (ValueError) and non-JSON types
_FINITE_JSON = json.JSONEncoder(allow_nan=False, check_circular=False)
_dumps = orjson.dumps


def strict_json_problems(obj: Any, path: str = "") -> list[str]:
    """Every place in `obj` that strict JSON (RFC 8259) cannot hold, by field path.

    Flags non-finite floats (NaN, ±inf), non-string object keys and values that are not
    JSON types (dict, list/tuple, str, int, float, bool, None). Returns [] when clean.
    """
    # The common case, in C: orjson refuses non-string keys; json refuses NaN, ±inf and
    # values that are not JSON types. Each accepts only what _walk accepts, so when both do,
    # _walk finds nothing (a document with 30k failures: ~65 ms rather than ~110 ms).
    try:
        _dumps(obj)
        _FINITE_JSON.encode(obj)
        return []
    except (TypeError, ValueError, RecursionError):  # orjson.JSONEncodeError is a TypeError
        pass
    problems: list[str] = []
    _walk(obj, path, problems)
    return problems


def _walk(obj: Any, path: str, problems: list[str]) -> None:
    """Depth first, in document order, with a stack of its own: orjson reads documents
    nested 1023 deep, deeper than Python's recursion limit."""
    stack: list[tuple[bool, Any, str]] = [(False, obj, path)]  # (is a message, value, path)
    while stack:
        message, obj, path = stack.pop()
        if message:
            problems.append(obj)
            continue
        where = path or "document"
        if obj is None or isinstance(obj, bool | str | int):
            continue
        if isinstance(obj, float):
            if not math.isfinite(obj):
                problems.append(f"{where}: {obj!r} is not allowed in strict JSON (use null)")
            continue
        items: list[tuple[bool, Any, str]]
        if isinstance(obj, dict):
            items = [(False, value, f"{path}.{key}" if path else key) if isinstance(key, str)
                     else (True, f"{where}: object key {key!r} is not a string", "")
                     for key, value in obj.items()]
        elif isinstance(obj, list | tuple):
            items = [(False, value, f"{path}[{i}]") for i, value in enumerate(obj)]
        else:
            problems.append(f"{where}: {type(obj).__name__} is not a JSON type")
            continue
        stack.extend(reversed(items))


def dumps_strict(obj: Any, *, option: int | None = None) -> bytes:
    """orjson bytes of `obj`, after refusing anything strict JSON cannot hold (ValueError)."""
    problems = strict_json_problems(obj)
    if problems:
        raise ValueError("refusing to write non-strict JSON: " + "; ".join(problems[:5]))
    return orjson.dumps(obj) if option is None else orjson.dumps(obj, option=option)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write `obj` to `path` as strict JSON (keys sorted, 2-space indent, as the spec
    example), atomically: temp file in the same directory, fsync, `os.replace`, then fsync
    of the directory so the rename itself survives a crash.

    Raises ValueError (before touching the disk) if `obj` holds NaN/±inf or a non-JSON value.
    """
    atomic_write_bytes(path, (dumps_strict(obj, option=JSON_OPTIONS),))


def atomic_write_bytes(path: str | Path, chunks: Iterable[bytes]) -> None:
    """Write the concatenation of `chunks` to `path` atomically, as `atomic_write_json` does.

    `chunks` may be a generator (a large document written piece by piece); if it raises,
    the temp file is removed and `path` is left as it was. The chunks are written by a
    second thread while the next one is made (`_write_behind`).
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open applies the umask, so the result gets the same mode a plain open() would give.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_behind(f, chunks, target)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


WRITEBACK_BYTES = 32 * 2**20  # written data handed to the disk at a time (`_writeback`)


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's `sync_file_range`, or None where there is none."""
    try:  # the process's own symbols (dlopen(NULL)): no library search
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_SYNC_FILE_RANGE = _sync_file_range()


def _writeback(fd: int, offset: int, size: int) -> None:
    """Start writing `size` bytes of `fd` from `offset` to the disk, without waiting
    (SYNC_FILE_RANGE_WRITE): the fsync at the end then waits for the last few only (a
    million rows' 1 GB: 0.3 s of fsync, against 0.01 s when the writer thread has handed
    each 32 MB over as it went)."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, offset, size, 2)  # a failure only leaves it to the fsync


def _drop_cached(path: Path) -> None:
    """Ask the kernel to drop the cached pages of `path`, the file about to be replaced
    (replacing it frees them all at once, in `os.replace`, on the writer's time: 0.17 s
    for 1 GB here, 0.1 s once they were dropped while the new one was being made)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # nothing to replace
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        pass  # not Linux: it is freed when replaced
    finally:
        os.close(fd)


def _write_behind(f: BinaryIO, chunks: Iterable[bytes], replaced: Path | None = None,
                  depth: int = 32) -> None:
    """Write `chunks` to `f` from a second thread, at most `depth` chunks behind the one
    being made, handing what it wrote to the disk as it goes (`_writeback`), after dropping
    the cached pages of the file it will replace (`_drop_cached`). Why: a write
    is a system call that releases the GIL, so the kernel copying one batch of a large
    document overlaps Python making the next (on this 2-CPU VM, writing a million rows'
    0.5 GB spent as long in `write` as in making the text). The first error of either side
    is raised here, after the writer has stopped."""
    pending: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
    failed: list[BaseException] = []

    def write_all() -> None:
        if replaced is not None:
            _drop_cached(replaced)
        written = handed = 0
        while (chunk := pending.get()) is not None:
            if not failed:
                try:
                    f.write(chunk)
                    written += len(chunk)
                    if written - handed >= WRITEBACK_BYTES:
                        f.flush()
                        _writeback(f.fileno(), handed, written - handed)
                        handed = written
                except BaseException as exc:  # raised by the caller, below
                    failed.append(exc)

    writer = threading.Thread(target=write_all, name="anvil-write-behind", daemon=True)
    writer.start()
    try:
        for chunk in chunks:
            if failed:
                break
            pending.put(chunk)
    finally:
        pending.put(None)
        writer.join()
    if failed:
        raise failed[0]


class JsonFileError(UsageError):
    """A JSON file a user named cannot be read as JSON (the CLI exits 2). `reason` is what
    is wrong with it, for a caller that words the fault its own way (`VerifyError`).

    >>> str(JsonFileError("b.json", "does not exist", "a benchmark.json", command="verify"))
    'verify: b.json does not exist; expected a benchmark.json'
    """

    def __init__(self, path: str | Path, reason: str, expected: str, *,
                 command: str | None = None):
        self.path = str(path)
        self.reason = reason
        self.expected = expected
        where = f"{command}: " if command else ""
        super().__init__(f"{where}{path} {reason}; expected {expected}")


def read_json(path: str | Path, expected: str, *, command: str | None = None) -> Any:
    """The JSON value in the file at `path`, parsed strictly (orjson: NaN and Infinity are
    not JSON). Raises JsonFileError naming the file, what is wrong and `expected` (what the
    file should be: "a benchmark.json"); `command` ("report") starts the line, as the
    command's other messages do."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        reason = "does not exist"
    except IsADirectoryError:
        reason = "is a folder, not a file"
    except OSError as exc:
        reason = f"cannot be read ({exc.strerror or exc})"
    else:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            reason = f"is not strict JSON ({exc})"
    raise JsonFileError(p, reason, expected, command=command)


def dump_line(obj: dict[str, Any]) -> bytes:
    """One `requests.jsonl` line: compact strict JSON plus the newline."""
    return dumps_strict(obj) + b"\n"



def show(value: Any) -> str:
    """`repr(value)` for a message, cut short: a value read from a damaged file may be a
    string of megabytes or a list nested 1,000 deep (orjson reads it; a plain `repr` of it
    raises RecursionError)."""
    return _SHOW.repr(value)


_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlong = 3, 60, 60, 60
_SHOW.maxlist = _SHOW.maxtuple = _SHOW.maxdict = 6


def object_lines(path: Path, error: Callable[[str, int, str, Any, str], Exception]
                 ) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line of a JSONL file the user named, as (line number, object); a line
    that is not one JSON object raises `error(path, line, "line", text, allowed)` (an
    `errors.InputEntryError`: a trace's, a dataset's)."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise error(str(path), n, "line", raw.decode(errors="replace").strip(),
                            f"one JSON object a line ({e})") from None
            if not isinstance(obj, dict):
                raise error(str(path), n, "line", obj, "one JSON object a line")
            yield n, obj
