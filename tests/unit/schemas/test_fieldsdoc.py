"""`docs/fields.md` and the definitions it lists: every field of every schema described, the
page what the schemas give, and every field the shared spec names a path in its schema.

Why these tests: the page and the schemas' descriptions are how a reader learns what a field
anvil writes means (issue 27 C: "every written field has its definition"). A field without
words, a page edited by hand or left behind, or a spec field the schema does not know would
each be a field with no definition a reader can find. The spec is not in this repository
(it lies in `../shared/spec/`), so its field names are copied below as data, table by table:
the test runs from a fresh clone alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anvil_metrics.post.schema import SCHEMA as BENCHMARK
from anvil_metrics.schemas import fieldsdoc
from anvil_metrics.schemas.build import FIELDS_PAGE, FILES, GENERATORS, fields_page
from anvil_metrics.schemas.fieldsdoc import FieldRow, rows, type_of
from anvil_metrics.schemas.parts import KEY
from anvil_metrics.summary.folder import SCHEMA as SUMMARY

REPO = Path(__file__).resolve().parents[3]

# --- the shared spec's field names, copied from its tables ----------------------------------
# benchmark-v1.md: every name in the "field" column of the row, aggregate, run-field and
# added-field tables, and the members its "meaning" column lists in braces (`{mode, …}`).
# `<m>_p50`/`<m>_p95` stands for the listed metrics, each at p50 and p95. Left out: the
# event table's moments (start, first_output, …: stamps, not fields) and the server's own
# names (`usage.prompt_tokens`, `delta.content`) quoted in definitions.
SPEC_ROW = ("request_index", "planned_context_tokens", "prompt_tokens", "output_tokens",
            "output_token_source", "cached_tokens", "reasoning_chunks", "content_chunks",
            "e2e_ms", "time_to_first_output_ms", "ttft_ms", "generation_ms",
            "visible_generation_ms", "decode_tok_s", "mean_inter_token_latency_ms",
            "effective_prefill_tok_s",
            # "Fields anvil adds": row time_to_first_chunk_ms, reasoning_ms, …
            "time_to_first_chunk_ms", "reasoning_ms", "reasoning_tok_s", "content_tok_s")
SPEC_PERCENTILES = ("ttft_*_ms", "time_to_first_output_*_ms", "e2e_*_ms", "generation_*_ms",
                    "decode_tok_s_*", "effective_prefill_tok_s_*",
                    "mean_inter_token_latency_ms_*", "prompt_tokens_*")
SPEC_METRICS = ("output_tokens", "prompt_tokens", "reasoning_chunks", "content_chunks",
                "output_token_sources", "ttft_samples", "prompt_token_samples",
                "throughput_tok_s", "content_chunks_s", "prefix_cache_hit_avg", "goodput_rps")
SPEC_RUN = ("schema", "run_id", "started_at", "finished_at", "wall_clock_ms", "requests",
            "completed", "failed", "failures", "concurrency", "context_tokens",
            "max_context_tokens", "context_distribution", "context_seed", "max_tokens",
            "model", "engine", "gpu", "tier", "manifest", "source_recipe", "base_url",
            "measurement_protocol", "serve_flags", "serve_flags.no_thinking",
            "serve_flags.reasoning_effort", "serve_flags.shared_prefix_burst",
            "serve_flags.thinking_mode", "timing_methodology", "request_timings", "metrics",
            # the added fields' table
            "partial", "prompt_calibration", "prompt_calibration.method",
            "prompt_calibration.planned_vs_counted_error_pct_max", "shared_prefix",
            "shared_prefix.prefix_tokens", "shared_prefix.group_size", "run_nonce", "client",
            "client.loop_lag_ms", "client.loop_lag_ms.p50", "client.loop_lag_ms.p99",
            "client.loop_lag_ms.max", "client.cpu_pct", "client.achieved_concurrency",
            "client.saturated", "warmup_requests", "load", "load.mode", "load.arrival",
            "load.offered_rate_rps", "load.achieved_rate_rps", "load.burstiness",
            "load.duration_s", "load.window_s", "load.schedule_lag_ms",
            "load.waited_for_user", "load.cancelled", "steps", "steps[].step", "steps[].users",
            "steps[].rate", "steps[].started_s", "steps[].ended_s", "steps[].requests",
            "steps[].completed", "steps[].failed", "steps[].metrics", "steps[].goodput_rps",
            "server", "server.client_minus_server_ms")
# public-summary-v1.md's one table: its "field" column and the members its definitions name
# in backticks; "…_p50… in a row" stands for the example row's p50 fields. `functional`'s
# results are per model (`<model>`), retrieval's named by its size (`retrieval_131k`).
SPEC_SUMMARY = (
    "performance_protocol", "performance_protocol.requests_per_run",
    "performance_protocol.runs_per_model", "performance_protocol.concurrency",
    "performance_protocol.configured_input_tokens", "performance_protocol.max_output_tokens",
    "performance_protocol.aggregation", "performance", "performance[].ttft_p50_ms",
    "performance[].effective_prefill_tok_s_p50", "performance[].decode_tok_s_p50",
    "performance[].e2e_p50_ms", "performance[].aggregate_output_tok_s",
    "performance[].decode_delta_percent", "performance[].e2e_delta_percent",
    "sampled_speculative_telemetry", "functional", "functional.<model>.coding",
    "functional.<model>.json", "functional.<model>.retrieval_<N>k", "functional.<model>.tools",
    "functional.<model>.streaming_tools", "functional.<model>.tool_result_recovery",
    "functional.<model>.responses_subset",
    "functional.<model>.thinking_disabled_reasoning_leakage", "functional.quality",
    "functional.near_limit_retrieval", "multimodal", "multimodal.not_tested",
    "retained_failures", "restoration", "restoration.all_tiers_admitting", "decision")


def _spec_benchmark_paths() -> list[str]:
    out = [f"request_timings[].{f}" for f in SPEC_ROW]
    out += [f"metrics.{m.replace('*', p)}" for m in SPEC_PERCENTILES for p in ("p50", "p95")]
    out += [f"metrics.{m}" for m in SPEC_METRICS]
    return out + list(SPEC_RUN)


def _paths(which: str) -> set[str]:
    return {r.path for r in rows(GENERATORS[which]())}


@pytest.mark.parametrize(("which", "spec"), [(BENCHMARK, _spec_benchmark_paths()),
                                             (SUMMARY, list(SPEC_SUMMARY))])
def test_every_field_the_spec_names_is_a_path_of_its_schema(which: str, spec: list[str]
                                                            ) -> None:
    assert len(spec) == len(set(spec)) > 30
    assert sorted(set(spec) - _paths(which)) == []


def test_the_spec_check_can_fail() -> None:
    assert "metrics.ttft_p50_ms" in _paths(BENCHMARK)
    assert "metrics.ttft_p99_ms" not in _paths(BENCHMARK)
    assert "functional.coding" not in _paths(SUMMARY)  # per model, not at the top


def _described_everywhere(s: Any, path: str, out: list[str]) -> None:
    """Every field schema below `s` without a non-empty description, walked apart from
    `fieldsdoc` (any `properties`, `patternProperties`, keyed map, `$defs`, at any depth)."""
    if isinstance(s, list):
        for x in s:
            _described_everywhere(x, path, out)
        return
    if not isinstance(s, dict):
        return
    fields = [*s.get("properties", {}).items(), *s.get("patternProperties", {}).items()]
    extra = s.get("additionalProperties")
    if isinstance(extra, dict) and KEY in extra:
        fields.append((extra[KEY], extra))
    for name, child in fields:
        text = child.get("description")
        if not (isinstance(text, str) and text.strip()):
            out.append(f"{path}.{name}")
    for key, child in s.items():
        _described_everywhere(child, f"{path}.{key}", out)


@pytest.mark.parametrize("which", list(FILES))
def test_every_property_of_every_schema_has_a_description(which: str) -> None:
    doc_schema = GENERATORS[which]()
    missing: list[str] = []
    _described_everywhere(doc_schema, "", missing)
    assert missing == []
    assert all(r.description.strip() for r in rows(doc_schema))
    assert len(rows(doc_schema)) > 30  # the raw request line has 38


def test_the_description_check_can_fail() -> None:
    missing: list[str] = []
    _described_everywhere({"properties": {"a": {"type": "object", "properties": {
        "b": {"type": "string"}}, "description": "x"}}}, "", missing)
    assert missing == [".properties.a.b"]


def test_the_page_is_the_generated_one() -> None:
    assert FIELDS_PAGE == REPO / "docs" / "fields.md"
    assert FIELDS_PAGE.read_text(encoding="utf-8") == fields_page(), (
        "docs/fields.md differs from what the schemas give: run "
        "`python -m anvil_metrics.schemas.build` and commit it")


def test_the_page_lists_each_schema_and_its_fields() -> None:
    page = fields_page()
    assert page.startswith(fieldsdoc.INTRO) and "../shared/spec/benchmark-v1.md" in page
    for which, name in FILES.items():
        assert f"## `{which}`" in page and name in page
    assert ("| `request_timings[].ttft_ms` | number | yes | ms | request written to the first "
            "non-empty content delta (null if no content); measured: (first_content_ns − "
            "start_ns) / 1e6 |") in page
    assert "| `load.schedule_lag_ms.p99` | number | yes | ms |" in page
    assert "| `checks.<suite>.cases[].retries[].wait_s` | number | no | s |" in page


def test_types_in_words() -> None:
    assert type_of({"type": ["integer", "null"]}) == ("integer", True)
    assert type_of({"anyOf": [{"type": "object"}, {"type": "null"}]}) == ("object", True)
    assert type_of({"enum": ["a", "b", None]}) == ('one of `"a"`, `"b"`', True)
    assert type_of({"const": "x"}) == ('`"x"`', False)
    assert type_of({"type": "array", "items": {"type": "number"}, "minItems": 2,
                    "maxItems": 2}) == ("[number, number]", False)
    assert type_of({"type": "array", "items": {"type": "string"}}) == ("array of string",
                                                                         False)
    assert type_of({"type": "object", "additionalProperties": {"type": "integer"}}) == (
        "object of integer", False)
    assert type_of({"$ref": "#/properties/metrics"}) == ("object, as `metrics`", False)
    assert type_of({}) == ("any", True)


def test_rows_name_paths_through_lists_maps_and_shared_definitions() -> None:
    s = {"type": "object", "properties": {
        "a": {"type": "array", "description": "u: the list", "x-unit": "u",
              "items": {"type": "object", "properties": {
                  "b": {"type": "string", "description": "bee"}}}},
        "m": {"type": "object", "description": "a map", "additionalProperties": {
            KEY: "<model>", "type": "boolean", "description": "per model"}},
        "s": {"type": "object", "description": "two users", "properties": {
            "x": {"$ref": "#/$defs/part", "description": "x"},
            "y": {"$ref": "#/$defs/part", "description": "y"}}}},
        "$defs": {"part": {"type": "object", "properties": {
            "c": {"type": "integer", "description": "sea"}}}}}
    assert rows(s) == [
        FieldRow("a", "array of object", False, "u", "the list"),
        FieldRow("a[].b", "string", False, "", "bee"),
        FieldRow("m", "object", False, "", "a map"),
        FieldRow("m.<model>", "boolean", False, "", "per model"),
        FieldRow("s", "object", False, "", "two users"),
        FieldRow("s.x", "object, as `part`", False, "", "x"),
        FieldRow("s.y", "object, as `part`", False, "", "y"),
        FieldRow("s.<part>.c", "integer", False, "", "sea")]
    assert "| `a` | array of object | no | u | the list |" in fieldsdoc.table(
        {**s, "title": BENCHMARK})
