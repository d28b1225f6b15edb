"""`make test`: every test, in a few pytest processes at once, each a share of the files.

Why not pytest-xdist: an xdist worker hears its controller on a thread of its own (execnet),
and Locust's import-time `gevent.monkey.patch_all()` turns that thread's locks into gevent's,
so the worker waits forever ("LoopExit"); leaving threads unpatched breaks the tests that run
Locust in-process. Plain pytest processes over disjoint sets of files have no such thread.
Much of the suite waits on real processes (simulator, Locust, workers), so several processes
on two cores finish well before one: 4 kept 1.83 cores busy where 3 kept 1.70 (305 s against
358 s for the whole suite, measured one after the other on this VM).

How: the test files are dealt to `--jobs` shards, longest first, each to the shard with the
least work so far (weights: the seconds each file took, `tests/durations.json`, rewritten by
`--record`; a file not in it counts as the median). Each shard is `python -m pytest FILES`
with the project's own settings (pyproject.toml: markers, `-m 'not real'`), its output kept
in a log that is printed in full when the shard fails. The counts come from each shard's
JUnit XML; no test collected at all is a failure (exit 5), as with plain pytest.

    python tests/shards.py [--jobs N] [--record] [--keep DIR] [PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DURATIONS = TESTS / "durations.json"
SKIP_DIRS = {"__pycache__", "realserver", "data"}
NO_TESTS = 5  # pytest's exit code when nothing was collected


@dataclass
class Shard:
    files: list[str]
    weight_s: float = 0.0


@dataclass(frozen=True)
class Outcome:
    tests: int
    failed: int
    errors: int
    skipped: int
    by_file_s: dict[str, float]
    slowest: list[tuple[float, str]]


def speed_s() -> float:
    """Seconds for 10M additions in a plain loop: the machine's speed for Python code now,
    printed beside the suite's time (this VM's speed varies 1.5-1.8x from hour to hour, so a
    time means little without it; `benchmarks/postprocess_scale.py` reads the same)."""
    t0 = time.perf_counter()
    x = 0
    for i in range(10_000_000):
        x += i
    return time.perf_counter() - t0


def test_files() -> list[str]:
    """The test files pytest would collect from tests/, relative to the repository."""
    return sorted(str(p.relative_to(REPO)) for p in TESTS.rglob("test_*.py")
                  if not SKIP_DIRS & set(p.relative_to(TESTS).parts))


def deal(files: list[str], weights: dict[str, float], jobs: int) -> list[Shard]:
    """Longest first, each to the least loaded shard (LPT: within 4/3 of the best split)."""
    default = statistics.median(weights.values()) if weights else 1.0
    shards = [Shard([]) for _ in range(jobs)]
    for f in sorted(files, key=lambda f: (-weights.get(f, default), f)):
        least = min(shards, key=lambda s: s.weight_s)
        least.files.append(f)
        least.weight_s += weights.get(f, default)
    return [s for s in shards if s.files]


def read_junit(path: Path) -> Outcome:
    """Counts, seconds per file and the slowest tests of one shard's JUnit XML."""
    counts: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    slowest = []
    if path.exists():
        for case in ET.parse(path).getroot().iter("testcase"):
            seconds = float(case.get("time") or 0)
            name = _file_of(case.get("classname", ""))
            by_file[name] += seconds
            slowest.append((seconds, f"{case.get('classname')}::{case.get('name')}"))
            counts["tests"] += 1
            for kind in ("failure", "error", "skipped"):
                counts[kind] += case.find(kind) is not None
    slowest.sort(reverse=True)
    return Outcome(counts["tests"], counts["failure"], counts["error"], counts["skipped"],
                   dict(by_file), slowest[:10])


def _file_of(classname: str) -> str:
    """"tests.e2e.test_run.TestX" -> "tests/e2e/test_run.py" (the longest prefix that is a
    file)."""
    parts = classname.split(".")
    for k in range(len(parts), 0, -1):
        candidate = "/".join(parts[:k]) + ".py"
        if (REPO / candidate).exists():
            return candidate
    return classname


def shard_env(folder: Path) -> dict[str, str]:
    """The shards' environment: where `PYTHONDONTWRITEBYTECODE` is set (this VM sets it),
    one bytecode cache in `folder` for every shard and every process the tests start.

    Why: without it each pytest process compiled (and assertion-rewrote) the modules it
    imports anew, ~1.5 CPU-s a shard (hypothesis, Locust, anvil), and conftest's own cache
    reached only the processes the tests start. Nothing is written into the source tree."""
    env = dict(os.environ)
    if env.get("PYTHONDONTWRITEBYTECODE") and "PYTHONPYCACHEPREFIX" not in env:
        env.pop("PYTHONDONTWRITEBYTECODE")
        env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    return env


def run(shards: list[Shard], pytest_args: list[str], folder: Path) -> list[tuple[int, Path]]:
    """Start every shard, wait for all; (exit code, log) each."""
    procs = []
    env = shard_env(folder)
    for i, shard in enumerate(shards):
        log = folder / f"shard-{i}.log"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={folder / f'shard-{i}.xml'}", "-o", "junit_family=xunit2",
               *pytest_args, *shard.files]
        with log.open("wb") as out:
            procs.append((subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=env), log))
    return [(proc.wait(), log) for proc, log in procs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4, help="pytest processes (default 4)")
    parser.add_argument("--record", action="store_true",
                        help=f"rewrite {DURATIONS.relative_to(REPO)} from this run")
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="keep each shard's log and JUnit XML in DIR (made if missing)")
    args, pytest_args = parser.parse_known_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: use an integer >= 1")
    import orjson

    weights = orjson.loads(DURATIONS.read_bytes()) if DURATIONS.exists() else {}
    files = test_files()
    if not files:
        print("shards: no test files under tests/", file=sys.stderr)
        return NO_TESTS
    shards = deal(files, weights, args.jobs)
    speed = speed_s()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="anvil-shards-") as tmp:
        folder = Path(tmp)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            folder = args.keep.resolve()
        codes = run(shards, pytest_args, folder)
        outcomes = [read_junit(folder / f"shard-{i}.xml") for i in range(len(shards))]
        for i, ((code, log), shard) in enumerate(zip(codes, shards, strict=True)):
            text = log.read_text(errors="replace")
            last = text.strip().splitlines()[-1] if text.strip() else "(no output)"
            print(f"shard {i}: {len(shard.files)} files, planned {shard.weight_s:.0f} s: {last}")
            if code not in (0, NO_TESTS):
                print(text)
    elapsed = time.monotonic() - started
    total = Counter()
    for o in outcomes:
        total.update(tests=o.tests, failed=o.failed, errors=o.errors, skipped=o.skipped)
    print("slowest:")
    for seconds, name in sorted((t for o in outcomes for t in o.slowest), reverse=True)[:10]:
        print(f"  {seconds:6.1f} s  {name}")
    print(f"{total['tests']} tests: {total['failed']} failed, {total['errors']} errors, "
          f"{total['skipped']} skipped, in {elapsed:.1f} s ({len(shards)} processes)")
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = used.ru_utime + used.ru_stime
    print(f"CPU {cpu_s:.0f} s (every process the shards started: {cpu_s / elapsed:.2f} cores "
          f"busy); this machine's speed before the run: 10M additions in {speed:.2f} s")
    if args.record:
        by_file = {f: round(s, 2) for o in outcomes for f, s in o.by_file_s.items()}
        DURATIONS.write_bytes(orjson.dumps(dict(sorted(by_file.items())),
                                           option=orjson.OPT_INDENT_2) + b"\n")
    if total["tests"] == 0:
        print("shards: no tests ran", file=sys.stderr)
        return NO_TESTS
    bad = [c for c, _ in codes if c not in (0, NO_TESTS)]
    return max(bad) if bad else 0


if __name__ == "__main__":
    sys.exit(main())
