"""A request mix against the simulator: what it received is the plan's draw, within the
binomial bound of the weights over 2,000 requests, and `benchmark.json` says so.

The simulator serves three names (`--alias`, as a server serves LoRA adapters) and logs
every chat request's model and max_tokens (`--log-requests`): the truth. The run's records
name each request's class and model; each is the plan's draw for its request index
(`Mix.class_of`, `model_of`), each class's body carries its own max_tokens and planned size,
and the `mix` block's counts are the simulator's. `anvil verify` recomputes the block, and
refuses it altered. Bad tables are one line and exit 2.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.load.mix import parse_mix
from anvil_metrics.load.scenario import load_scenario

pytestmark = pytest.mark.e2e

REQUESTS = 2000
Z = 3.29  # two-sided 99.9 %
SCENARIO = f"""
measurement_protocol = "mix"
requests = {REQUESTS}
warmup_requests = 2
concurrency = 8
max_tokens = 2
context_tokens = 256
max_context_tokens = 2048
context_seed = 11

[[request_class]]
name = "chat"
weight = 3

[[request_class]]
name = "summary"
weight = 1
context_tokens = 600
max_tokens = 5
model = "lora-b"

[models]
names = ["sim-model", "lora-a"]
assignment = "random"
"""


def within_binomial(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= Z * math.sqrt(n * p * (1 - p))


def test_what_the_server_received_is_the_plans_draw(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    scenario = write_scenario(tmp_path / "mix.toml", SCENARIO)
    with start_simulator(["--alias", "lora-a", "--alias", "lora-b", "--prefill-ms", "0",
                          "--interval-ms", "0", "--reasoning-tokens", "0",
                          "--log-requests", str(log)]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir",
                     str(tmp_path / "r"), "--no-server-metrics")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bench = result_path(proc)
    doc = load_json(bench)
    mix = load_scenario(scenario).mix
    assert mix is not None

    # the simulator's truth: every request (warm-ups too) with its class's max_tokens
    received = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert len(received) == REQUESTS + 2
    got = Counter((r["model"], r["max_tokens"]) for r in received)
    assert set(got) == {("sim-model", 2), ("lora-a", 2), ("lora-b", 5)}
    measured = [r for r in raw_lines(bench.parent)
                if r.get("type") == "request" and not r["warmup"]]
    assert len(measured) == REQUESTS and all(r["failure"] is None for r in measured)
    # each record's class and model are the plan's draw for its index
    for r in measured:
        klass = mix.class_of(r["request_index"])
        assert r["extra"]["class_index"] == klass
        assert r["extra"]["model_index"] == mix.model_of(r["request_index"], klass)
        assert r["planned_context_tokens"] == (600 if klass == 1 else 254)  # 256 - max_tokens
    classes = Counter(r["extra"]["class_index"] for r in measured)
    models = Counter(r["extra"]["model_index"] for r in measured)
    # the weights, within the binomial bound over 2,000 draws (3:1; a class's own model)
    assert within_binomial(classes[0], REQUESTS, 0.75), classes
    for i, p in enumerate(mix.model_shares()):
        assert within_binomial(models[i], REQUESTS, p), models
    assert mix.model_shares() == pytest.approx([0.375, 0.375, 0.25])

    block = doc["mix"]
    assert [c["name"] for c in block["classes"]] == ["chat", "summary"]
    assert [m["name"] for m in block["models"]] == ["sim-model", "lora-a", "lora-b"]
    assert [c["requests"] for c in block["classes"]] == [classes[0], classes[1]]
    assert [m["requests"] for m in block["models"]] == [models[0], models[1], models[2]]
    assert block["classes"][1]["share"] == classes[1] / REQUESTS
    assert block["classes"][0]["expected_share"] == 0.75
    # each class's body was its own: the summary's prompt is sized 600, its answer 5 tokens
    summary = block["classes"][1]
    assert summary["output_tokens_mean"] == 5.0
    assert abs(summary["prompt_tokens_mean"] - 600) <= 1
    assert doc["context_distribution"] == {"254": classes[0], "600": classes[1]}
    rows = doc["request_timings"]
    assert Counter(row["class_index"] for row in rows) == classes
    assert "class" in proc.stdout and "summary" in proc.stdout and "lora-b" in proc.stdout

    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc["mix"]["models"][0]["requests"] += 1
    altered = tmp_path / "altered.json"
    altered.write_bytes(orjson.dumps(doc))
    bad = anvil("verify", str(altered))
    assert bad.returncode != 0
    assert "mix.models[0].requests" in bad.stdout + bad.stderr


@pytest.mark.parametrize("table,named", [
    ('[[request_class]]\nname = "a"\nweight = 0\n', "request_class[0].weight = 0"),
    ('[models]\nnames = ["x"]\nassignment = "weighted"\n', "models.assignment = 'weighted'"),
])
def test_a_bad_mix_is_one_line_and_exit_2(tmp_path: Path, table: str, named: str) -> None:
    scenario = write_scenario(tmp_path / "bad.toml", 'measurement_protocol = "m"\n' + table)
    proc = anvil("run", str(scenario), "-H", "http://127.0.0.1:9", "--results-dir",
                 str(tmp_path / "r"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_model_the_server_does_not_serve_stops_the_run_before_any_load(
        tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "m.toml", 'measurement_protocol = "m"\nrequests = 2\n'
                              'context_tokens = 256\n[models]\nnames = ["sim-model", "nope"]\n')
    with start_simulator(["--log-requests", str(tmp_path / "log")]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir",
                     str(tmp_path / "r"), "--no-server-metrics")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "nope" in proc.stderr
    assert not (tmp_path / "log").exists() or (tmp_path / "log").read_bytes() == b""


CONVERSATIONS = """
measurement_protocol = "mix-conversations"
concurrency = 4
max_tokens = 4
context_tokens = 4096
max_context_tokens = 4096

[conversation]
turns = 3
turn_tokens = 64
conversations = 8
"""  # its models come by flag: --models sim-model,lora-a,lora-b --model-assignment random


def test_a_conversation_keeps_its_model(tmp_path: Path) -> None:
    """Every turn of a conversation names the model its number drew (the simulator's log,
    by session header), and its records say so."""
    log = tmp_path / "requests.log"
    scenario = write_scenario(tmp_path / "talk.toml", CONVERSATIONS)
    with start_simulator(["--alias", "lora-a", "--alias", "lora-b", "--prefill-ms", "0",
                          "--interval-ms", "0", "--log-requests", str(log)]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir",
                     str(tmp_path / "r"), "--no-server-metrics",
                     "--models", "sim-model,lora-a,lora-b", "--model-assignment", "random")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mix = parse_mix(None, {"names": ["sim-model", "lora-a", "lora-b"], "assignment": "random"},
                    0, None)
    assert mix is not None
    by_session: dict[str, set[str]] = {}
    for line in log.read_bytes().splitlines():
        r = orjson.loads(line)
        by_session.setdefault(r["session"], set()).add(r["model"])
    assert len(by_session) == 8 and all(len(m) == 1 for m in by_session.values())
    records = [r for r in raw_lines(result_path(proc).parent) if r.get("type") == "request"]
    assert len(records) == 24
    for r in records:
        conv = r["extra"]["conversation"]
        assert r["extra"]["model_index"] == mix.model_of(conv, None)
        (session,) = [s for s in by_session if s.endswith(f"-{conv}")]
        assert by_session[session] == {mix.model_names[r["extra"]["model_index"]]}
    doc = load_json(result_path(proc))
    assert sum(m["requests"] for m in doc["mix"]["models"]) == 24
    assert doc["mix"]["classes"] == []


def test_workers_send_the_same_draws(tmp_path: Path) -> None:
    """With `--processes 2` each worker builds its requests' bodies from the scenario it
    was sent: every record's class and model are the plan's draw for its index, and each
    request the simulator received carries its class's max_tokens and model."""
    log = tmp_path / "requests.log"
    scenario = write_scenario(tmp_path / "mix.toml", SCENARIO.replace(
        f"requests = {REQUESTS}", "requests = 120"))
    with start_simulator(["--alias", "lora-a", "--alias", "lora-b", "--prefill-ms", "0",
                          "--interval-ms", "0", "--reasoning-tokens", "0",
                          "--log-requests", str(log)]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir",
                     str(tmp_path / "r"), "--no-server-metrics", "--processes", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mix = load_scenario(scenario).mix
    assert mix is not None
    measured = [r for r in raw_lines(result_path(proc).parent)
                if r.get("type") == "request" and not r["warmup"]]
    assert len(measured) == 120 and len({r["worker"] for r in measured}) == 2
    want: Counter = Counter()
    for r in measured:
        klass = mix.class_of(r["request_index"])
        model = mix.model_of(r["request_index"], klass)
        assert (r["extra"]["class_index"], r["extra"]["model_index"]) == (klass, model)
        want[(mix.model_names[model], 5 if klass == 1 else 2)] += 1
    received = Counter((r["model"], r["max_tokens"])
                       for r in map(orjson.loads, log.read_bytes().splitlines()))
    # every measured request as its record says, and the two warm-ups beside them
    assert not want - received and sum((received - want).values()) == 2


SOURCES = """
measurement_protocol = "mix-sources"
requests = 60
warmup_requests = 0
concurrency = 4
max_tokens = 3
context_tokens = 512
max_context_tokens = 4096
context_seed = 5

[[request_class]]
name = "planned"
weight = 1

[[request_class]]
name = "questions"
weight = 1
dataset = "{dataset}"
max_tokens = 4

[[request_class]]
name = "replayed"
weight = 1
trace = "{trace}"
"""


def _sources(tmp_path: Path) -> tuple[Path, list[str], list[dict]]:
    """A scenario whose classes draw from a dataset and a trace, and those two."""
    questions = [f"Question {i}: " + "what lies under the sea " * (6 + i) for i in range(5)]
    shapes = [{"timestamp": 100 * i, "input_length": 600 + 100 * i, "output_length": 5 + i,
               "hash_ids": [10 * i, 10 * i + 1]} for i in range(4)]
    (tmp_path / "ds.jsonl").write_bytes(b"".join(orjson.dumps({"prompt": q}) + b"\n"
                                                 for q in questions))
    (tmp_path / "tr.jsonl").write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in shapes))
    scenario = write_scenario(tmp_path / "src.toml", SOURCES.format(
        dataset=tmp_path / "ds.jsonl", trace=tmp_path / "tr.jsonl"))
    return scenario, questions, shapes


def test_classes_take_prompts_from_a_dataset_and_shapes_from_a_trace(tmp_path: Path) -> None:
    """On two workers: request k of the dataset class sends entry k mod 5's question as it
    is; of the trace class, entry k mod 4's blocks, sized to its input length, and its
    output length; the planned class its planned size. The simulator's log is the truth."""
    from anvil_metrics.sim.requestlog import message_digest

    scenario, questions, shapes = _sources(tmp_path)
    log = tmp_path / "requests.log"
    with start_simulator(["--prefill-ms", "0", "--interval-ms", "0", "--reasoning-tokens",
                          "0", "--log-requests", str(log)]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir",
                     str(tmp_path / "r"), "--no-server-metrics", "--processes", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load_json(result_path(proc))
    mix = load_scenario(scenario).mix
    assert mix is not None and doc["completed"] == 60
    received = Counter(tuple(r["messages"][-1]) + (r["max_tokens"],)
                       for r in map(orjson.loads, log.read_bytes().splitlines())
                       if r["max_tokens"] is not None and r["max_tokens"] >= 3)
    want: Counter = Counter()
    for row in doc["request_timings"]:
        k = row["request_index"]
        assert row["class_index"] == mix.class_of(k)
        if row["class_index"] == 1:  # the dataset's entry, as it is; no planned size
            assert row["planned_context_tokens"] is None and row["output_tokens"] == 4
            want[(*message_digest({"role": "user", "content": questions[k % 5]}), 4)] += 1
        elif row["class_index"] == 2:  # the trace's shape, sized in the server's count
            shape = shapes[k % 4]
            assert row["planned_context_tokens"] == shape["input_length"]
            assert abs(row["prompt_tokens"] - shape["input_length"]) <= 2, row
            assert row["output_tokens"] == shape["output_length"]
        else:
            assert row["planned_context_tokens"] == 512 - 3 and row["output_tokens"] == 3
    assert want and not want - received  # every dataset request reached the server as is
    assert {c["name"]: c["requests"] for c in doc["mix"]["classes"]} == {
        "planned": sum(r["class_index"] == 0 for r in doc["request_timings"]),
        "questions": sum(want.values()),
        "replayed": sum(r["class_index"] == 2 for r in doc["request_timings"])}
    ok = anvil("verify", str(result_path(proc)))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_class_source_that_cannot_be_read_stops_the_run_before_any_load(
        tmp_path: Path) -> None:
    scenario, _, _ = _sources(tmp_path)
    (tmp_path / "tr.jsonl").write_text("{not json\n")
    with start_simulator(["--log-requests", str(tmp_path / "log")]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir",
                     str(tmp_path / "r"), "--no-server-metrics")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "request_class[2].trace ('replayed')" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
