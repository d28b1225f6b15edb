"""`make test`: every test, in a few pytest processes at once, each taking the next test file
as soon as it is free.

Why not pytest-xdist: an xdist worker hears its controller on a thread of its own (execnet),
and Locust's import-time `gevent.monkey.patch_all()` turns that thread's locks into gevent's,
so the worker waits forever ("LoopExit"); leaving threads unpatched breaks the tests that run
Locust in-process. Plain pytest processes have no such thread. Much of the suite waits on real
processes (simulator, Locust, workers), so several processes on two cores finish well before
one: 4 kept 1.78 cores busy (292 s) where 6 kept 1.75 (307 s), one after the other on this VM.

How: every shard collects every file and runs those it claims (`tests/claims.py`), in one
order, longest first (the seconds each file took, `tests/durations.json`, rewritten by
`--record`; a file not in it goes first), so the shards end within about one file
of each other however the machine's speed changes during the run. Each shard is
`python -m pytest FILES` with the project's own settings (pyproject.toml: markers,
`-m 'not real'`), its output kept in a log that is printed in full when the shard fails. The
counts come from each shard's JUnit XML; no test collected at all is a failure (exit 5), as
with plain pytest.

Bytecode: where `PYTHONDONTWRITEBYTECODE` is set (this VM sets it), the shards and every
process they start share one cache outside the source tree, kept in the venv between runs
(`bytecode_folder`); `--warm` fills it once (`make test` does so once per venv).
Cold, the four shards compiled and assertion-rewrote the same modules at once: 42 CPU-s and
21 s before the first test, against 16 CPU-s and 8 s warm (measured side by side here).

    python tests/shards.py [--jobs N] [--record] [--keep DIR] [--warm] [PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import claims as claims_plugin

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DURATIONS = TESTS / "durations.json"
SKIP_DIRS = {"__pycache__", "realserver", "data"}
NO_TESTS = 5  # pytest's exit code when nothing was collected


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


def order(files: list[str], weights: dict[str, float]) -> list[str]:
    """Longest first (LPT: the shards then end within one file of each other); a file
    without a recorded time goes first, as if the longest: a short one there costs nothing,
    a long one last keeps one shard running alone (a new 32 s file did so, 20 s)."""
    return sorted(files, key=lambda f: (f in weights, -weights.get(f, 0.0), f))


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


def bytecode_folder() -> Path | None:
    """Where the tests' processes keep bytecode when Python is told to write none beside the
    sources: in the venv (`sys.prefix`), kept between runs; None outside a venv."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "anvil-pycache"
    return None


def shard_env(folder: Path) -> dict[str, str]:
    """The shards' environment: where `PYTHONDONTWRITEBYTECODE` is set (this VM sets it),
    one bytecode cache (`bytecode_folder`) for every shard and every process the tests start.

    Why: without it each pytest process compiled (and assertion-rewrote) the modules it
    imports anew, ~1.5 CPU-s a shard (hypothesis, Locust, anvil), and conftest's own cache
    reached only the processes the tests start. Nothing is written into the source tree."""
    env = dict(os.environ)
    if env.get("PYTHONDONTWRITEBYTECODE") and "PYTHONPYCACHEPREFIX" not in env:
        env.pop("PYTHONDONTWRITEBYTECODE")
        env["PYTHONPYCACHEPREFIX"] = str(bytecode_folder() or folder / "pycache")
    return env


def pytest_cmd(files: list[str], pytest_args: list[str], *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra,
            *pytest_args, *files]


def run(jobs: int, files: list[str], pytest_args: list[str],
        folder: Path) -> list[tuple[int, Path]]:
    """Start `jobs` shards on the same files, each running those it claims; wait for all;
    (exit code, log) each."""
    procs = []
    env = shard_env(folder)
    claims = folder / "claims"
    claims.mkdir()
    env[claims_plugin.ENV] = str(claims)
    for i in range(jobs):
        log = folder / f"shard-{i}.log"
        cmd = pytest_cmd(files, pytest_args, f"--junitxml={folder / f'shard-{i}.xml'}",
                         "-o", "junit_family=xunit2")
        with log.open("wb") as out:
            procs.append((subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=env), log))
    return [(proc.wait(), log) for proc, log in procs]


def warm(files: list[str]) -> int:
    """Fill the bytecode cache once: collect every test (which imports and assertion-rewrites
    what the shards import) and, beside it, import what the tests' processes run. Nothing to
    do where the cache would not outlive this run (bytecode written nowhere, no venv)."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and bytecode_folder() is None:
        return 0
    env = shard_env(Path(tempfile.gettempdir()))
    children = [pytest_cmd(files, ["--collect-only"]),
                [sys.executable, "-c", "import locust.main, anvil_metrics.runs.locustfile, "
                 "anvil_metrics.cli.main, anvil_metrics.sim.server"]]
    procs = [subprocess.Popen(c, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL) for c in children]
    return max(p.wait() for p in procs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4, help="pytest processes (default 4)")
    parser.add_argument("--record", action="store_true",
                        help=f"rewrite {DURATIONS.relative_to(REPO)} from this run")
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="keep each shard's log and JUnit XML in DIR (made if missing)")
    parser.add_argument("--warm", action="store_true",
                        help="only fill the tests' bytecode cache (once per venv) and exit")
    args, pytest_args = parser.parse_known_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: use an integer >= 1")
    import orjson

    weights = orjson.loads(DURATIONS.read_bytes()) if DURATIONS.exists() else {}
    files = test_files()
    if not files:
        print("shards: no test files under tests/", file=sys.stderr)
        return NO_TESTS
    if args.warm:
        return warm(files)
    files = order(files, weights)
    speed = speed_s()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="anvil-shards-") as tmp:
        folder = Path(tmp)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            folder = args.keep.resolve()
        codes = run(args.jobs, files, pytest_args, folder)
        outcomes = [read_junit(folder / f"shard-{i}.xml") for i in range(args.jobs)]
        for i, ((code, log), outcome) in enumerate(zip(codes, outcomes, strict=True)):
            text = log.read_text(errors="replace")
            last = text.strip().splitlines()[-1] if text.strip() else "(no output)"
            print(f"shard {i}: ran {len(outcome.by_file_s)} files: {last}")
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
          f"{total['skipped']} skipped, in {elapsed:.1f} s ({args.jobs} processes)")
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
