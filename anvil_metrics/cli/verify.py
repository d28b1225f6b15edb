"""`anvil verify`, `anvil report` and `anvil metrics`: the figures anvil wrote, recomputed,
drawn and defined.

Why its own module: these commands only read finished files (a benchmark, a summary, a
checks document, a run or campaign folder) or the catalogue; none starts a run or asks a
server. `verify` tells a file's kind by its `schema` string and says what it was checked
against, then each mismatch on a line of its own.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

from anvil_metrics.cli.parsing import Commands
from anvil_metrics.errors import UsageError

EXPECTED = "benchmark.json or summary.json"  # what `anvil verify` reads


def add_verify(sub: Commands) -> None:
    """`anvil verify FILE.json`."""
    v = sub.add_parser("verify", help="recompute and check every figure of a benchmark "
                       "or summary file")
    v.add_argument("file")


def add_report(sub: Commands) -> None:
    """`anvil report FOLDER [--out DIR]`."""
    rp = sub.add_parser("report", help="draw a run, sweep, capacity search or campaign "
                        "folder as report.html and PNGs (needs the [report] extra)")
    rp.add_argument("folder", help="a run folder (requests.jsonl), a capacity search "
                    "(capacity.json) or a campaign folder (campaign.json)")
    rp.add_argument("--out", default=None, help="write report.html and the PNGs here "
                    "(default: into the folder itself)")


def add_metrics(sub: Commands) -> None:
    """`anvil metrics`."""
    sub.add_parser("metrics", help="list every figure anvil computes: name, unit, formula")


def cmd_verify(a: argparse.Namespace) -> int:
    from anvil_metrics.errors import shorten
    from anvil_metrics.jsonio import read_json
    from anvil_metrics.post.docscan import verify_file
    from anvil_metrics.post.schema import SCHEMA
    from anvil_metrics.schemas.parts import FILES
    from anvil_metrics.summary.verify import is_summary, read_small_json

    path = Path(a.file)
    if not path.exists():
        raise UsageError(f"verify: {a.file!r} does not exist; pass a {EXPECTED} path")
    doc = read_small_json(path)
    if doc is not None and not (isinstance(doc, dict) and
                                str(doc.get("schema", "")).startswith("anvil-serving.")):
        # someone else's JSON: one line, not a mismatch for every field it lacks (None: too
        # big to hold whole; verify's own reading below says what it is)
        found = (f"a JSON {type(doc).__name__}, not an object" if not isinstance(doc, dict)
                 else f"schema {shorten(doc['schema'])}" if "schema" in doc
                 else "no schema field")
        raise UsageError(f"verify: {a.file} is not an anvil-serving document ({found}); "
                         f"expected a {EXPECTED}")
    if is_summary(doc):
        return _verify_summary(doc, path)
    if isinstance(doc, dict) and doc.get("schema") == "anvil-serving.checks/v1":
        return _verify_checks(doc, path)
    # a file that cannot be read or parsed: one line, exit 2. Its fields and blocks are
    # checked against the typed definitions the shipped JSON Schema is generated from, its
    # rows against the catalogue's, however large the file
    notes: list[str] = []  # what could not be recomputed (a samples file gone)
    problems = verify_file(path, load=partial(read_json, expected=f"a {EXPECTED}",
                                              command="verify"), notes=notes)
    said = (f"schema: checked against anvil's definition of {SCHEMA}, the one "
            f"{FILES[SCHEMA]} is generated from")
    if _mismatches(path, said, problems):
        return 1
    print(f"{path}: every per-request value and aggregate recomputes exactly")
    for note in notes:
        print(f"{path}: {note}")
    return 0


def _mismatches(path: Path, said: str, problems: list[str]) -> bool:
    """Print what the file was checked against and each problem; True when there were any."""
    print(said)
    for msg in problems:
        print(f"MISMATCH {msg}")
    if problems:
        print(f"{path}: {len(problems)} mismatch(es)")
    return bool(problems)


def _verify_checks(doc: dict[str, Any], path: Path) -> int:
    from anvil_metrics.checks.docverify import SCHEMA, verify_checks
    from anvil_metrics.schemas.build import check

    said, breaches = check(doc, SCHEMA)
    if _mismatches(path, said, [*breaches, *verify_checks(doc)]):
        return 1
    print(f"{path}: every suite's result, passed and total follow from its cases")
    return 0


def _verify_summary(doc: dict[str, Any], path: Path) -> int:
    from anvil_metrics.schemas.build import check
    from anvil_metrics.summary.folder import SCHEMA
    from anvil_metrics.summary.verify import verify_summary

    said, breaches = check(doc, SCHEMA)
    check_ = verify_summary(doc, path)
    if _mismatches(path, said, [*breaches, *check_.problems]):
        return 1
    if check_.folder is None:
        print(f"{path}: shape checked only, figures not recomputed: {check_.why_shape_only}")
        return 0
    print(f"{path}: every figure recomputes from {check_.runs} runs in {check_.folder}")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from anvil_metrics.report.build import make_report

    r = make_report(a.folder, a.out)
    print(f"{r.kind} report: {r.html_path} ({len(r.png_paths)} figures, "
          f"{r.elapsed_s:.1f} s)")
    for png in r.png_paths:
        print(f"  {png}")
    return 0


def cmd_metrics(a: argparse.Namespace) -> int:
    from anvil_metrics.catalog import describe

    rows = describe()
    width = max(len(name) for _, name, _, _ in rows)
    block = None
    for where, name, unit, definition in rows:
        if where != block:
            block = where
            print(f"{where}:")
        print(f"  {name:<{width}}  {unit:<8}  {definition}")
    return 0
