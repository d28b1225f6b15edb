"""A campaign's plan: its runs in order, each with its folder, and the plan as text.

Why its own module: `spec.py` checks what a campaign file says; this turns a checked
campaign into what is done, in which order (`plan`: interleaved rounds by default, so slow
drift hits every variant alike) and into where (each run's folder name), and writes the
lines `anvil campaign run --dry-run` prints (`plan_lines`). The runner and the dry run
read the one plan, so what is shown is what runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anvil_metrics.campaign.spec import Campaign


@dataclass(frozen=True, slots=True)
class CampaignRun:
    """One run of the plan. `k` counts runs from 1 in the declared order; `run_index`
    counts one variant's runs from 1 (its placement is `placements[run_index - 1]`)."""

    k: int
    variant_id: str
    run_index: int
    placement: str | None
    folder: str  # the run's folder name inside the campaign's folder


def plan(campaign: Campaign) -> list[CampaignRun]:
    """Every run in the declared order: interleaved rounds (A B C D, A B C D, …), so slow
    drift (thermals, a neighbour's load) hits every variant alike, or grouped (A A …, B B …)."""
    n_runs = campaign.runs_per_variant
    if campaign.order == "interleaved":
        pairs = [(v, i) for i in range(1, n_runs + 1) for v in campaign.variants]
    else:
        pairs = [(v, i) for v in campaign.variants for i in range(1, n_runs + 1)]
    width = len(str(len(pairs)))
    return [
        CampaignRun(
            k=k, variant_id=v.id, run_index=i,
            placement=campaign.placements[i - 1] if campaign.placements else None,
            folder=f"{k:0{width}d}-{v.model}-{v.speculation}-run{i}")
        for k, (v, i) in enumerate(pairs, 1)
    ]


def _gate_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"{name} = {'true' if value else 'false'}"
    if isinstance(value, str):
        return f'{name} = "{value}"'
    return f"{name} >= {value:g}"


def plan_lines(campaign: Campaign, runs: list[CampaignRun], results_dir: str | Path
               ) -> list[str]:
    """The plan as `anvil campaign run --dry-run` shows it: the campaign, then one line per
    run (hosts without credentials) and its before_run command, if any."""
    sc = campaign.scenario
    folder = Path(results_dir) / campaign.name
    out = [
        f"campaign {campaign.name} ({campaign.source}): {len(campaign.variants)} variants × "
        f"{campaign.runs_per_variant} runs = {len(runs)} runs, {campaign.order}",
        f"scenario {campaign.scenario_path}: {sc.measurement_protocol}, "
        f"{sc.requests if sc.requests is not None else 'no'} requests, "
        f"concurrency {sc.concurrency}, max_tokens {sc.max_tokens}",
        f"candidate {campaign.candidate}"
        + (f" vs incumbent {campaign.incumbent}" if campaign.incumbent else "")
        + (f"; baseline {campaign.baseline}" if campaign.baseline else ""),
        "gates: " + ", ".join(_gate_text(k, v) for k, v in campaign.gates.items()),
    ]
    if campaign.checks is not None:
        out.append("checks: " + ", ".join(campaign.checks.suites)
                   + ", once per variant after the last run")
    if campaign.restoration_aliases:
        out.append("restoration: " + ", ".join(campaign.restoration_aliases)
                   + f" at {campaign.restoration_endpoint.base_url}, after the last run")
    out.append(f"folder: {folder}")
    n = len(runs)
    id_width = max(len(r.variant_id) for r in runs)
    place_width = max((len(r.placement or "-") for r in runs), default=1)
    model_width = max(len(v.served_model) for v in campaign.variants)
    for r in runs:
        v = campaign.variant(r.variant_id)
        out.append(
            f"run {r.k:>{len(str(n))}} of {n}  {r.variant_id:<{id_width}}  "
            f"{r.placement or '-':<{place_width}}  {v.endpoint.base_url}  "
            f"model {v.served_model:<{model_width}}  -> {r.folder}")
        if v.before_run:
            out.append(f"    before_run: {v.before_run}")
    return out
