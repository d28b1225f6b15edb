"""Bytes in, SSE event payloads out.

Two implementations of one behaviour:

- `EventSplitter`, the hot path: it is fed whatever the socket delivered (any block size)
  and returns the `data` payloads of the events that block completed. The client stamps
  each block once, right after the `recv` that delivered it, so every event in it carries
  the moment its last byte arrived, not the moment the parser reached it. Lines are whole
  before they are decoded, so a multi-byte UTF-8 character split across reads is
  reassembled first. Its common case (`data: <payload>` then a blank line, no CR) is a
  few byte operations; everything else goes through a general path.
- sseclient-py fed one `\n`-terminated line at a time (`tests/sseref.py`, never buffered
  blocks: a block reader that waits for a full buffer delays events, the measured 24 ms of
  Locust's `iter_content`). It is the reference `EventSplitter` is property-tested
  against (`tests/unit/wire/test_sse.py`): for any byte stream, cut anywhere, both give the
  same payloads, or both fail on the same invalid UTF-8. Measured on this machine,
  sseclient-py cost ~2/3 of the client's CPU per event, hence the splitter on the hot
  path.

Semantics shared by both (sseclient-py's): an event ends at a blank line (`\n\n`, `\r\r`
or `\r\n\r\n`); comment lines (`:`...) and whitespace-only lines are skipped; `data`
values lose one leading space and several `data` lines join with `\n`; an event without a
`data` field is not dispatched; lines of other fields are ignored; a block left at the end
of the stream is dispatched as an event; an unterminated last line is dropped (as the
client's line reader always did).
"""

from __future__ import annotations

_EVENT_ENDS = (b"\r\r", b"\n\n", b"\r\n\r\n")
_FIELDS = ("id", "event", "data", "retry")


_SSE_FIELDS = (b"data", b"event", b"id", b"retry")
_BOM = b"\xef\xbb\xbf"


class LineTooLong(Exception):
    """A stream line grew past the splitter's limit without a newline."""


def begins_as_sse(head: bytes) -> bool | None:
    """Whether a body's first bytes can begin an event stream: after an optional BOM and
    line ends, a comment (``:``) or one of the four field names followed by ``:`` or a line
    end; None while too few bytes tell (``da``: fed on, the answer is the same however the
    body is cut). An HTML page or a JSON object cannot."""
    if head[:3] == _BOM:
        head = head[3:]
    elif _BOM.startswith(head):
        return None
    head = head.lstrip(b"\r\n")
    if not head:
        return None
    if head[:1] == b":":
        return True
    for name in _SSE_FIELDS:
        if head.startswith(name):
            after = head[len(name):len(name) + 1]
            return None if not after else after in (b":", b"\n", b"\r")
        if name.startswith(head):
            return None
    return False


class EventSplitter:
    """SSE bytes → event payloads (see the module docstring); bounded memory per line.

    State: the bytes since the last event boundary (the current event's complete lines,
    then an incomplete line). Without any CR in sight, event boundaries are exactly the
    occurrences of `\n\n` (a line's end followed by an empty line), so a block is split
    with `find` and the common event is sliced out directly; with a CR, lines go one by
    one through sseclient-py's accumulation rule."""

    __slots__ = ("_pending", "_more", "_more_n", "_limit", "error")

    def __init__(self, limit: int = 16 * 1024 * 1024) -> None:
        self._pending = b""
        # blocks after `_pending` without a line end: kept apart, joined once a block
        # brings one (re-joining and re-scanning the whole line on every block made a
        # long line's cost quadratic: 16 MiB in 8 KiB reads took 41 s)
        self._more: list[bytes] = []
        self._more_n = 0
        self._limit = limit
        self.error: UnicodeDecodeError | None = None

    def feed(self, data: bytes) -> list[str | bytes]:
        """The payloads of the events `data` completes: the common event's payload as
        the bytes it arrived in (undecoded: orjson validates UTF-8 while parsing, and
        invalid UTF-8 then fails the same event), any other as str. An event whose lines
        are not UTF-8 in the general path ends the stream as in sseclient-py: the events
        before it are returned, and `error` is set (the caller raises it after handling
        them; `feed` and `end` raise it too)."""
        if self.error is not None:
            raise self.error
        if self._pending:
            if b"\n" not in data and b"\r" not in data:  # the line goes on: no event ends
                self._more.append(data)
                self._more_n += len(data)
                if len(self._pending) + self._more_n > self._limit:
                    raise self._too_long()
                return []
            data = self._take_pending() + data
        out: list[str | bytes] = []
        try:
            return self._feed(data, out)
        except UnicodeDecodeError as e:
            self.error = e
            self._pending = b""
            return out

    def _feed(self, data: bytes, out: list[str | bytes]) -> list[str | bytes]:
        if b"\r" in data:
            rest = self._feed_lines(data, out)
        else:
            pieces = data.split(b"\n\n")  # left to right, as finding each in turn
            rest = pieces.pop()
            append = out.append
            for piece in pieces:
                if piece[:6] == b"data: " and b"\n" not in piece:
                    append(piece[6:])  # bytes: orjson checks the UTF-8 as it parses
                elif piece[:1] != b":" or b"\n" in piece or not piece.isascii():
                    _dispatch(piece + b"\n\n", out)
            if rest[:1] == b":":
                rest = _without_comments(rest)
        if len(rest) > self._limit:  # an event that never ends cannot exhaust memory
            raise self._too_long()
        self._pending = rest
        return out

    def end(self) -> list[str | bytes]:
        """At the end of the stream: the event left without its blank line, if any (its
        unterminated last line is dropped)."""
        if self.error is not None:
            raise self.error
        rest = self._take_pending()
        block = rest[:rest.rfind(b"\n") + 1]
        out: list[str | bytes] = []
        if block:
            _dispatch(block, out)
        return out

    def _too_long(self) -> LineTooLong:
        return LineTooLong(f"an SSE line or event longer than {self._limit} bytes without "
                           "its end")

    def _take_pending(self) -> bytes:
        """The bytes since the last event boundary, as one; the splitter keeps none."""
        rest = self._pending
        if self._more:
            rest = b"".join((rest, *self._more))
            self._more.clear()
            self._more_n = 0
        self._pending = b""
        return rest

    @staticmethod
    def _feed_lines(data: bytes, out: list[str | bytes]) -> bytes:
        """The general rule, line by line: a `\n`-terminated line is cut at CR/LF into
        sub-lines, each appended to the block, which ends when it ends in a blank line.
        Returns what is left (the block's lines, then the incomplete line)."""
        block = b""
        start = 0
        find = data.find
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                break
            for sub in data[start:nl + 1].splitlines(True):
                block += sub
                if block.endswith(_EVENT_ENDS):
                    _dispatch(block, out)
                    block = b""
            start = nl + 1
        return block + data[start:]


def _without_comments(rest: bytes) -> bytes:
    """An event's start (`rest`, no CR, no blank line) without its complete lines when all
    are ASCII comments: they dispatch nothing, and a server's millions of keep-alive comments
    must not pile up (nor be re-joined on every block) until the cap."""
    last = rest.rfind(b"\n")
    whole = rest[:last]
    if last < 0 or whole.count(b"\n") != whole.count(b"\n:") or not whole.isascii():
        return rest  # (a line not UTF-8 fails the stream, as it would have in its event)
    return rest[last + 1:]


def _dispatch(block: bytes, out: list[str | bytes]) -> None:
    """Parse one event's block as sseclient-py does; append its data if it has any."""
    data = None
    for raw in block.splitlines():
        line = raw.decode("utf-8")
        if not line.strip() or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name not in _FIELDS:
            continue
        if name == "data":
            value = value[1:] if value.startswith(" ") else value
            data = (data or "") + value + "\n"
    if data:
        out.append(data[:-1])
