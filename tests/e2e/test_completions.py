"""`--endpoint completions` against the simulator: text prompts to `/v1/completions`, sized
exactly in the server's raw count, stamped against the simulator's own send stamps.

The simulator (`--stamp-send --log-requests`) is the truth: every request it received went
to `/v1/completions` with a `prompt` (no `messages`); each chunk carries its send stamp,
and anvil's stamps are judged by the same rule as a chat stream's (tests/sendstamps.py:
never before the bytes were readable, never later than the run's own loop lag allows).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario
from sendstamps import lag_bounds_ms, readable_ns
from simfork import start_simulator

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "completions"
requests = 24
warmup_requests = 2
concurrency = 4
max_tokens = 12
context_tokens = 2048
max_context_tokens = 4096
{extra}
[context_distribution]
512 = 1
2000 = 1

[request]
endpoint = "{endpoint}"
"""


def test_completions_are_sized_and_stamped_as_the_server_saw_them(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    scenario = write_scenario(tmp_path / "c.toml", SCENARIO.format(extra="",
                                                                   endpoint="completions"))
    with start_simulator(["--stamp-send", "--prefill-ms", "20", "--interval-ms", "4",
                          "--log-requests", str(log)]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir",
                     str(tmp_path / "r"), "--no-server-metrics")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bench = result_path(proc)
    doc = load_json(bench)
    assert doc["endpoint"] == "completions" and doc["completed"] == 24

    received = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    loaded = [r for r in received if r["max_tokens"] == 12]  # not the sizing probes
    assert len(loaded) == 26  # 24 measured and 2 warm-ups
    assert {r["path"] for r in loaded} == {"/v1/completions"}
    assert all(r["messages"] is None and r["prompt"][0] > 0 for r in loaded)

    # sized in the server's raw count, no chat template
    for row in doc["request_timings"]:
        assert row["output_tokens"] == 12 and row["content_chunks"] == 12
        planned = row["planned_context_tokens"]
        assert planned in (512, 2000)
        assert abs(row["prompt_tokens"] - planned) <= 0.005 * planned, row
    assert doc["prompt_calibration"]["method"] == "tokenize"

    # every stamp against the simulator's send stamps, as a chat stream's
    _, worst_ms = lag_bounds_ms(doc)
    records = [r for r in raw_lines(bench.parent) if r.get("type") == "request"]
    assert len(records) == 26
    for rec in records:
        for stamp, readable in readable_ns(rec).items():
            late_ms = (rec[stamp] - readable) / 1e6
            assert 0 <= late_ms <= worst_ms, (stamp, late_ms, worst_ms)
    # Locust's own table names them so
    assert "POST     completions " in (bench.parent / "locust.log").read_text()
    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.parametrize("request_keys,flags,named", [
    ('system_prompt = "be brief"\n', ("--endpoint", "completions"), "request.system_prompt"),
    ("", ("--endpoint", "embeddings"),
     "--endpoint 'embeddings' is not allowed; expected one of chat, completions"),
    ("", ("--endpoint", "completions", "--conversation", "turns=2,turn_tokens=64"),
     "conversation"),
])
def test_what_completions_cannot_carry_is_one_line_and_exit_2(
        tmp_path: Path, request_keys: str, flags: tuple, named: str) -> None:
    text = SCENARIO.format(extra="", endpoint="chat").replace(
        "[request]\n", "[request]\n" + request_keys)
    scenario = write_scenario(tmp_path / "c.toml", text)
    proc = anvil("run", str(scenario), "-H", "http://127.0.0.1:9", "--results-dir",
                 str(tmp_path / "r"), *flags)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
