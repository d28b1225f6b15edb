"""`anvil verify summary.json`: does every figure of a public-benchmark-summary/v1 document
follow from the runs of its campaign?

Why it exists: a summary is what a model is promoted on, and it is many runs folded into a
few numbers. As `post/verify.py` does for one run, this module recomputes the whole
summary — by calling the very functions that wrote it (`folder.read_campaign_folder`, which
keeps only runs whose `benchmark.json` verifies, and `folder.summary_document`, with the
bootstrap seed and resample count the file records) — and compares figure by figure, with
exact equality (`post.schema.same`: floats bit for bit, int ≠ float, null ≠ value). Each
difference is one message starting with its path (`performance[2].e2e_p50_ms: file has …,
recomputed …`).

Where the runs are: the folder the summary lies in when it holds `campaign.json` (the
default output is CAMPAIGN_DIR/summary.json), else the folder its `campaign` block's
`folder` records. A summary with neither (the spec's example, or one copied away from its
runs) can only be checked for shape (`SHAPE_*` below, which `schemas/verdicts.py` also
builds the JSON Schema from), and the result says so: it proves the fields are well formed,
not that the figures are right. The location itself (that `folder`) is not a figure and is
not compared: a folder may be moved.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import JsonFileError, read_json
from anvil_metrics.post.docscan import verify_file
from anvil_metrics.post.schema import fmt, is_count, same
from anvil_metrics.post.significance import RESAMPLES
from anvil_metrics.summary.decide import DELTAS, ROW_METRICS
from anvil_metrics.summary.folder import (
    CAMPAIGN_FILE,
    SCHEMA,
    read_campaign_folder,
    summary_document,
)
from anvil_metrics.summaryfigures import SUMMARY_FIGURES

# A summary is a few kilobytes; a file bigger than this is not parsed whole to find out
# whether it is one (a benchmark of a million rows is ~540 MB: `docscan` reads it in blocks).
SMALL_BYTES = 16 << 20

# --- the shape of a summary: the spec example's members and anvil's row fields -------------
# top-level members every summary has (the example's and anvil's alike)
SHAPE_REQUIRED = ("schema", "date", "decision", "performance_protocol", "performance",
                  "sampled_speculative_telemetry", "retained_failures")
DECISIONS = ("promotion", "no-promotion", None)
# a performance row: its labels (strings), its figures (numbers or null, the added ones
# absent from the spec's example), its delta figures (only in rows with speculation on)
ROW_LABELS = ("model", "speculation")
ROW_FIGURES = tuple(field for field, _ in ROW_METRICS)
ROW_DELTAS = tuple(name for name, _ in DELTAS)
ROW_ADDED = (*(f.name for f in SUMMARY_FIGURES if f.added), "runs", "null_reasons",
             *(f"{d.removesuffix('_percent')}_{x}" for d in ROW_DELTAS
               for x in ("ci95_percent", "mann_whitney_p", "verdict")))
PROTOCOL_COUNTS = ("requests_per_run", "runs_per_model", "concurrency",
                   "configured_input_tokens", "max_output_tokens")
TELEMETRY_RANGES = ("accepted_length_range", "acceptance_rate_range")


@dataclass(frozen=True, slots=True)
class SummaryCheck:
    """What verify found: `problems` ([] when none); `folder`, the campaign folder the
    figures were recomputed from (None: shape only, `why_shape_only` says why); `runs`, how
    many runs they were recomputed from."""

    problems: list[str]
    folder: Path | None
    runs: int
    why_shape_only: str | None = None


def read_small_json(path: Path) -> Any:
    """The JSON document in `path` when it is small enough to be a summary and parses; else
    None (the caller's benchmark road then reads it, and names any fault of the file)."""
    try:
        if path.stat().st_size > SMALL_BYTES:
            return None
        return read_json(path, "a summary.json")
    except (OSError, JsonFileError):
        return None


def is_summary(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("schema") == SCHEMA


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def shape_problems(doc: dict[str, Any]) -> list[str]:
    """The shape rules above, one message per breach (no figure is recomputed here)."""
    out: list[str] = []
    for key in SHAPE_REQUIRED:
        if key not in doc:
            out.append(f"{key}: missing")
    if doc.get("decision") not in DECISIONS:
        out.append(f"decision: file has {fmt(doc.get('decision'))}, expected "
                   '"promotion", "no-promotion" or null')
    proto = doc.get("performance_protocol")
    if "performance_protocol" in doc and not isinstance(proto, dict):
        out.append(f"performance_protocol: expected an object, file has {fmt(proto)}")
    elif isinstance(proto, dict):
        for key in PROTOCOL_COUNTS:
            if key in proto and proto[key] is not None and not is_count(proto[key]):
                out.append(f"performance_protocol.{key}: expected a non-negative integer or "
                           f"null, file has {fmt(proto[key])}")
    rows = doc.get("performance")
    if "performance" in doc and not isinstance(rows, list):
        out.append(f"performance: expected a list, file has {fmt(rows)}")
    for i, row in enumerate(rows if isinstance(rows, list) else []):
        if not isinstance(row, dict):
            out.append(f"performance[{i}]: expected an object, file has {fmt(row)}")
            continue
        for key in ROW_LABELS:
            if not isinstance(row.get(key), str):
                out.append(f"performance[{i}].{key}: expected a string, file has "
                           f"{fmt(row.get(key))}")
        for key in (*ROW_FIGURES, *ROW_DELTAS):
            if key in row and row[key] is not None and not _number(row[key]):
                out.append(f"performance[{i}].{key}: expected a number or null, file has "
                           f"{fmt(row[key])}")
    failures = doc.get("retained_failures")
    if "retained_failures" in doc and not (isinstance(failures, list)
                                           and all(isinstance(x, str) for x in failures)):
        out.append("retained_failures: expected a list of sentences (strings)")
    return out


def campaign_folder(doc: dict[str, Any], path: Path) -> tuple[Path | None, str]:
    """(the folder holding the summary's runs, or None; the words for where it was looked)."""
    here = path.resolve().parent
    if (here / CAMPAIGN_FILE).is_file():
        return here, ""
    block = doc.get("campaign")
    recorded = block.get("folder") if isinstance(block, dict) else None
    if isinstance(recorded, str) and (Path(recorded) / CAMPAIGN_FILE).is_file():
        return Path(recorded), ""
    where = f"{here}" + (f" nor in {recorded}" if isinstance(recorded, str) else "")
    return None, f"no {CAMPAIGN_FILE} beside it in {where}, so no run to recompute from"


def differences(have: Any, want: Any, path: str = "") -> list[str]:
    """Every place `have` (the file) and `want` (recomputed) are not `same`, by path."""
    if isinstance(have, dict) and isinstance(want, dict):
        out = []
        for key in [*want, *(k for k in have if k not in want)]:
            p = f"{path}.{key}" if path else str(key)
            if key not in have:
                out.append(f"{p}: missing (recomputed {fmt(want[key])})")
            elif key not in want:
                out.append(f"{p}: file has {fmt(have[key])}, but the recomputed summary has "
                           "no such field")
            else:
                out.extend(differences(have[key], want[key], p))
        return out
    if isinstance(have, list) and isinstance(want, list):
        out = [m for i, (a, b) in enumerate(zip(have, want, strict=False))
               for m in differences(a, b, f"{path}[{i}]")]
        if len(have) != len(want):
            out.append(f"{path}: file has {len(have)} entries, recomputed {len(want)}")
        return out
    return [] if same(have, want) else [f"{path}: file has {fmt(have)}, recomputed {fmt(want)}"]


def _bootstrap(doc: dict[str, Any]) -> tuple[int, int]:
    """The seed and resample count the file records (the defaults where it does not say:
    a wrong value then shows as a difference in `statistics`)."""
    stats = doc.get("statistics")
    boot = stats.get("bootstrap") if isinstance(stats, dict) else None
    boot = boot if isinstance(boot, dict) else {}
    seed = boot.get("seed") if is_count(boot.get("seed")) else 0
    resamples = boot.get("resamples")
    return seed, resamples if is_count(resamples) and resamples > 0 else RESAMPLES


# `not_included` reasons added after summaries were written without them: absent in an
# older file, never a difference (a summary must verify as it was written)
ADDED_NOT_INCLUDED = ("checks_under_load",)
# row fields added after summaries were first written: absent from an older row, no difference
ADDED_ROW_FIELDS = tuple(f"{name.removesuffix('_percent')}_verdict" for name in ROW_DELTAS)


def as_filed(have: dict[str, Any], want: dict[str, Any]) -> None:
    """Drop from `want` (recomputed now) the `not_included` reasons added after `have`
    was written and absent from it (`ADDED_NOT_INCLUDED`), and the row fields added since
    (`ADDED_ROW_FIELDS`) from each row of `want` whose filed row lacks them."""
    have_rows, want_rows = have.get("performance"), want.get("performance")
    if isinstance(have_rows, list) and isinstance(want_rows, list):
        for old, new in zip(have_rows, want_rows, strict=False):
            if isinstance(old, dict) and isinstance(new, dict):
                for key in ADDED_ROW_FIELDS:
                    if key not in old:
                        new.pop(key, None)
    filed, now = have.get("not_included"), want.get("not_included")
    if isinstance(filed, dict) and isinstance(now, dict):
        for key in ADDED_NOT_INCLUDED:
            if key not in filed:
                now.pop(key, None)


def verify_summary(doc: dict[str, Any], path: Path,
                   verify: Callable[[Path], list[str]] = verify_file) -> SummaryCheck:
    """Recompute `doc` (read from `path`) from its campaign folder and compare (module doc);
    shape only when there is no folder. `verify` judges each run's benchmark.json."""
    folder, why = campaign_folder(doc, path)
    if folder is None:
        return SummaryCheck(shape_problems(doc), None, 0, why)
    seed, resamples = _bootstrap(doc)
    try:
        want = summary_document(read_campaign_folder(folder, verify=verify), seed=seed,
                                resamples=resamples)
    except UsageError as e:
        said = str(e).removeprefix("summarize: ")
        return SummaryCheck([*shape_problems(doc), "campaign: its figures cannot be "
                             f"recomputed from {folder}: {said}"], folder, 0)
    have_block, want_block = doc.get("campaign"), want.get("campaign")
    if isinstance(have_block, dict) and isinstance(want_block, dict):  # a location
        if "folder" in have_block:
            want_block["folder"] = have_block["folder"]
        else:
            want_block.pop("folder", None)
    as_filed(doc, want)
    runs = want["campaign"]["summarized_runs"]
    # the recomputed document is well formed by construction: a breach of shape in the file
    # is a difference from it, said once
    return SummaryCheck(differences(doc, want), folder, runs)
