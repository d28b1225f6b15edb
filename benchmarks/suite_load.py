"""The whole test suite, run again and again from a fresh clone, optionally beside a CPU hog.

Why: `make test` must finish in 300 s on a 2-core machine and must never fail because the
machine is busy (issue 27). The proof is the suite run several times in a row from a clone of
the committed tree, with a second CPU-heavy process beside it; this script does exactly that
and prints each run's time, counts and failures, so the figures in a closing note come from
one command.

How: `git clone` of this checkout's HEAD into a temporary folder (what is committed, nothing
else), `make test` there `--runs` times in a row (the clone's venv and the tests' bytecode
cache are built first, timed apart), each beside `--hogs` busy Python loops
(`while True: pass`, one process each, started before the run and stopped by PID after it,
also when the script itself is stopped).
Each run's last line of shards.py (tests, failed, errors, seconds) and the names of failed
tests are printed; the clone is removed at the end unless `--keep`.

    .venv/bin/python benchmarks/suite_load.py [--runs 5] [--hogs 1] [--jobs 4] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anvil_metrics.runs.simproc import stop_process  # noqa: E402

HOG = "while True: pass"
SUMMARY = re.compile(r"^(\d+) tests: (\d+) failed, (\d+) errors, (\d+) skipped, in ([\d.]+) s")


def start_hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]


def run_once(clone: Path, jobs: int, log: Path) -> tuple[int, float, str, list[str]]:
    """`make test` in the clone: (exit code, wall seconds, summary line, failed tests)."""
    started = time.monotonic()
    with log.open("wb") as out:
        # its own process group, so that an interrupted proof stops the shards too
        proc = subprocess.Popen(["make", "test", f"JOBS={jobs}"], cwd=clone, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            code = proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    wall = time.monotonic() - started
    text = log.read_text(errors="replace")
    summary = next((ln for ln in text.splitlines() if SUMMARY.match(ln)), "(no summary line)")
    failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.MULTILINE)))
    return code, wall, summary, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="make test runs in a row (5)")
    parser.add_argument("--hogs", type=int, default=1, help="busy loops beside each run (1)")
    parser.add_argument("--jobs", type=int, default=4, help="make test's JOBS (4)")
    parser.add_argument("--keep", action="store_true", help="keep the clone and its logs")
    args = parser.parse_args(argv)
    # stopped by `kill PID`: leave by the `finally`s, which stop the hogs and the shards
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.runs < 1 or args.hogs < 0 or args.jobs < 1:
        parser.error("--runs and --jobs must be >= 1, --hogs >= 0")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.strip()
    folder = Path(tempfile.mkdtemp(prefix="anvil-suite-"))
    clone = folder / "anvil"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    print(f"clone of {head} in {clone}; {args.runs} runs, {args.hogs} hog(s) beside each, "
          f"JOBS={args.jobs}", flush=True)
    started = time.monotonic()
    subprocess.run(["make", ".venv/.warm"], cwd=clone, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"venv and the tests' bytecode cache: {time.monotonic() - started:.1f} s", flush=True)
    failures = 0
    try:
        for k in range(1, args.runs + 1):
            hogs = start_hogs(args.hogs)
            try:
                code, wall, summary, failed = run_once(clone, args.jobs,
                                                       folder / f"run-{k}.log")
            finally:
                for hog in hogs:
                    stop_process(hog)
            failures += code != 0
            print(f"run {k}: exit {code}, {wall:.1f} s: {summary}", flush=True)
            for name in failed:
                print(f"  failed: {name}", flush=True)
    finally:
        if args.keep:
            print(f"kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"{args.runs - failures} of {args.runs} runs passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
