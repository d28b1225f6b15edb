"""`anvil campaign run`: every run of a campaign's plan, resumable, its state in campaign.json.

Why its own module: a campaign is hours of GPU time, so it must survive being stopped at
any moment. Its state lives in `<results_dir>/<name>/campaign.json`, rewritten atomically
after every change, and a rerun of the same command does only what is missing. What counts
is the files, not the state: a run is done only when its folder's `benchmark.json`
verifies (`docscan.verify_file`), so a run killed after its document was written is not
redone, and a folder an interrupted run left is moved aside into `.redone/` (nothing
lost), recorded in `redone`, and the run is done again.

The run itself and the before_run command come in as functions (`Runner`, `Hook`), so the
state logic is tested without processes; the real ones run Locust exactly as `anvil run`
does (`run.run_scenario`, into the run folder made here) and `bash -c` in a process group
of its own, killed whole on timeout or Ctrl-C. Nothing here prints: progress goes to a
callback, one line per event.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anvil_metrics.campaign.checkplan import (
    Checker,
    checks_file,
    read_checks,
    real_checker,
    summary_line,
)
from anvil_metrics.campaign.plan import CampaignRun, plan
from anvil_metrics.campaign.restoration import RestorationResult, check_aliases
from anvil_metrics.campaign.spec import Campaign, Variant
from anvil_metrics.checks.runner import write_checks
from anvil_metrics.errors import AnvilError, ExitCode, UsageError
from anvil_metrics.jsonio import atomic_write_json, read_json
from anvil_metrics.post.docscan import scan_benchmark, verify_file
from anvil_metrics.post.outcome import failure_verdict
from anvil_metrics.post.postprocess import BENCHMARK_FILE

if TYPE_CHECKING:
    from anvil_metrics.runs.display import Display

SCHEMA = "anvil-campaign/v1"
STATE_FILE = "campaign.json"
REDONE_DIR = ".redone"  # folders of interrupted runs, moved aside, never deleted
OUTPUT_TAIL_BYTES = 4096
DEFAULT_BEFORE_RUN_TIMEOUT_S = 600.0
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s\"'@]+@")


@dataclass(frozen=True, slots=True)
class HookResult:
    """What a before_run command did. `exit_status` is None when it was killed on timeout."""

    exit_status: int | None
    timed_out: bool
    output_tail: str  # the last OUTPUT_TAIL_BYTES of stdout and stderr together
    seconds: float


# (command, extra environment, timeout in s) -> what it did
Hook = Callable[[str, Mapping[str, str], float], HookResult]
# (the run, its variant, its folder, already created) -> None, or why it failed (one line)
Runner = Callable[[CampaignRun, Variant, Path], str | None]
Progress = Callable[[str], None]
# (the campaign, the environment) -> its restoration aliases checked (`restoration.py`)
Restorer = Callable[[Campaign, Mapping[str, str]], RestorationResult]


@dataclass(frozen=True, slots=True)
class CampaignOutcome:
    folder: Path
    done: int
    failed: tuple[tuple[str, str], ...]  # (run folder, why), in plan order
    ran: int  # runs attempted by this invocation
    restoration: str | None = None  # "pass" | "fail" of the check after the last run
    checks_failed: tuple[tuple[str, str], ...] = ()  # (variant, why) checks that did not run

    @property
    def exit_code(self) -> int:
        ok = not self.failed and not self.checks_failed and self.restoration != "fail"
        return 0 if ok else 1


def without_credentials(text: str) -> str:
    """`text` with the user:password@ of every URL in it removed (campaign.json keeps the
    campaign file's text, never a credential in it)."""
    return _USERINFO.sub(r"\1", text)


def missing_api_keys(campaign: Campaign, environ: Mapping[str, str]) -> list[str]:
    """One line per variant whose api_key_env names an unset (or empty) variable."""
    return [f"variants[{i}].api_key_env: ${v.api_key_env} is not set; export it (the API key "
            f"of {v.id}) or remove api_key_env"
            for i, v in enumerate(campaign.variants, 1)
            if v.api_key_env and not environ.get(v.api_key_env)]


def run_hook(command: str, env: Mapping[str, str], timeout_s: float) -> HookResult:
    """`bash -c command` in its own process group, output to a file (never an unread pipe);
    the whole group is killed on timeout or interruption."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(["bash", "-c", command], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**os.environ, **env},
                                start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if proc.poll() is None:
                _kill_group(proc)
        seconds = time.monotonic() - start
        out.seek(max(0, out.seek(0, os.SEEK_END) - OUTPUT_TAIL_BYTES))
        tail = out.read().decode("utf-8", errors="replace")
    return HookResult(None if timed_out else proc.returncode, timed_out, tail, seconds)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(5)


def api_key(v: Variant, environ: Mapping[str, str]) -> str | None:
    """A variant's API key: the variable its api_key_env names, else the password in its
    host's URL (as `anvil run` takes it)."""
    return (environ.get(v.api_key_env) if v.api_key_env else None) or v.endpoint.userinfo_key


def locust_runner(campaign: Campaign, environ: Mapping[str, str],
                  display: Callable[[str], Display | None] | None = None) -> Runner:
    """The real runs: Locust as `anvil run` starts it (`run.run_scenario`), into the run
    folder made here, with the variant's host, served model and API key; each run's
    progress drawn on `display(title)`, titled `run k of n: <variant>`."""
    from anvil_metrics.load.options import LOCUST_OPTIONS, run_options
    from anvil_metrics.runs.launch import run_scenario

    n = len(plan(campaign))

    def run(r: CampaignRun, v: Variant, run_dir: Path) -> str | None:
        values: dict[str, Any] = {o.dest: o.default for o in LOCUST_OPTIONS if not o.secret}
        values.update(scenario=campaign.scenario_path, model=v.served_model)
        if v.gpus is not None:  # as --gpus and --gpu-hour-price: over the scenario's meta
            values.update(gpus=str(v.gpus), gpu_hour_price=None if v.gpu_hour_price is None
                          else str(v.gpu_hour_price))
        if v.energy_urls is not None:  # as --energy-url: its own node's exporters
            values.update(energy_url=list(v.energy_urls))
        if campaign.reset_prefix_cache is not None:  # as --reset-prefix-cache
            values.update(reset_prefix_cache=campaign.reset_prefix_cache)
        key = api_key(v, environ)  # never on a command line
        host = v.endpoint.base_url
        opts = run_options(values, host=host, users=None, api_key=key)
        result = run_scenario(opts.scenario, campaign.scenario_path, host, users=opts.users,
                              run_dir=run_dir, values=values, api_key=key,
                              display=display and display(f"run {r.k} of {n}: {v.id}"))
        if result.error:
            return result.error
        if result.benchmark_path is None:
            return (f"no {BENCHMARK_FILE} (Locust exit code {result.locust_exit_code}); "
                    f"its log is {result.log_path}")
        if result.locust_exit_code == ExitCode.FAILED:  # every measured request failed
            return failure_verdict(scan_benchmark(result.benchmark_path).doc) or (
                "every measured request failed")
        return None

    return run


def check_restoration(campaign: Campaign, environ: Mapping[str, str]) -> RestorationResult:
    """The aliases of [restoration], asked at its host (else the candidate's). The key: a
    password in that host's URL, else the candidate's (its api_key_env, its URL's)."""
    endpoint = campaign.restoration_endpoint
    cand = campaign.variant(campaign.candidate)
    key = endpoint.userinfo_key or api_key(cand, environ)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return check_aliases(endpoint.base_url, campaign.restoration_aliases, headers=headers)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_state(campaign: Campaign, campaign_text: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "name": campaign.name,
        "campaign_file": str(Path(campaign.source).resolve()),
        "campaign_toml": without_credentials(campaign_text),
        "scenario_file": str(Path(campaign.scenario_path).resolve()),
        "runs": [{"k": r.k, "variant": r.variant_id, "run_index": r.run_index,
                  "placement": r.placement, "folder": r.folder, "state": "pending",
                  "attempts": 0, "started_at": None, "finished_at": None,
                  "before_run": None, "failure": None} for r in plan(campaign)],
        "redone": [],
    }


def load_state(path: Path, campaign: Campaign, campaign_text: str) -> dict[str, Any]:
    """The state of an earlier invocation, checked to belong to this very campaign file."""
    state = read_json(path, "the campaign state of an earlier run of this campaign; move it "
                            "away to start the campaign again")
    fresh = new_state(campaign, campaign_text)
    if not isinstance(state, dict) or state.get("schema") != SCHEMA:
        raise UsageError(f"{path}: not an {SCHEMA} file; pass another --results-dir or move "
                         "that folder away")
    if state.get("campaign_toml") != fresh["campaign_toml"]:
        raise UsageError(f"{campaign.source}: its text differs from the one {path} was made "
                         "with; a changed campaign cannot resume; rename the campaign or pass "
                         "another --results-dir")
    runs = state.get("runs")
    if (not isinstance(runs, list) or [r.get("folder") for r in runs if isinstance(r, dict)]
            != [r["folder"] for r in fresh["runs"]]):
        raise UsageError(f"{path}: its runs do not match the plan of {campaign.source}; move "
                         "that folder away to start again")
    if not isinstance(state.get("redone"), list):
        state["redone"] = []
    return state


def _benchmark_problem(run_dir: Path) -> str | None:
    """None when the run folder holds a benchmark.json that verifies, else why not."""
    path = run_dir / BENCHMARK_FILE
    if not path.is_file():
        return f"no {BENCHMARK_FILE}"
    try:
        problems = verify_file(path)
    except Exception as e:  # noqa: BLE001 - an unreadable file is a run to redo, not a crash
        return f"{BENCHMARK_FILE} cannot be read: {e}"
    if problems:
        return f"{BENCHMARK_FILE} does not verify ({len(problems)} problems: {problems[0]})"
    return None


def _move_aside(folder: Path, run_folder: str) -> Path:
    aside = folder / REDONE_DIR
    aside.mkdir(exist_ok=True)
    n = 1
    while (aside / f"{run_folder}.{n}").exists():
        n += 1
    target = aside / f"{run_folder}.{n}"
    (folder / run_folder).rename(target)
    return target


def _hook_failure(h: HookResult) -> str:
    last = next((ln.strip() for ln in reversed(h.output_tail.splitlines()) if ln.strip()), "")
    what = (f"timed out after {h.seconds:.1f} s" if h.timed_out
            else f"exited {h.exit_status} after {h.seconds:.1f} s")
    return f"before_run {what}" + (f": {last[:200]}" if last else " (no output)")


def _scrub(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, "***")
    return text


def _eta(durations: list[float], remaining: int) -> str:
    if not durations:
        return "ETA unknown until a run is done"
    s = sum(durations) / len(durations) * remaining
    return f"ETA {int(s // 3600)}:{int(s % 3600 // 60):02d}:{int(s % 60):02d}"


def _campaign_folder(campaign: Campaign, results_dir: str | Path) -> Path:
    """`<results_dir>/<name>`, made if need be (a bad --results-dir: one UsageError)."""
    folder = Path(results_dir) / campaign.name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--results-dir {str(results_dir)!r} cannot hold the campaign's "
                         f"folder: {e.strerror}; pass a writable directory") from None
    return folder


def _settle(state: dict[str, Any], runs: list[CampaignRun], folder: Path) -> list[CampaignRun]:
    """The runs still to do, by what their folders hold: a run whose benchmark.json
    verifies is done; the folder of any other is moved aside (recorded in "redone")."""
    entries = {e["folder"]: e for e in state["runs"]}
    todo: list[CampaignRun] = []
    for r in runs:
        e = entries[r.folder]
        run_dir = folder / r.folder
        problem = _benchmark_problem(run_dir) if run_dir.exists() else "no run folder"
        if problem is None:
            e["state"], e["failure"] = "done", None
            continue
        if run_dir.exists():
            why = ("interrupted" if e["state"] == "pending" else
                   "failed" if e["state"] == "failed" else "was done")
            aside = _move_aside(folder, r.folder)
            state["redone"].append({"folder": r.folder,
                                    "reason": f"{why}: {problem}; moved to "
                                              f"{aside.relative_to(folder)}"})
        e["state"] = "pending"
        todo.append(r)
    return todo


@dataclass(frozen=True, slots=True)
class _Invocation:
    """What the steps of one `anvil campaign run` share: the campaign, its folder and state
    (campaign.json, saved after every change), the environment, the secrets no recorded
    line may hold, and the functions it calls out to."""

    campaign: Campaign
    folder: Path
    state: dict[str, Any]
    environ: Mapping[str, str]
    secrets: list[str]
    hook: Hook
    progress: Progress
    before_run_timeout_s: float

    def save(self) -> None:
        atomic_write_json(self.folder / STATE_FILE, self.state)


def _before_run(inv: _Invocation, r: CampaignRun, command: str
                ) -> tuple[dict[str, Any], str | None]:
    """The variant's before_run for run `r`: what campaign.json records of it, and why the
    run fails (None: it does not)."""
    env = {"ANVIL_VARIANT": r.variant_id, "ANVIL_RUN_INDEX": str(r.run_index)}
    if r.placement is not None:
        env["ANVIL_PLACEMENT"] = r.placement
    h = inv.hook(command, env, inv.before_run_timeout_s)
    record = {"command": command, "exit_status": h.exit_status, "timed_out": h.timed_out,
              "output_tail": _scrub(h.output_tail, inv.secrets),
              "seconds": round(h.seconds, 3)}
    failed = h.timed_out or h.exit_status != 0
    return record, _scrub(_hook_failure(h), inv.secrets) if failed else None


def _do_run(inv: _Invocation, r: CampaignRun, e: dict[str, Any], runner: Runner
            ) -> str | None:
    """Run `r` (`e`: its entry in campaign.json): its variant's before_run, then the run
    into a new folder; None when its benchmark.json verifies, else why not."""
    v = inv.campaign.variant(r.variant_id)
    e.update(state="pending", attempts=e["attempts"] + 1, started_at=_now(),
             finished_at=None, before_run=None, failure=None)
    inv.save()
    failure = None
    if v.before_run:
        e["before_run"], failure = _before_run(inv, r, v.before_run)
        inv.save()
    if failure is None:
        run_dir = inv.folder / r.folder
        run_dir.mkdir()
        failure = runner(r, v, run_dir) or _benchmark_problem(run_dir)
    e.update(state="failed" if failure else "done", finished_at=_now(),
             failure=_scrub(failure.splitlines()[0], inv.secrets) if failure else None)
    inv.save()
    return failure


def run_campaign(campaign: Campaign, results_dir: str | Path, *, runner: Runner,
                 hook: Hook = run_hook, progress: Progress = lambda line: None,
                 before_run_timeout_s: float = DEFAULT_BEFORE_RUN_TIMEOUT_S,
                 environ: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 restore: Restorer = check_restoration,
                 checker: Checker = real_checker) -> CampaignOutcome:
    """Do every run of the plan not done yet, in plan order; a failed run (its before_run
    or the run itself) is recorded and the campaign goes on with the next. Then, when the
    campaign names restoration aliases, check them (`restore`) and record the result under
    "restoration": after the last run of the plan, in every invocation that reaches the
    end, so a rerun of a finished campaign checks again. Before that, the [checks] suites
    run once per variant (`checker`, after the variant's before_run) whose checks file is
    not there yet (`checkplan.py`); campaign.json records each under "checks"."""
    environ = os.environ if environ is None else environ
    problems = missing_api_keys(campaign, environ)
    if problems:
        raise UsageError("\n".join(f"{campaign.source}: {p}" for p in problems))
    text = Path(campaign.source).read_text(encoding="utf-8")
    folder = _campaign_folder(campaign, results_dir)
    state_path = folder / STATE_FILE
    state = (load_state(state_path, campaign, text) if state_path.exists()
             else new_state(campaign, text))
    secrets = [s for v in campaign.variants for s in (
        environ.get(v.api_key_env) if v.api_key_env else None, v.endpoint.userinfo_key) if s]
    inv = _Invocation(campaign, folder, state, environ, secrets, hook, progress,
                      before_run_timeout_s)
    runs = plan(campaign)
    todo = _settle(state, runs, folder)  # what the files say, before running anything
    if todo:  # an earlier check no longer comes after the last run
        state.pop("restoration", None)
    inv.save()

    n = len(runs)
    entries = {e["folder"]: e for e in state["runs"]}
    durations: list[float] = []
    for i, r in enumerate(todo):
        progress(f"run {r.k} of {n}: {r.variant_id} (placement {r.placement or '-'}), "
                 f"{_eta(durations, len(todo) - i)}")
        start = clock()
        failure = _do_run(inv, r, entries[r.folder], runner)
        if failure is None:
            durations.append(clock() - start)
        progress(f"run {r.k} of {n}: {r.variant_id} " + (
            f"done in {clock() - start:.1f} s -> {folder / r.folder}" if not failure
            else f"FAILED: {entries[r.folder]['failure']}"))
    failed = tuple((e["folder"], e["failure"] or "") for e in state["runs"]
                   if e["state"] != "done")
    checks_failed: tuple[tuple[str, str], ...] = ()
    if campaign.checks is not None:
        records = state.setdefault("checks", {})
        for v in campaign.variants:
            records[v.id] = _variant_checks(inv, v, checker)
            inv.save()
        checks_failed = tuple((vid, r["failure"]) for vid, r in records.items()
                              if r["state"] != "done")
    restoration = None
    if campaign.restoration_aliases:
        restoration = state["restoration"] = _restoration(inv, restore)
        inv.save()
    return CampaignOutcome(folder, n - len(failed), failed, len(todo),
                           restoration["result"] if restoration else None, checks_failed)


def _variant_checks(inv: _Invocation, v: Variant, checker: Checker) -> dict[str, Any]:
    """One variant's checks, as campaign.json records them: a file already there is kept;
    else its before_run (ANVIL_CHECKS=1), then the suites, the document written atomically."""
    plan_ = inv.campaign.checks
    assert plan_ is not None
    path = checks_file(inv.folder, v.model, v.speculation)
    record: dict[str, Any] = {"file": str(path.relative_to(inv.folder)), "state": "done",
                              "failure": None}
    if read_checks(path) is not None:
        return {**record, "kept": True}
    if v.before_run:
        h = inv.hook(v.before_run, {"ANVIL_VARIANT": v.id, "ANVIL_CHECKS": "1"},
                     inv.before_run_timeout_s)
        if h.timed_out or h.exit_status != 0:
            why = _scrub(_hook_failure(h), inv.secrets).splitlines()[0]
            inv.progress(f"checks: {v.id} FAILED: {why}")
            return {**record, "state": "failed", "failure": why}
    inv.progress(f"checks: {v.id}: {', '.join(plan_.suites)} at {v.endpoint.base_url}")
    options = replace(plan_.options, speculation=v.speculation)
    try:
        doc = checker(v.endpoint.base_url, v.served_model, api_key(v, inv.environ),
                      plan_.suites, options)
    except AnvilError as e:
        why = _scrub(str(e), inv.secrets).splitlines()[0]
        inv.progress(f"checks: {v.id} FAILED: {why}")
        return {**record, "state": "failed", "failure": why}
    path.parent.mkdir(exist_ok=True)
    write_checks(path, doc)
    inv.progress(f"checks: {v.id}: {summary_line(doc)} -> {path}")
    return {**record, "finished_at": _now()}


def _restoration(inv: _Invocation, restore: Restorer) -> dict[str, Any]:
    """The check after the last run, as campaign.json records it, with progress lines."""
    campaign = inv.campaign
    where = campaign.restoration_endpoint.base_url
    inv.progress(f"restoration: asking {', '.join(campaign.restoration_aliases)} at {where}")
    record = {**restore(campaign, inv.environ).to_json(), "checked_at": _now()}
    for a in record["aliases"]:
        if a["reason"]:
            a["reason"] = _scrub(a["reason"], inv.secrets)
    for a in record["aliases"]:
        retry = (f" (answered {a['retried_after']} once, then retried)"
                 if a["retried_after"] is not None else "")
        inv.progress(f"restoration: {a['alias']} " + (
            f"answered{retry}" if a["result"] == "pass" else f"FAILED: {a['reason']}"))
    return record
