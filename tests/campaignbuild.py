"""A two-variant campaign file and a fake runner that writes real run folders, for the
campaign runner's and the campaign checks' unit tests; a four-variant campaign document for
the campaign file's and the plan's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from conftest import REPO
from rawbuild import HEADER, completed, write_raw

from anvil_metrics.campaign.plan import CampaignRun
from anvil_metrics.campaign.spec import Variant
from anvil_metrics.post.postprocess import postprocess_run

CAMPAIGN = """\
name = "c1"
scenario = "{scenario}"
runs_per_variant = 2
placements = ["first", "swapped"]
candidate = "m/on"
incumbent = "m/off"

[[variants]]
model = "m"
served_model = "org/m"
speculation = "off"
host = "http://127.0.0.1:9001"
{before_off}

[[variants]]
model = "m"
served_model = "org/m"
speculation = "on"
host = "http://127.0.0.1:9002"
{key_on}

[gates]
e2e_p50_improvement_percent = 10
"""


def campaign_doc() -> dict[str, Any]:
    """A small valid campaign document: four variants, three runs each, placements (its
    scenario path is relative to REPO)."""
    def variant(model: str, spec: str, port: int) -> dict[str, Any]:
        return {"model": model, "served_model": f"org/{model}", "speculation": spec,
                "host": f"http://127.0.0.1:{port}"}
    return {
        "name": "t", "scenario": "scenarios/smoke.toml", "runs_per_variant": 3,
        "placements": ["first", "first", "swapped"], "order": "interleaved",
        "baseline": "a/off", "candidate": "b/on", "incumbent": "a/on",
        "variants": [variant("a", "off", 8000), variant("a", "on", 8000),
                     variant("b", "off", 8001), variant("b", "on", 8001)],
        "gates": {"e2e_p50_improvement_percent": 10, "no_saturated_runs": True},
    }


def campaign_file(tmp_path: Path, before_off: str = "", key_on: str = "") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.format(scenario=REPO / "scenarios" / "smoke.toml",
                                    before_off=before_off, key_on=key_on))
    return path


class FakeRunner:
    """Writes a real run folder (requests.jsonl, a verifying benchmark.json) unless told to
    fail or to stop half-way (a folder with no benchmark.json, as a killed run leaves)."""

    def __init__(self, fail: set[int] | None = None, stop_at: int | None = None) -> None:
        self.calls: list[tuple[int, str, Path]] = []
        self.fail = fail or set()
        self.stop_at = stop_at

    def __call__(self, r: CampaignRun, v: Variant, run_dir: Path) -> str | None:
        self.calls.append((r.k, v.id, run_dir))
        write_raw(run_dir / "requests.jsonl", HEADER, [completed(i) for i in range(3)],
                  {"finished_at": "2026-08-01T16:09:00Z", "client": {}})
        if r.k == self.stop_at:
            raise KeyboardInterrupt  # as if the campaign were killed during this run
        if r.k in self.fail:
            return "the server could not be reached\nsecond line"
        postprocess_run(run_dir)
        return None


def state(results: Path) -> dict[str, Any]:
    return orjson.loads((results / "c1" / "campaign.json").read_bytes())

