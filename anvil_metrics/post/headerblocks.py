"""The blocks a run's raw header gives as they are: `endpoint`, `prompt_ids`, `dataset`,
`request_headers`, and `server`'s way in from its telemetry.

Why together: none has a figure of its own to recompute from the rows (the server block's
figures are recomputed from its samples file, `telemetry/servermetrics.py`), so each is its
definition, a build that copies the header's value, and at most one rule; a module each
would be mostly imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from msgspec import Struct

from anvil_metrics.fieldtypes import Count, described
from anvil_metrics.headers import shown
from anvil_metrics.jsonio import JsonValue
from anvil_metrics.load.scenariofields import ENDPOINTS
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import header_problems
from anvil_metrics.post.serversteady import judge
from anvil_metrics.telemetry.servermetrics import SAMPLES_FILE, build_server
from anvil_metrics.telemetry.serverroles import with_roles

Endpoint = Literal[ENDPOINTS]  # type: ignore[valid-type]


class Dataset(Struct, forbid_unknown_fields=True):
    """The dataset the prompts came from."""

    file: Annotated[str, described("", "the dataset file's name (its folder is not "
                                        "recorded)")]
    format: Annotated[str | None, described(
        "", "sharegpt, jsonl or text as --dataset-format gave it; null: told by the file")]
    entries: Annotated[Count, described(
        "", "the usable entries it holds (request k sends entry k mod entries)")]


def build_endpoint(inputs: BuildInputs) -> JsonValue | _Absent:
    """What the requests were posted to (absent in raw files from before it)."""
    endpoint = inputs.params.get("endpoint")
    return endpoint if isinstance(endpoint, str) else ABSENT


def build_prompt_ids(inputs: BuildInputs) -> JsonValue | _Absent:
    """True for a run that sent token ids (--prompt-ids), else absent."""
    return True if inputs.params.get("prompt_ids") is True else ABSENT


def build_dataset(inputs: BuildInputs) -> JsonValue | _Absent:
    """The header's dataset, as it says (no figure of its own), else absent."""
    dataset = inputs.params.get("dataset")
    if not isinstance(dataset, dict):
        return ABSENT
    return {k: dataset.get(k) for k in Dataset.__struct_fields__}


def build_request_headers(inputs: BuildInputs) -> JsonValue | _Absent:
    """The extra headers, each credential's value redacted (it was before the raw file)."""
    headers = inputs.params.get("request_headers")
    return shown(headers) if isinstance(headers, dict) else ABSENT


def verify_request_headers(doc: Mapping[str, JsonValue], rows: RowColumns | None,
                           problems: list[str]) -> None:
    """Every credential's value redacted."""
    if isinstance(doc.get("request_headers"), dict):
        problems += header_problems(doc["request_headers"])


def build_server_block(inputs: BuildInputs) -> JsonValue | _Absent:
    """The server's own figures over the window, from `server_metrics.jsonl` beside the raw
    file (`telemetry/servermetrics.py`); absent in a raw file from before the block."""
    server = inputs.params.get("server")
    if not isinstance(server, dict):
        return ABSENT
    path = inputs.raw.path
    replicas = inputs.params.get("replicas")
    block = build_server(server, inputs.doc["engine"],
                         Path(path).with_name(SAMPLES_FILE) if path else None, inputs.rows,
                         replicas if isinstance(replicas, list) else None, judge)
    return with_roles(block, server, Path(path).parent if path else None, inputs.rows, judge)
