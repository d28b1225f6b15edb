"""A scenario's rules are written once, for a file and for the flags over it: each flag is
the key it sets (its text read into the value the file would hold), each rule refuses a
file's key and a flag's alike (the file's error names the key, the flag's the flag), and
every key a scenario keeps is written back by `scenario_to_dict`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.options import SCENARIO_OPTIONS, scenario_flags
from anvil_metrics.load.scenario import (
    Scenario,
    scenario_from_dict,
    scenario_to_dict,
    scenario_with_flags,
)
from anvil_metrics.load.scenariofields import FIELDS, FLAGS
from anvil_metrics.load.scenariorules import RULES_AFTER

BASE: dict[str, Any] = {"measurement_protocol": "rules", "max_tokens": 64,
                        "context_tokens": 4096, "max_context_tokens": 4096}

# each flag's text (as typed) and the keys a file holds for the same ask
SAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "--model": ("m", {"meta": {"model": "m"}}),
    "--users": ("3", {"concurrency": 3}),
    "--prefill-concurrency": ("2", {"prefill_concurrency": 2}),
    "--balance": ("least-in-flight", {"balance": "least-in-flight"}),
    "--requests": ("7", {"requests": 7}),
    "--duration": ("2m", {"duration": "2m"}),
    "--warmup": ("5s", {"duration": 60, "warmup": 5}),
    "--cooldown": ("5s", {"duration": 60, "cooldown": 5}),
    "--rate": ("2.5", {"rate": 2.5}),
    "--arrival": ("constant", {"rate": 1, "arrival": "constant"}),
    "--burstiness": ("0.5", {"rate": 1, "burstiness": 0.5}),
    "--arrival-seed": ("9", {"rate": 1, "arrival_seed": 9}),
    "--trace": ("t.jsonl", {"trace": {"path": "t.jsonl"}}),
    "--trace-format": ("burstgpt", {"trace": {"path": "t.jsonl", "format": "burstgpt"}}),
    "--trace-speed": ("4", {"trace": {"path": "t.jsonl", "speed": 4}}),
    "--trace-limit": ("5", {"trace": {"path": "t.jsonl", "limit": 5}}),
    "--trace-window": ("60:", {"trace": {"path": "t.jsonl", "window": "60:"}}),
    "--trace-block": ("16", {"trace": {"path": "t.jsonl", "block_tokens": 16}}),
    "--trace-model": ("gpt", {"trace": {"path": "t.jsonl", "model": "gpt"}}),
    "--agents": ("4", {"concurrency": 4}),
    **{flag: (text, {"trace": {"path": "a.jsonl", "format": "agent-jsonl", key: value}})
       for flag, text, key, value in (("--jobs", "7", "jobs", 7),
                                      ("--tool-speed", "2", "tool_speed", 2),
                                      ("--max-tool-wait", "1.5", "max_tool_wait", 1.5),
                                      ("--max-idle", "0", "max_idle", 0),
                                      ("--start-at", "sampled", "start_at", "sampled"),
                                      ("--start-seed", "3", "start_seed", 3))},
    "--dataset": ("d.jsonl", {"dataset": {"path": "d.jsonl"}}),
    "--dataset-format": ("text", {"dataset": {"path": "d.jsonl", "format": "text"}}),
    "--conversation": ("turns=uniform:2:4,turn_tokens=32", {"conversation": {
        "turns": {"dist": "uniform", "min": 2, "max": 4}, "turn_tokens": 32}}),
    "--steps": ("1,4", {"steps": [1, 4], "step_duration": 1}),
    "--rates": ("1,4", {"rates": [1, 4], "step_duration": 1}),
    "--step-duration": ("90s", {"steps": [1], "step_duration": "90s"}),
    "--goodput": ("ttft_ms<=20", {"goodput": "ttft_ms<=20"}),
    "--endpoint": ("responses", {"request": {"endpoint": "responses"}}),
    "--prompt-ids": ("true", {"request": {"endpoint": "completions", "prompt_ids": True}}),
    "--models": ("a,b", {"models": {"names": ["a", "b"]}}),
    "--model-assignment": ("zipf:1.5", {"models": {"names": ["a"], "assignment": "zipf",
                                                   "zipf_alpha": 1.5}}),
    "--cancel-rate": ("0.5", {"cancel": {"rate": 0.5, "after": "decode"}}),
    "--cancel-after": ("12.5", {"cancel": {"rate": 1, "after": 12.5}}),
    "--stuck-after": ("2m", {"timeouts": {"stuck_after_s": 120}}),
    "--probe-rate": ("2.5", {"probe_rate": 2.5}),
    "--probe-idle": ("3", {"probe_rate": 2.5, "probe_idle": 3}),
    "--max-tokens": ("32", {"max_tokens": 32}),
    "--max-line-bytes": ("65536", {"request": {"max_line_bytes": 65536}}),
    "--warmup-requests": ("2", {"warmup_requests": 2}),
    "--engine": ("vllm", {"meta": {"engine": "vllm"}}),
    "--gpu": ("H100", {"meta": {"gpu": "H100"}}),
    "--gpus": ("8", {"meta": {"gpus": 8}}),
    "--gpu-hour-price": ("2.5", {"meta": {"gpus": 8, "gpu_hour_price": 2.5}}),
    "--tier": ("gold", {"meta": {"tier": "gold"}}),
    "--energy": ("nvml", {"energy": {"source": "nvml"}}),
    "--energy-url": ("http://a:9400/metrics,http://b:9400/metrics",
                     {"energy": {"urls": ["http://a:9400/metrics", "http://b:9400/metrics"]}}),
    "--energy-metric": ('gpu_power_usage{gpu_id="0"}:W',
                        {"energy": {"metric": 'gpu_power_usage{gpu_id="0"}:W',
                                    "urls": ["http://a/metrics"]}}),
    "--energy-interval": ("0.25", {"energy": {"source": "nvml", "interval": 0.25}}),
    "--energy-idle": ("10s", {"energy": {"source": "nvml", "idle": "10s"}}),
    "--manifest": ("m.yaml", {"meta": {"manifest": "m.yaml"}}),
    "--source-recipe": ("r", {"meta": {"source_recipe": "r"}}),
}
# the keys a sample needs beside its flag's own, given by the other flags there
NEEDS = {"--warmup": {"duration": "60"}, "--cooldown": {"duration": "60"},
         "--arrival": {"rate": "1"}, "--burstiness": {"rate": "1"},
         "--arrival-seed": {"rate": "1"}, "--steps": {"step_duration": "1"},
         "--rates": {"step_duration": "1"}, "--step-duration": {"steps": "1"},
         "--prompt-ids": {"endpoint": "completions"},
         "--model-assignment": {"models": "a"}, "--cancel-rate": {"cancel_after": "decode"},
         "--cancel-after": {"cancel_rate": "1"},
         "--energy-metric": {"energy_url": "http://a/metrics"},
         "--energy-interval": {"energy": "nvml"}, "--energy-idle": {"energy": "nvml"}}
for _name in ("--trace-format", "--trace-speed", "--trace-limit", "--trace-window",
              "--trace-block", "--trace-model"):
    NEEDS[_name] = {"trace": "t.jsonl"}
NEEDS["--dataset-format"] = {"dataset": "d.jsonl"}
NEEDS["--gpu-hour-price"] = {"gpus": "8"}
NEEDS["--probe-idle"] = {"probe_rate": "2.5"}
for _name in ("--jobs", "--tool-speed", "--max-tool-wait", "--max-idle", "--start-at",
              "--start-seed"):
    NEEDS[_name] = {"trace": "a.jsonl", "trace_format": "agent-jsonl"}


def flagged(doc: dict[str, Any], **values: str) -> Scenario:
    return scenario_with_flags(doc, scenario_flags(values), "s.toml")


def test_every_flag_is_the_key_it_sets() -> None:
    """The flag's text and the file's key are one value: the same scenario."""
    assert set(SAMPLES) == {f.name for f in FLAGS}, "a flag without its sample here"
    dest = {o.flag: o.dest for o in SCENARIO_OPTIONS}
    for flag, (text, keys) in SAMPLES.items():
        values = {dest[flag]: text, **NEEDS.get(flag, {})}
        assert flagged(BASE, **values) == scenario_from_dict({**BASE, **keys}, "s.toml"), flag


def test_every_rule_follows_a_key_and_every_kept_key_is_written_back() -> None:
    assert set(RULES_AFTER) <= set(FIELDS)
    doc = {**BASE, "concurrency": 3, "warmup_requests": 1, "context_seed": 4,
           "context_distribution": {"100": 2, "50": 1}, "goodput": "ttft_ms<=20",
           "duration": "1m", "warmup": 5, "cooldown": 5, "rate": 3, "arrival": "gamma",
           "burstiness": 0.5, "arrival_seed": 2, "prefill_concurrency": 2, "probe_rate": 2,
           "serve_flags": {"reasoning_effort": "low", "thinking_mode": "on",
                           "shared_prefix_burst": False},
           "request": {"include_usage": False, "fixed_output_tokens": True,
                       "system_prompt": "be brief", "extra_body": {"top_k": 2}},
           "models": {"names": ["a", "b"]}, "cancel": {"rate": 0.1, "after": "prefill"},
           "meta": {"gpu": "H100"}, "headers": {"X-Tenant": "t"},
           "timeouts": {"idle_s": 9, "stuck_after_s": 0}}
    sc = scenario_from_dict(doc)
    assert scenario_from_dict(scenario_to_dict(sc)) == sc
    written = scenario_to_dict(sc)
    for key, row in FIELDS.items():
        if row.sets is not None and getattr(sc, row.sets) is not None:
            table, _, last = key.rpartition(".")
            assert (written[table] if table else written)[last] == getattr(sc, row.sets), key


BURSTS = {"serve_flags": {"shared_prefix_burst": True}, "shared_prefix": {"prefix_tokens": 64}}
# (the file's keys that break a rule beside BASE; the key the file's error names; the flags
# that ask the same over BASE (and BURSTS, for the first), and the flag their error names)
BROKEN = [
    ({"rate": 2, **BURSTS}, "rate", {"rate": "2"}, "--rate"),
    ({"steps": [1], "step_duration": 1, "requests": 3}, "requests",
     {"steps": "1", "step_duration": "1", "requests": "3"}, "--requests"),
    ({"warmup": 5}, "warmup", {"warmup": "5"}, "--warmup"),
    ({"duration": 5, "warmup": 3, "cooldown": 2}, "cooldown",
     {"duration": "5", "warmup": "3", "cooldown": "2"}, "--cooldown"),
    ({"arrival": "gamma"}, "arrival", {"arrival": "gamma"}, "--arrival"),
    ({"request": {"endpoint": "embeddings"}, "cancel": {"rate": 1, "after": "decode"}},
     "cancel.after", {"endpoint": "embeddings", "cancel_rate": "1", "cancel_after": "decode"},
     "--cancel-after"),
    ({"trace": {"path": "t.jsonl"}, "request": {"endpoint": "completions"}}, "trace.path",
     {"trace": "t.jsonl", "endpoint": "completions"}, "--trace"),
    ({"dataset": {"path": "d"}, "models": {"names": ["a"]}}, "dataset.path",
     {"dataset": "d", "models": "a"}, "--dataset"),
    ({"conversation": {"turns": 2, "turn_tokens": 8, "conversations": 2}, "requests": 4},
     "conversation.conversations", {"conversation": "turns=2,turn_tokens=8,conversations=2",
                                    "requests": "4"}, "--conversation"),
]


@pytest.mark.parametrize("keys,field,flags,named", BROKEN)
def test_a_rule_refuses_a_file_and_the_flags_alike(keys: dict, field: str, flags: dict,
                                                   named: str) -> None:
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict({**BASE, **keys}, "s.toml")
    assert e.value.field == field and str(e.value).startswith(f"s.toml: {field} = ")
    with pytest.raises(UsageError) as u:
        flagged({**BASE, **(BURSTS if "shared_prefix" in keys else {})}, **flags)
    text = str(u.value)
    assert text.startswith(f"{named} '") and field in text and "\n" not in text, text


def test_a_scenario_file_may_hold_what_the_flags_give(tmp_path: Path) -> None:
    """A key the flags set and a file's: the same document, so a file needs no flag."""
    from anvil_metrics.load.options import run_options

    path = tmp_path / "s.toml"
    path.write_text('measurement_protocol = "f"\nsteps = [1, 2]\nstep_duration = "2s"\n'
                    '[cancel]\nrate = 0.5\nafter = "prefill"\n')
    sc = run_options({"scenario": str(path)}, host="http://h", users=None,
                     api_key=None).scenario
    assert (sc.step_users, sc.duration_s, sc.cancel.rate) == ((1, 2), 4.0, 0.5)


def test_agent_keys_go_with_agent_jobs_only_and_are_written_back() -> None:
    agent = {**BASE, "trace": {"path": "a.jsonl", "format": "agent-jsonl", "jobs": 7,
                               "tool_speed": 2, "max_tool_wait": 1.5, "max_idle": 0,
                               "start_at": "sampled", "start_seed": 5},
             "rate": 2, "concurrency": 4}
    sc = scenario_from_dict(agent)
    assert sc.trace is not None and sc.trace.agent and sc.arrivals is not None
    assert (sc.trace.jobs, sc.trace.tool_speed, sc.trace.max_tool_wait_s,
            sc.trace.max_idle_s, sc.load_mode) == (7, 2.0, 1.5, 0.0, "budget")
    assert (sc.trace.start_at, sc.trace.start_seed) == ("sampled", 5)
    assert scenario_from_dict(scenario_to_dict(sc)) == sc
    for doc, key in (({**BASE, "trace": {"path": "a.jsonl", "format": "agent-jsonl",
                                         "limit": 3}}, "trace.limit"),
                     ({**BASE, "trace": {"path": "a.jsonl", "format": "agent-jsonl"},
                       "warmup_requests": 2}, "warmup_requests"),
                     ({**BASE, "trace": {"path": "t.jsonl", "format": "mooncake",
                                         "max_idle": 3}}, "trace.max_idle"),
                     ({**BASE, "trace": {"path": "t.jsonl", "format": "mooncake",
                                         "start_at": "sampled"}}, "trace.start_at"),
                     ({**BASE, "trace": {"path": "a.jsonl", "format": "agent-jsonl",
                                         "start_at": "middle"}}, "trace.start_at"),
                     ({**BASE, "meta": {"gpus": 0}}, "meta.gpus")):
        with pytest.raises(ScenarioError, match=key):
            scenario_from_dict(doc)


def test_trace_speed_with_agent_jobs_starts_them_at_the_traces_own_times() -> None:
    """`trace.speed` beside agent jobs is an open loop of their recorded starts (written
    back, so a worker reads the same plan); beside `rate` it is refused naming it."""
    timed = {**BASE, "trace": {"path": "a.jsonl", "format": "agent-jsonl", "speed": 2}}
    sc = scenario_from_dict(timed)
    assert sc.trace is not None and sc.trace.job_times and sc.trace.speed == 2.0
    assert scenario_from_dict(scenario_to_dict(sc)) == sc
    closed = scenario_from_dict({**BASE, "trace": {"path": "a.jsonl", "format": "agent-jsonl"}})
    assert closed.trace is not None and not closed.trace.job_times
    assert not scenario_from_dict(scenario_to_dict(closed)).trace.job_times  # type: ignore
    with pytest.raises(ScenarioError, match=r"trace.speed = 2.*none beside rate"):
        scenario_from_dict({**timed, "rate": 3})


def test_a_gpu_hour_price_needs_gpus() -> None:
    """$ per million tokens is price × gpus × hours ÷ tokens: a price alone is one line."""
    with pytest.raises(ScenarioError, match=r"meta.gpu_hour_price.*2.5.*beside meta.gpus"):
        scenario_from_dict({**BASE, "meta": {"gpu_hour_price": 2.5}}, "s.toml")
    assert scenario_from_dict({**BASE, "meta": {"gpus": 2, "gpu_hour_price": 2.5}}).meta == {
        "gpus": 2, "gpu_hour_price": 2.5}


def test_the_probes_idle_baseline_goes_with_the_probe_only() -> None:
    with pytest.raises(ScenarioError, match=r"probe_idle = 5 is not allowed; use only beside "
                                            r"probe_rate"):
        scenario_from_dict({**BASE, "probe_idle": 5}, "s.toml")
    assert scenario_from_dict({**BASE, "probe_rate": 2, "probe_idle": 5}).probe_idle == 5
