"""The public summary's figures and gates: what a campaign's `performance[]` rows show, and
what its promotion decision may require of them, each defined once.

Why a module of its own, beside the catalogue: a summary figure is not a measurement of a
request but the mean over a variant's runs of one of the catalogue's aggregates
(`catalog.AGGREGATES`), and a gate is a comparison of two variants on one such figure. The
catalogue says what a run measured; this says what a campaign reports and decides from it.
Both sit at the bottom of the package because several layers read the same table: the
campaign file checks its gates against it (`campaign/gates.py`), the summary computes, rounds
and verifies its rows and decides its gates from it (`summary/decide.py`, `summary/verify.py`,
`summary/markdown.py`, `summary/fields.py`), the report draws and labels it
(`report/campaignfigs.py`) and the summary's JSON Schema names its gates
(`schemas/verdicts.py`). A figure or gate added here reaches each of them without another
edit.

A figure's direction (`better`) is its aggregate's, so a gate's direction is too: an
improvement is a rise for a rate and a fall for a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from anvil_metrics.catalog import AGGREGATES_BY_NAME


@dataclass(frozen=True, slots=True)
class BlockFigure:
    """A run's figure outside its `metrics`: `doc[block][key]`, its unit and direction
    (the energy block's joules per output token, issue 49 item 2)."""

    name: str
    block: str
    key: str
    unit: str
    better: str


BLOCK_FIGURES: dict[str, BlockFigure] = {f.name: f for f in (
    BlockFigure("j_per_output_token", "energy", "j_per_output_token", "J/tok", "lower"),)}


def run_figure(doc: Mapping[str, Any], name: str) -> Any:
    """A run's figure by name: a `BLOCK_FIGURES` entry's block value, else `metrics[name]`
    (None where the run lacks it)."""
    f = BLOCK_FIGURES.get(name)
    where = doc.get("metrics") if f is None else doc.get(f.block)
    return where.get(name if f is None else f.key) if isinstance(where, Mapping) else None


def figure_source(name: str) -> str:
    """Where a run's figure is read, as words say it: `metrics.<key>` or `<block>.<key>`."""
    f = BLOCK_FIGURES.get(name)
    return f"metrics.{name}" if f is None else f"{f.block}.{f.key}"


def unit_and_better(name: str) -> tuple[str, str | None]:
    """A run figure's unit and direction, from its aggregate or its `BLOCK_FIGURES` entry."""
    f = BLOCK_FIGURES.get(name)
    a = AGGREGATES_BY_NAME[name] if f is None else f
    return a.unit, a.better


@dataclass(frozen=True, slots=True)
class SummaryFigure:
    """One figure of a public summary's `performance[]` row: the mean over a variant's runs
    of each run's `metrics[metric]` (`summary/decide.py`), shown to `decimals` places under
    `label` (summary.md's column) or `long_label` (the report's panel title). `better` is
    its metric's (`Aggregate.better`); `delta`, if any, is the row field of its change
    against the speculation-off variant, in percent, shown to `DELTA_DECIMALS` places;
    `added` figures are anvil's own, absent from the spec's example; an `optional` one (a
    figure only some runs have: per GPU, per dollar, per joule) is left out of a row whose
    runs all lack it, and its column out of summary.md where no row has it."""

    name: str
    unit: str
    decimals: int
    label: str
    long_label: str
    metric: str
    delta: str = ""
    added: bool = False
    optional: bool = False  # left out of a row whose runs all lack it, and of summary.md

    @property
    def better(self) -> str | None:
        return unit_and_better(self.metric)[1]


DELTA_DECIMALS = 1
SUMMARY_FIGURES: tuple[SummaryFigure, ...] = (
    SummaryFigure("ttft_p50_ms", "ms", 1, "TTFT p50 ms", "time to first token p50 (ms)",
                  "ttft_p50_ms"),
    SummaryFigure("effective_prefill_tok_s_p50", "tok/s", 0, "prefill tok/s p50",
                  "effective prefill p50 (tok/s)", "effective_prefill_tok_s_p50"),
    SummaryFigure("decode_tok_s_p50", "tok/s", 1, "decode tok/s p50", "decode rate p50 (tok/s)",
                  "decode_tok_s_p50", delta="decode_delta_percent"),
    SummaryFigure("e2e_p50_ms", "ms", 1, "e2e p50 ms", "end to end p50 (ms)", "e2e_p50_ms",
                  delta="e2e_delta_percent"),
    SummaryFigure("aggregate_output_tok_s", "tok/s", 1, "output tok/s",
                  "aggregate output (tok/s)", "throughput_tok_s"),
    SummaryFigure("prompt_tokens_p50", "tok", 0, "prompt tokens",
                  "prompt tokens p50 (server-counted)", "prompt_tokens_p50", added=True),
    # per GPU, per dollar and per joule (issue 49): null without --gpus, a price, energy
    SummaryFigure("output_tok_s_per_gpu", "tok/s", 1, "output tok/s/GPU",
                  "output per GPU (tok/s)", "output_tok_s_per_gpu", added=True, optional=True),
    SummaryFigure("usd_per_m_output_tokens", "USD/Mtok", 4, "$/M output tok",
                  "cost per million output tokens (USD)", "usd_per_m_output_tokens",
                  added=True, optional=True),
    SummaryFigure("j_per_output_token", "J/tok", 4, "J/output tok",
                  "energy per output token (J)", "j_per_output_token", added=True, optional=True),
)
SUMMARY_BY_NAME: dict[str, SummaryFigure] = {f.name: f for f in SUMMARY_FIGURES}

# A campaign sets the gates (`campaign/gates.py` checks their values) and the summary decides
# them (`summary/decide.py`): one table, below both. Each improvement gate is on one summary
# figure, in its direction; gate -> (summary figure, True when higher is better).
IMPROVEMENT_GATE_FIGURES: tuple[tuple[str, str], ...] = (
    ("e2e_p50_improvement_percent", "e2e_p50_ms"),
    ("ttft_p50_improvement_percent", "ttft_p50_ms"),
    ("decode_p50_improvement_percent", "decode_tok_s_p50"),
    ("effective_prefill_p50_improvement_percent", "effective_prefill_tok_s_p50"),
    ("aggregate_output_improvement_percent", "aggregate_output_tok_s"),
    ("output_per_gpu_improvement_percent", "output_tok_s_per_gpu"),
    ("usd_per_m_output_improvement_percent", "usd_per_m_output_tokens"),
    ("j_per_output_token_improvement_percent", "j_per_output_token"),
)
IMPROVEMENT_GATES: dict[str, tuple[str, bool]] = {
    gate: (name, SUMMARY_BY_NAME[name].better == "higher")
    for gate, name in IMPROVEMENT_GATE_FIGURES}
# The gate on the candidate's check classes judged under load (`[[request_class]] check`):
# named for what it reads (a check's pass rate) and where (under load), apart from
# `functional` (the suites run one request at a time, outside the load).
PASS_RATE_GATE = "check_pass_rate_under_load"
KNOWN_GATES: tuple[str, ...] = (*IMPROVEMENT_GATES, "no_saturated_runs", "functional",
                                PASS_RATE_GATE)
