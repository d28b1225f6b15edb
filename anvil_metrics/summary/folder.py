"""`anvil summarize`: a campaign folder read, summarized and written as
`anvil-serving.public-benchmark-summary/v1` (JSON) and `summary.md`.

Why its own module: `decide.py` is pure computation over loaded documents; this module is
the part that touches files. It reads the folder `anvil campaign run` writes (the contract:
`campaign.json` — the resolved plan and each run's state — and one run folder per run),
keeps only the runs that finished and whose `benchmark.json` verifies (a figure must come
from a file `anvil verify` accepts), says in words every run it left out and why (nothing is
silently dropped: `retained_failures`), re-parses the campaign file recorded in
`campaign.json` (its gates, roles, placements and facts; the text, not the file on disk,
which may have changed since), and assembles the document in the spec example's field order.

The `restoration` block comes from the check `anvil campaign run` records in campaign.json
after the last run (`restoration.py`); each managed retry it needed is said in
`retained_failures`. The `functional` and `multimodal` blocks come from each variant's
checks file (`campaign/checkplan.py`, built by `functional.py`). What is not measured — a
campaign without [checks], a restoration without aliases or not checked yet — is left out
of the document, not filled with guesses, and `not_included` says why.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.campaign.checkplan import checks_file, read_checks
from anvil_metrics.campaign.spec import Campaign, CampaignError, campaign_from_dict
from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import atomic_write_bytes, dumps_strict, read_json
from anvil_metrics.post.docscan import scan_benchmark, verify_file
from anvil_metrics.post.significance import RESAMPLES
from anvil_metrics.summary.decide import VariantRuns, summarize
from anvil_metrics.summary.functional import (
    VariantChecks,
    check_words,
    functional_block,
    gate_results,
    multimodal_block,
)
from anvil_metrics.summary.gates import checks_under_load

SCHEMA = "anvil-serving.public-benchmark-summary/v1"
CAMPAIGN_SCHEMA = "anvil-campaign/v1"
CAMPAIGN_FILE = "campaign.json"
BENCHMARK_FILE = "benchmark.json"
STATES = ("pending", "done", "failed")
# the document's own members: a [facts] table may not use these names
COMPUTED_KEYS = ("schema", "date", "decision", "performance_protocol", "performance",
                 "sampled_speculative_telemetry", "checks_under_load", "functional",
                 "multimodal",
                 "retained_failures", "restoration", "gates", "decision_reasons",
                 "statistics", "not_included", "campaign")
NO_CHECKS = ("not measured: the campaign has no [checks] table (add one: suites = [...]; "
             "'anvil campaign run' then runs them once per variant after the last run)")
NO_RESULTS = {
    "functional": "not measured: no functional suite result in the campaign's checks files",
    "multimodal": "not measured: no multimodal suite result in the campaign's checks files",
}
NO_UNDER_LOAD = ("not measured: no run has a check class (a [[request_class]] with check = "
                 '"json", ...: answers judged under load)')
NO_ALIASES = ("not measured: the campaign names no [restoration] aliases to check after "
              "the last run")
NOT_CHECKED = ("not measured: campaign.json holds no restoration check (it is made at the end "
               "of 'anvil campaign run'; run it again to finish the campaign and check)")
BAD_CHECK = "not measured: campaign.json's restoration record is not as anvil writes it"
_TAIL_CHARS = 200


@dataclass(frozen=True, slots=True)
class CampaignFolder:
    """A campaign folder as read: the campaign re-checked from the text it ran with, each
    variant's usable runs (in run-index order), and, in words, every run left out or met
    with trouble (missing, failed, not verifying, before_run failures, redone runs)."""

    folder: Path
    campaign: Campaign
    variants: tuple[VariantRuns, ...]
    run_indices: Mapping[str, tuple[int, ...]]  # variant id -> the run indices kept
    failures: tuple[str, ...]
    planned_runs: int
    restoration: dict[str, Any] | None = None  # campaign.json's check, None when absent
    checks: tuple[VariantChecks, ...] = ()  # each variant's checks document (or None)


# what a campaign folder's campaign.json is, for read_json's messages
CAMPAIGN_RECORD = "the campaign.json of a folder 'anvil campaign run' made"


def _fail(folder: Path, what: str) -> UsageError:
    return UsageError(f"summarize: {folder / CAMPAIGN_FILE}: {what}")


def _load_record(folder: Path) -> dict[str, Any]:
    path = folder / CAMPAIGN_FILE
    if not folder.is_dir():
        raise UsageError(f"summarize: {str(folder)!r} is not a folder; pass the folder "
                         "'anvil campaign run' made (it holds campaign.json)")
    if not path.exists():
        raise UsageError(f"summarize: {str(folder)!r} holds no campaign.json; pass the "
                         "folder 'anvil campaign run' made")
    record = read_json(path, CAMPAIGN_RECORD, command="summarize")
    if not isinstance(record, dict) or record.get("schema") != CAMPAIGN_SCHEMA:
        got = record.get("schema") if isinstance(record, dict) else type(record).__name__
        raise _fail(folder, f"schema {got!r} is not allowed; expected {CAMPAIGN_SCHEMA!r}")
    for key in ("campaign_file", "campaign_toml"):
        if not isinstance(record.get(key), str):
            raise _fail(folder, f"{key} is missing or not a string")
    if not isinstance(record.get("runs"), list):
        raise _fail(folder, "runs is missing or not a list")
    if not isinstance(record.get("redone", []), list):
        raise _fail(folder, "redone is not a list")
    return record


def _campaign(folder: Path, record: dict[str, Any]) -> Campaign:
    source = record["campaign_file"]
    try:
        data = tomllib.loads(record["campaign_toml"])
    except tomllib.TOMLDecodeError as e:
        raise _fail(folder, f"campaign_toml is not valid TOML ({e})") from None
    try:
        return campaign_from_dict(data, source=source, base=Path(source).parent)
    except CampaignError as e:
        raise _fail(folder, f"the campaign it ran ({source}) no longer checks out there: "
                    + "; ".join(e.problems)) from None


def _run_entry(folder: Path, i: int, run: Any, ids: set[str]) -> None:
    """Refuse an entry of `runs` that is not as the contract says (one line)."""
    where = f"runs[{i}]"
    if not isinstance(run, dict):
        raise _fail(folder, f"{where} is not an object")
    if run.get("variant") not in ids:
        raise _fail(folder, f"{where}.variant {run.get('variant')!r} is not one of the "
                    f"campaign's variants: {', '.join(sorted(ids))}")
    if run.get("state") not in STATES:
        raise _fail(folder, f"{where}.state {run.get('state')!r} is not allowed; expected "
                    f"one of {', '.join(STATES)}")
    folder_name = run.get("folder")
    if (not isinstance(folder_name, str) or not folder_name or "/" in folder_name
            or folder_name in (".", "..")):
        raise _fail(folder, f"{where}.folder {folder_name!r} is not a run folder's name")
    for key in ("k", "run_index"):
        if isinstance(run.get(key), bool) or not isinstance(run.get(key), int):
            raise _fail(folder, f"{where}.{key} {run.get(key)!r} is not a whole number")


def _said(run: dict[str, Any]) -> str:
    return f"Run {run['k']} ({run['variant']}, run {run['run_index']}, folder {run['folder']})"


def _before_run_failure(run: dict[str, Any]) -> str | None:
    """A sentence for a before_run command that timed out or exited non-zero, else None."""
    b = run.get("before_run")
    if not isinstance(b, dict):
        return None
    status, timed_out = b.get("exit_status"), b.get("timed_out") is True
    if not timed_out and status == 0:
        return None
    secs = b.get("seconds")
    after = f" after {secs:.1f} s" if isinstance(secs, int | float) else ""
    what = (f"timed out{after}" if timed_out else
            f"exited with status {status}{after}" if isinstance(status, int) else
            f"left no exit status{after}")
    tail = b.get("output_tail")
    lines = [x.strip() for x in tail.splitlines() if x.strip()] if isinstance(tail, str) else []
    last = f"; its output ended: {lines[-1][:_TAIL_CHARS]!r}" if lines else ""
    return f"{_said(run)}: its before_run command {b.get('command')!r} {what}{last}."


def read_campaign_folder(folder: str | Path,
                         verify: Callable[[Path], list[str]] = verify_file) -> CampaignFolder:
    """Read a campaign folder (module doc). `verify` checks a benchmark.json ([] when it
    holds a correct document); a run whose file does not verify is left out, said in words.
    A variant left with no run is a usage error: it has no figures to summarize."""
    folder = Path(folder)
    record = _load_record(folder)
    campaign = _campaign(folder, record)
    ids = {v.id for v in campaign.variants}
    docs: dict[str, list[tuple[int, dict[str, Any]]]] = {v: [] for v in ids}
    failures: list[str] = []
    states: dict[str, list[str]] = {v: [] for v in ids}
    for i, run in enumerate(record["runs"]):
        _run_entry(folder, i, run, ids)
        states[run["variant"]].append(run["state"])
        said = _said(run)
        before = _before_run_failure(run)
        if before:
            failures.append(before)
        if run["state"] == "pending":
            failures.append(f"{said} was not run (still pending); left out of the figures.")
            continue
        if run["state"] == "failed":
            attempts = run.get("attempts")
            times = f" after {attempts} attempt(s)" if isinstance(attempts, int) else ""
            why = run.get("failure")
            failures.append(f"{said} failed{times}"
                            f"{f': {why}' if isinstance(why, str) and why else ''}; left out "
                            "of the figures.")
            continue
        path = folder / run["folder"] / BENCHMARK_FILE
        if not path.is_file():
            failures.append(f"{said} is marked done but has no {BENCHMARK_FILE}; left out of "
                            "the figures.")
            continue
        problems = verify(path)
        if problems:
            failures.append(f"{said}: its {BENCHMARK_FILE} does not verify ({len(problems)} "
                            f"problem(s), the first: {problems[0]}); left out of the figures.")
            continue
        docs[run["variant"]].append((run["run_index"], scan_benchmark(path).doc))
    for r in record.get("redone", []):
        if isinstance(r, dict):
            failures.append(f"Run folder {r.get('folder')} was redone: {r.get('reason')}.")
    empty = [v.id for v in campaign.variants if not docs[v.id]]
    if empty:
        shown = "; ".join(f"{v}: {', '.join(states[v]) or 'no runs listed'}" for v in empty)
        raise UsageError(f"summarize: no finished run whose {BENCHMARK_FILE} verifies for "
                         f"{', '.join(empty)} (states: {shown}); finish the campaign with "
                         "'anvil campaign run' first")
    variants, indices = [], {}
    for v in campaign.variants:
        kept = sorted(docs[v.id], key=lambda pair: pair[0])
        variants.append(VariantRuns(v.model, v.speculation, [d for _, d in kept]))
        indices[v.id] = tuple(i for i, _ in kept)
    check = record.get("restoration")
    checks: list[VariantChecks] = []
    if campaign.checks is not None:
        said = record.get("checks") if isinstance(record.get("checks"), dict) else {}
        for v in campaign.variants:
            doc = read_checks(checks_file(folder, v.model, v.speculation))
            checks.append(VariantChecks(v.model, v.speculation, doc))
            if doc is None:
                entry = said.get(v.id) if isinstance(said.get(v.id), dict) else {}
                why = entry.get("failure") or "no checks file (the campaign did not reach them)"
                failures.append(f"Checks of {v.id} were not made: {why}.")
    return CampaignFolder(folder, campaign, tuple(variants), indices, tuple(failures),
                          len(record["runs"]), check if isinstance(check, dict) else None,
                          tuple(checks))


def _restoration(cf: CampaignFolder) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """(the summary's restoration block, its retries and failures in words, why it is left
    out). `all_tiers_admitting`: every alias listed and answered its one-token completion."""
    aliases = cf.campaign.restoration_aliases
    if not aliases:
        return None, [], NO_ALIASES
    check = cf.restoration
    if check is None:
        return None, [], NOT_CHECKED
    rows = check.get("aliases")
    if (check.get("result") not in ("pass", "fail") or not isinstance(rows, list)
            or not all(isinstance(r, dict) and isinstance(r.get("alias"), str) for r in rows)
            or [r["alias"] for r in rows] != list(aliases)):
        return None, [], BAD_CHECK
    words = []
    for r in rows:
        first, req = r.get("retried_after"), r.get("retried_request") or "a request"
        if first is not None and r.get("result") == "pass":
            what = (f"answered {first} once" if isinstance(first, int)
                    else "had its connection reset once")
            words.append(f"Restoration: alias {r['alias']} {what} ({req}), then 200 after "
                         "a retry.")
        elif r.get("result") != "pass":
            words.append(f"Restoration: alias {r['alias']} did not answer after the last "
                         f"run: {r.get('reason')}.")
    block = {"result": check["result"], "router_aliases": list(aliases),
             "all_tiers_admitting": all(r.get("result") == "pass" for r in rows),
             "checked_at": check.get("checked_at"), "aliases": rows}
    return block, words, None


def _placements(cf: CampaignFolder) -> list[str] | None:
    """The placement labels of the runs summarized, when every variant kept the same run
    indices (else the words could not say one thing of all variants: None)."""
    labels = cf.campaign.placements
    sets = set(cf.run_indices.values())
    if not labels or len(sets) != 1:
        return None
    return [labels[i - 1] for i in next(iter(sets)) if 1 <= i <= len(labels)]


def _date(variants: tuple[VariantRuns, ...]) -> str | None:
    """The UTC day the last run finished (or started, if it does not say), as the example's
    `date`; None when no run carries a time."""
    days = [t[:10] for v in variants for r in v.runs
            for t in (r.get("finished_at") or r.get("started_at"),) if isinstance(t, str)]
    return max(days) if days else None


def summary_document(cf: CampaignFolder, *, seed: int = 0,
                     resamples: int = RESAMPLES) -> dict[str, Any]:
    """The summary document, in the spec example's field order, anvil's added blocks last.
    `seed` and `resamples` are the bootstrap's: `anvil verify` passes the ones a summary
    recorded (its `statistics.bootstrap`), to recompute its intervals bit for bit."""
    c = cf.campaign
    clash = sorted(set(c.facts) & set(COMPUTED_KEYS))
    if clash:
        raise UsageError(f"summarize: the campaign's [facts] table uses {', '.join(clash)}, "
                         "which the summary computes itself; rename those facts")
    s = summarize(cf.variants, gates=c.gates, candidate=c.candidate, incumbent=c.incumbent,
                  baseline=c.baseline, functional=gate_results(cf.checks, c.candidate),
                  placements=_placements(cf), seed=seed, resamples=resamples)
    computed = s.to_json()
    doc: dict[str, Any] = {"schema": SCHEMA, "date": _date(cf.variants),
                           "decision": s.decision}
    doc.update(c.facts)
    doc["performance_protocol"] = computed["performance_protocol"]
    doc["performance"] = computed["performance"]
    doc["sampled_speculative_telemetry"] = computed["sampled_speculative_telemetry"]
    under_load = checks_under_load(cf.variants)
    if under_load is not None:
        doc["checks_under_load"] = under_load
    blocks = {"functional": functional_block(cf.checks),
              "multimodal": multimodal_block(cf.checks)}
    doc.update({k: v for k, v in blocks.items() if v is not None})
    restoration, restoration_words, left_out = _restoration(cf)
    doc["retained_failures"] = [*computed["retained_failures"], *cf.failures,
                                *check_words(cf.checks), *restoration_words]
    if restoration is not None:
        doc["restoration"] = restoration
    doc["gates"] = computed["gates"]
    doc["decision_reasons"] = computed["decision_reasons"]
    doc["statistics"] = computed["statistics"]
    doc["not_included"] = {k: NO_CHECKS if c.checks is None else NO_RESULTS[k]
                           for k, v in blocks.items() if v is None}
    if under_load is None:
        doc["not_included"]["checks_under_load"] = NO_UNDER_LOAD
    if left_out is not None:
        doc["not_included"]["restoration"] = left_out
    kept = sum(len(v.runs) for v in cf.variants)
    doc["campaign"] = {"name": c.name, "campaign_file": c.source,
                       "scenario_file": c.scenario_path, "candidate": c.candidate,
                       "incumbent": c.incumbent, "baseline": c.baseline,
                       "planned_runs": cf.planned_runs, "summarized_runs": kept,
                       # where to recompute it from (`anvil verify`): a location, not a figure
                       "folder": str(cf.folder.resolve())}
    return doc


def output_paths(folder: str | Path, output: str | None) -> tuple[Path, Path]:
    """(summary.json, summary.md): `-o PATH` (ending in .json) or the campaign folder's;
    the report lies beside the JSON with the same stem."""
    if output is None:  # the folder itself is checked when it is read
        return Path(folder) / "summary.json", Path(folder) / "summary.md"
    path = Path(output)
    if path.suffix != ".json":
        raise UsageError(f"summarize -o {output!r}: expected a path ending in .json, e.g. "
                         "summary.json (summary.md is written beside it)")
    if not path.parent.is_dir():
        raise UsageError(f"summarize -o {output!r}: the folder {str(path.parent)!r} does not "
                         "exist; pass a path in an existing folder")
    return path, path.with_suffix(".md")


def write_summary(doc: dict[str, Any], markdown: str, json_path: Path, md_path: Path) -> None:
    """Both files, atomically; the JSON in the document's own field order (not sorted)."""
    atomic_write_bytes(json_path, (dumps_strict(doc, option=orjson.OPT_INDENT_2) + b"\n",))
    atomic_write_bytes(md_path, (markdown.encode("utf-8"),))
