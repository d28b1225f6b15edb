"""The server-metrics sampler: a child process that scrapes `/metrics` and writes every sample.

Why a child process: a load process stamps chunk arrivals on one event loop, and a metrics
scrape is work of unbounded size at an unknown time — vLLM's `/metrics` is tens of kilobytes
of text, a broken endpoint may hang or answer garbage. Parsing that on the load's loop would
delay stamps by milliseconds every second. The child does all of it (fetch, parse, write);
the load process only writes a word to its stdin now and then (`sampler.py`).

`python -m anvil_metrics.telemetry.scrape URL OUT --interval-s S --timeout-s T` scrapes URL every S
seconds (each scrape bounded by T) and appends one JSON line per scrape to OUT, flushed at
once (nothing is lost if the run dies):

    {"type": "sample", "seq": 3, "t_ns": …, "done_ns": …, "mark": null,
     "ok": true, "series": {"vllm:num_requests_running{engine=\"0\",model_name=\"m\"}": 2.0, …}}
    {"type": "sample", "seq": 4, …, "ok": false, "error": "timed out after 2 s"}

- `t_ns` / `done_ns`: `time.perf_counter_ns()` when the scrape was sent / its reply parsed —
  the load process's clock (both read CLOCK_MONOTONIC, one per host), so samples and request
  stamps share one time line.
- `series`: every sample of the exposition, keyed by its name and sorted labels, as the
  Prometheus text format writes them; histogram `_bucket` series and `_created` stamps are
  left out (anvil uses a histogram's `_sum` and `_count` only; buckets would make the file
  ten times larger). Parsed with `prometheus_client`'s reference parser.
- `mark`: `"first"` / `"last"` for the scrapes the load process asks for just before the
  first measured request and just after the last (a line `first` or `last` on stdin); the
  child answers each with a line `done <seq>` on stdout once its sample is written. After
  `last` (or at the end of stdin) the child exits.

The first line of OUT is `{"type": "scrape", "url": …, "interval_s": …, "timeout_s": …}`
(the caller passes a URL without credentials).
"""

from __future__ import annotations

import argparse
import selectors
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, BinaryIO

import orjson

MAX_BYTES = 16 << 20  # a /metrics reply larger than this is refused (vLLM's: ~50 kB)
MARKS = ("first", "last")
SKIPPED_SUFFIXES = ("_bucket", "_created")


def series_key(name: str, labels: dict[str, str]) -> str:
    """`name{a="x",b="y"}` (labels sorted), or the bare name: one series' key."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def split_key(key: str) -> str:
    """The metric name of a series key."""
    return key.split("{", 1)[0]


def exposition_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition but histogram buckets and `_created`
    stamps: (name, labels, value). Raises ValueError on text the parser refuses."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith(SKIPPED_SUFFIXES):
                out.append((sample.name, sample.labels, float(sample.value)))
    return out


def parse_exposition(text: str) -> dict[str, float]:
    """`exposition_samples` keyed by series (`series_key`): series key -> value."""
    return {series_key(name, labels): value
            for name, labels, value in exposition_samples(text)}


def scrape_once(url: str, timeout_s: float) -> dict[str, float]:
    """One scrape: the parsed series. Raises OSError/ValueError with a one-line reason."""
    return parse_reply(fetch_text(url, timeout_s), parse_exposition)


def parse_reply(text: str, parse: Any) -> Any:
    """`parse(text)`, a refusal as one ValueError; an empty result refused too."""
    try:
        out = parse(text)
    except Exception as e:  # noqa: BLE001 - the parser raises several kinds on garbage
        raise ValueError(f"not Prometheus text ({type(e).__name__}: {e})"[:300]) from None
    if not out:
        raise ValueError("the reply holds no metrics")
    return out


def scrape_samples(url: str, timeout_s: float) -> list[tuple[str, dict[str, str], float]]:
    """One scrape as `exposition_samples`. Raises OSError/ValueError (one line)."""
    return parse_reply(fetch_text(url, timeout_s), exposition_samples)


def fetch_text(url: str, timeout_s: float) -> str:
    """A /metrics reply's text, bounded in time and size. Raises OSError/ValueError with a
    one-line reason."""
    req = urllib.request.Request(url, headers={"Accept": "text/plain"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the user's
            body = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise OSError(f"HTTP {e.code} from {url}") from None
    except TimeoutError:
        raise OSError(f"no answer within {timeout_s:g} s") from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, TimeoutError):
            raise OSError(f"no answer within {timeout_s:g} s") from None
        raise OSError(f"cannot reach {url}: {reason}") from None
    if len(body) > MAX_BYTES:
        raise ValueError(f"the reply is larger than {MAX_BYTES >> 20} MB")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"the reply is not UTF-8 text ({e})") from None


class Sampler:
    """Scrapes on a fixed period and on request; writes each sample to `out`. (The energy
    child, `energy.py`, is one too, with its own reading and marks.)"""

    marks: tuple[str, ...] = MARKS

    def __init__(self, url: str, out: BinaryIO, interval_s: float, timeout_s: float,
                 fetch: Any = scrape_once) -> None:
        self.url, self.out = url, out
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.fetch = fetch
        self.seq = 0

    def sample(self, mark: str | None) -> int:
        """Scrape once, write the line; its `seq`."""
        t_ns = time.perf_counter_ns()
        line: dict[str, Any] = {"type": "sample", "seq": self.seq, "t_ns": t_ns, "mark": mark}
        try:
            series = self.fetch(self.url, self.timeout_s)
        except (OSError, ValueError) as e:
            line.update(done_ns=time.perf_counter_ns(), ok=False, error=str(e))
        else:
            line.update(done_ns=time.perf_counter_ns(), ok=True, series=series)
        self.out.write(orjson.dumps(line) + b"\n")
        self.out.flush()
        self.seq += 1
        return self.seq - 1

    def run(self, commands: BinaryIO, answers: BinaryIO, max_s: float) -> None:
        """Until `last`, the end of `commands`, or `max_s` seconds (a bound: the load
        process normally ends it): a periodic sample every `interval_s`, and a marked one
        for each `first` / `last` line read from `commands`."""
        sel = selectors.DefaultSelector()
        sel.register(commands, selectors.EVENT_READ)
        start = time.monotonic()
        due = start
        pending = b""
        while time.monotonic() - start < max_s:
            wait = max(0.0, due - time.monotonic())
            if sel.select(wait):
                data = commands.read1(4096) if hasattr(commands, "read1") else commands.read(1)
                if not data:
                    return
                pending += data
                while b"\n" in pending:
                    word, pending = pending.split(b"\n", 1)
                    mark = word.decode("ascii", "replace").strip()
                    if mark not in self.marks:
                        continue
                    seq = self.sample(mark)
                    answers.write(f"done {seq}\n".encode())
                    answers.flush()
                    if mark == "last":
                        return
                continue
            self.sample(None)
            due += self.interval_s
            if due < time.monotonic():  # a slow scrape: the next one now, not a burst
                due = time.monotonic()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m anvil_metrics.telemetry.scrape",
                                 description="scrape a /metrics endpoint (anvil's sampler)")
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--interval-s", type=float, default=1.0)
    ap.add_argument("--timeout-s", type=float, default=2.0)
    ap.add_argument("--max-s", type=float, default=7 * 24 * 3600.0)
    a = ap.parse_args(argv)
    head = orjson.dumps({"type": "scrape", "url": a.url, "interval_s": a.interval_s,
                         "timeout_s": a.timeout_s})
    return run_child(a.out, head, lambda out: Sampler(a.url, out, a.interval_s, a.timeout_s),
                     a.max_s)


def run_child(path: str, head: bytes, sampler_of: Callable[[BinaryIO], Any], max_s: float
              ) -> int:
    """A sampler child's life: `head` as the first line of `path` (appended, flushed), then
    `sampler_of(file).run(...)` answering the parent's commands on stdin until it closes (the
    parent ended) or `max_s`. A terminal's Ctrl-C reaches this process too (it is in its
    Locust's process group); the Locust process still asks for its last reading while it
    stops the run, so Ctrl-C is its to handle, never this process's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(path, "ab") as out:
        out.write(head + b"\n")
        out.flush()
        try:
            sampler_of(out).run(sys.stdin.buffer, sys.stdout.buffer, max_s)
        except (KeyboardInterrupt, BrokenPipeError):
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
