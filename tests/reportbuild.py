"""Small real folders for `anvil report`: a capacity search and a campaign, in a second each.

Why built with anvil's own writers and not by hand: a report refuses what its files do not
back (a step's benchmark.json that does not verify, a summary.json that is stale), so the
folders here are what `anvil capacity` and `anvil campaign run` would leave, with the
network left out. Each run is a `requests.jsonl` written by `rawbuild` and turned into
`benchmark.json` by `postprocess_run` (the code `anvil run` calls); the capacity search is
`capacity.search` + `capacity.result_doc` (the code `anvil capacity` calls) over such runs,
the server's latency growing past 8 users; the campaign is `campaignrun.run_campaign` with a
runner that writes such runs, the "on" variant streaming twice as fast as "off", and
`anvil summarize`'s writer (`summary.folder.write_summary`) when a summary is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.campaign.plan import CampaignRun
from anvil_metrics.campaign.runner import run_campaign
from anvil_metrics.campaign.spec import Variant, load_campaign
from anvil_metrics.jsonio import atomic_write_json
from anvil_metrics.post.postprocess import postprocess_run
from anvil_metrics.runs.capacity import parse_slos, result_doc, search
from anvil_metrics.summary.folder import read_campaign_folder, summary_document, write_summary
from anvil_metrics.summary.markdown import markdown

REPO = Path(__file__).resolve().parents[1]
CAPACITY_SLO = "ttft_p95_ms<=150,error_rate<=0.05"
CAPACITY_LOADS = [4, 8, 16, 12, 10, 9]  # doubling from 4 to --max 16, then bisecting
CAPACITY = 9
RUN_END = {"finished_at": "2026-08-01T16:00:45Z",
           # the load generator's own figures: well within its limits (not saturated)
           "client": {"loop_lag_ms": {"p50": 0.5, "p99": 1.0, "max": 2.0}, "cpu_pct": 20.0}}


def request(i: int, ttfo_ms: float, chunk_ms: float) -> Any:
    """A completed request: first output `ttfo_ms` after its start, then 4 chunks
    `chunk_ms` apart (2 reasoning, 3 content, as `rawbuild.completed`)."""
    start = 1_000 + i * 10_000_000
    first = start + int(ttfo_ms * 1e6)
    step = int(chunk_ms * 1e6)
    return completed(i, start_ns=start, first_output_ns=first, first_content_ns=first + step,
                     end_ns=first + 4 * step, chunk_deltas_ns=(first - start, *[step] * 4))


def write_run(run_dir: Path, records: list[Any], concurrency: int,
              goodput: list[str] | None = None) -> Path:
    """A run folder with requests.jsonl and its benchmark.json; the latter's path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    params: dict[str, Any] = {"concurrency": concurrency}
    if goodput:
        params["goodput"] = goodput
    write_raw(run_dir / "requests.jsonl", {**HEADER, "params": params}, records, RUN_END)
    return postprocess_run(run_dir).path


def capacity_folder(root: Path) -> Path:
    """`root/capacity-test/` as `anvil capacity --slo CAPACITY_SLO --start 4 --max 16`
    leaves it: steps at CAPACITY_LOADS, capacity CAPACITY; 10 requests a step, TTFT 60 ms
    up to 8 users, then 20 ms more per user; one failed request from 13 users on."""
    folder = root / "capacity-test"
    folder.mkdir(parents=True)
    slos = parse_slos(CAPACITY_SLO)

    def run_step(load: float) -> tuple[dict[str, Any] | None, str | None]:
        users = int(load)
        ttft = 60 if users <= 8 else 120 + 20 * (users - 8)
        records = [request(i, ttft + i - 1, 1.0) for i in range(10)]
        if users > 12:
            records.append(failed(10))
        path = write_run(folder / f"benchmark-step{users:03d}", records, users,
                         ["ttft_ms<=100"])
        return orjson.loads(path.read_bytes()), str(path)

    s, steps, stopped = search("users", slos, run_step, start=4, maximum=16, resolution=1)
    atomic_write_json(folder / "capacity.json", result_doc("users", slos, s, steps, stopped))
    return folder


CAMPAIGN = """\
name = "report-test"
scenario = "{scenario}"
runs_per_variant = 3
placements = ["first", "first", "swapped"]
candidate = "m/on"
incumbent = "m/off"
baseline = "m/off"

[[variants]]
model = "m"
served_model = "org/m"
speculation = "off"
host = "http://127.0.0.1:9001"

[[variants]]
model = "m"
served_model = "org/m"
speculation = "on"
host = "http://127.0.0.1:9002"

[gates]
e2e_p50_improvement_percent = 10
no_saturated_runs = true
"""


def campaign_folder(root: Path, summarize: bool = True) -> Path:
    """`root/results/report-test/` as `anvil campaign run` leaves it (and, with `summarize`,
    `anvil summarize`): variants m/off (chunks 20 ms apart) and m/on (10 ms), 3 runs each of
    5 requests, the first output after 50 ms + a millisecond per run index."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "campaign.toml"
    path.write_text(CAMPAIGN.format(scenario=REPO / "scenarios" / "smoke.toml"))

    def runner(r: CampaignRun, v: Variant, run_dir: Path) -> str | None:
        chunk_ms = 20.0 if v.speculation == "off" else 10.0
        write_run(run_dir, [request(i, 50.0 + r.run_index + i, chunk_ms) for i in range(5)],
                  1)
        return None

    outcome = run_campaign(load_campaign(path), root / "results", runner=runner, environ={})
    assert outcome.exit_code == 0 and outcome.done == 6, outcome
    folder = root / "results" / "report-test"
    if summarize:
        doc = summary_document(read_campaign_folder(folder))
        write_summary(doc, markdown(doc), folder / "summary.json", folder / "summary.md")
    return folder
