"""Campaign folders and run documents built by hand, for the summary's, schema's and
report's unit tests: the spec example's `performance` rows rebuilt from five constructed runs
per variant (run medians that average to the example's figures) and a `campaign.json` that
lists them, as `anvil campaign run` writes it."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import orjson
from conftest import REPO

DATA = REPO / "tests" / "data"


SHARED = Path(os.environ.get("ANVIL_SHARED") or REPO.parent / "shared")


SUMMARY_NAME = "public-summary-v1.004_72673d6db1c063a6.json"


BENCHMARK = orjson.loads((DATA / "benchmark-v1.000_51f6de0d03ca0563.json").read_bytes())


OFFSETS = (-0.02, -0.01, 0.0, 0.01, 0.02)  # relative, per run: they sum to zero


# the example's sampled telemetry, per model: (accepted lengths, acceptance rates) of 5 runs
TELEMETRY = {"official-fp8": ((3.35, 3.40, 3.52, 3.44, 3.38), (0.80, 0.78, 0.84, 0.81, 0.79)),
             "inferact-nvfp4": ((2.95, 3.12, 2.88, 3.00, 3.05), (0.62, 0.66, 0.71, 0.65, 0.70))}


def run(i: int, *, rid: str = "", **metrics: Any) -> dict[str, Any]:
    """A benchmark/v1 document (the spec example's, copied) with these `metrics` figures."""
    doc = copy.deepcopy(BENCHMARK)
    doc["request_timings"] = []
    doc["run_id"] = rid or f"benchmark-2026081{i}T000000Z"
    doc["metrics"] = {**doc["metrics"], **metrics}
    doc["client"] = {"saturated": False, "verdict": "not saturated"}
    return doc


def runs_for(row: dict[str, Any], spread: float = 1.0) -> list[dict[str, Any]]:
    """Five runs whose medians average to the example row's figures."""
    out = []
    for i, off in enumerate(OFFSETS):
        f = 1.0 + spread * off
        doc = run(i, rid=f"{row['model']}-{row['speculation']}-{i}",
                  ttft_p50_ms=row["ttft_p50_ms"] * f,
                  effective_prefill_tok_s_p50=row["effective_prefill_tok_s_p50"] * f,
                  decode_tok_s_p50=row["decode_tok_s_p50"] * f,
                  e2e_p50_ms=row["e2e_p50_ms"] * f,
                  throughput_tok_s=row["aggregate_output_tok_s"] * f,
                  prompt_tokens_p50=3610.0 + 10 * (i - 2))
        doc.update(requests=10, concurrency=1, context_distribution={"4096": 10},
                   max_tokens=256)
        if row["speculation"] != "off":
            lengths, rates = TELEMETRY[row["model"]]
            doc["server"] = {"spec_decode": {"accepted_length": lengths[i],
                                             "acceptance_rate": rates[i]}}
        out.append(doc)
    return out





CAMPAIGN_FILE = REPO / "scenarios/campaigns/fp8-vs-nvfp4.toml"


SEED = DATA / "benchmark-v1.000_51f6de0d03ca0563.json"


VARIANTS = ("official-fp8/off", "official-fp8/mtp3", "inferact-nvfp4/off",
            "inferact-nvfp4/mtp3")


PLACEMENTS = ("first", "first", "first", "swapped", "swapped")


def accept_all(path: Path) -> list[str]:
    return []


def entry(k: int, variant: str, i: int, state: str = "done", **more: Any) -> dict[str, Any]:
    return {"k": k, "variant": variant, "run_index": i, "placement": PLACEMENTS[i - 1],
            "folder": f"{k:02d}-{variant.replace('/', '-')}-run{i}", "state": state,
            "attempts": 1, "before_run": None, "failure": None, **more}


def example_checks(variant: str) -> dict[str, Any]:
    """A checks document (anvil-serving.checks/v1) for one of the example's variants whose
    figures are those the example's functional and multimodal blocks report."""
    model = variant.split("/")[0]
    near_s, image_s = {"official-fp8": (193.2, 9.3), "inferact-nvfp4": (185.3, 7.7)}[model]

    def suite(passed: int, total: int, **extra: Any) -> dict[str, Any]:
        return {"result": "pass" if passed == total else "fail", "passed": passed,
                "total": total, "elapsed_s": 1.0, **extra, "cases": []}
    return {"schema": "anvil-serving.checks/v1", "model": model,
            "options": {"transport": "cpu"}, "checks": {
                "coding": suite(6, 6), "json": suite(5, 5), "tools": suite(20, 20),
                "streaming_tools": suite(20, 20), "tool_result_recovery": suite(4, 4),
                "responses_subset": suite(2, 2),
                "reasoning_leakage": suite(3, 3, thinking_disabled_reasoning_leakage=False),
                "retrieval": suite(4, 4, requested_context_tokens=131072),
                "near_limit": suite(1, 1, requested_context_tokens=389000,
                                    request_elapsed_s=near_s),
                "quality": suite(12, 12, parts={"intelligence": {"passed": 6, "total": 6},
                                                "session": {"passed": 3, "total": 3},
                                                "tools": {"passed": 3, "total": 3}}),
                "multimodal": suite(2, 2, general_image_seconds=image_s, ocr_seconds=0.7,
                                    not_tested=["video", "multi-image ordering",
                                                "32-image ceiling", "concurrency above one",
                                                "host-memory pressure"])}}


def write_folder(root: Path, docs: dict[str, list[dict]], entries: list[dict],
                 toml: str | None = None, campaign_file: Path = CAMPAIGN_FILE,
                 redone: list[dict] | None = None, checks: bool = True) -> Path:
    """A campaign folder: campaign.json, for each done entry its run's document (the
    variant's next one from `docs`), and (`checks`) each variant's checks file."""
    root.mkdir(parents=True, exist_ok=True)
    if checks:
        (root / "checks").mkdir()
        for v in docs:
            (root / "checks" / f"{v.replace('/', '+')}.json").write_bytes(
                orjson.dumps(example_checks(v)))
    taken = {v: 0 for v in docs}
    for e in entries:
        if e["state"] == "done":
            doc = docs[e["variant"]][taken[e["variant"]]]
            taken[e["variant"]] += 1
            (root / e["folder"]).mkdir()
            (root / e["folder"] / "benchmark.json").write_bytes(orjson.dumps(doc))
    (root / "campaign.json").write_bytes(orjson.dumps({
        "schema": "anvil-campaign/v1", "name": "qwen-fp8-vs-nvfp4",
        "campaign_file": str(campaign_file),
        "campaign_toml": CAMPAIGN_FILE.read_text() if toml is None else toml,
        "scenario_file": str(REPO / "scenarios/performance.toml"), "runs": entries,
        "redone": redone or []}))
    return root


def example_docs(example: dict[str, Any]) -> dict[str, list[dict]]:
    return {f"{r['model']}/{r['speculation']}": runs_for(r) for r in example["performance"]}


def all_entries(runs: int = 5) -> list[dict]:
    out, k = [], 1
    for i in range(1, runs + 1):
        for v in VARIANTS:
            out.append(entry(k, v, i))
            k += 1
    return out

