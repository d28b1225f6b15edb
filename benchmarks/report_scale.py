"""`anvil report` on a run of 100k requests: its time and peak memory beside its floor.

Target (issue 19): <= 10 s for a 100k-row run, and the pictures must not need the rows as
Python objects. The run is the same synthesised, seeded `requests.jsonl` that
`postprocess_scale.py` makes (reasoning and content chunks, usage, ~3 % failures of every
kind), post-processed once so its folder holds `benchmark.json`, then:

- the floor: `anvil postprocess` of the same folder — reading the raw records and building
  the rows, which a report must do too (it rebuilds the run from `requests.jsonl` to draw
  the per-request timeline and checks the result against `benchmark.json`);
- `anvil report RUN_DIR --out DIR`: the same, plus every figure and the page;

each in a child process of its own (wall seconds, peak RSS), interleaved `--repeat` times,
medians printed, in one invocation (this VM's speed varies 1.5-1.8x by the hour: compare
only figures of one run). It prints figures and asserts nothing; exit status 1 only if a
child failed.

    .venv/bin/python benchmarks/report_scale.py [--rows 100000] [--repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from postprocess_scale import run_child, speed_s, synthesize  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the temporary run folder")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="anvil-report-scale-"))
    run = tmp / "run"
    run.mkdir()
    try:
        counts = synthesize(run / "requests.jsonl", a.rows, a.users, a.seed)
        py = sys.executable
        rc, _, _ = run_child([py, "-m", "anvil_metrics", "postprocess", str(run)],
                             tmp / "first.log")
        if rc:
            print(f"postprocess failed: see {tmp / 'first.log'}")
            return 1
        print(f"{counts['rows']} rows ({counts['failed']} failed), raw file "
              f"{(run / 'requests.jsonl').stat().st_size / 1e6:.0f} MB; "
              f"speed_s {speed_s():.2f} s")
        floor, report = [], []
        for i in range(a.repeat):
            floor.append(run_child([py, "-m", "anvil_metrics", "postprocess", str(run)],
                                   tmp / f"floor{i}.log"))
            report.append(run_child([py, "-m", "anvil_metrics", "report", str(run), "--out",
                                     str(tmp / "report")], tmp / f"report{i}.log"))
            print(f"  round {i + 1}: postprocess {floor[-1][1]:.2f} s "
                  f"({floor[-1][2] / 2**20:.0f} MiB), report {report[-1][1]:.2f} s "
                  f"({report[-1][2] / 2**20:.0f} MiB)")
        if any(r[0] for r in floor + report):
            print(f"a child failed: see the logs in {tmp}")
            return 1
        mid = a.repeat // 2
        f_s = sorted(r[1] for r in floor)[mid]
        r_s = sorted(r[1] for r in report)[mid]
        print(f"median: anvil report {r_s:.2f} s (target <= 10 s), floor (anvil postprocess) "
              f"{f_s:.2f} s: ratio {r_s / f_s:.2f}, the pictures and page {r_s - f_s:.2f} s; "
              f"peak RSS report {max(r[2] for r in report) / 2**20:.0f} MiB, postprocess "
              f"{max(r[2] for r in floor) / 2**20:.0f} MiB")
        print((tmp / "report0.log").read_text().splitlines()[0])
        return 0
    finally:
        if a.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
