"""Prompt sizes hit their plan on servers that count tokens differently: the simulator's
two non-word tokenizer rules, at 4k and 32k planned tokens (chat template included)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from conftest import anvil, load_json, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "sizing"
concurrency = 2
requests = 4
max_tokens = 16
context_tokens = 40000
max_context_tokens = 40000
[context_distribution]
4096 = 2
32768 = 2
"""


@pytest.fixture(scope="module")
def sims() -> Iterator[Callable[[str, str], SimProcess]]:
    """`sims(rule, method)`: the module's simulator counting by tokenizer rule `rule`, with
    vLLM's /tokenize (`method` "tokenize") or without any (`--no-tokenize`: "probe"), started
    the first time a test asks for it; all stop at the end of the module. Shared because
    `anvil prompts` asks the same server as a run's sizing does (`/tokenize`), and a run
    here leaves nothing a later count could see: /tokenize keeps no state, probes and
    requests have a head of their own (the run's nonce), and each test its results folder."""
    started: dict[tuple[str, str], SimProcess] = {}
    with ExitStack() as stack:
        def get(rule: str, method: str) -> SimProcess:
            if (rule, method) not in started:
                extra = ("--no-tokenize",) if method == "probe" else ()
                started[rule, method] = stack.enter_context(start_simulator([
                    "--tokenizer", rule, "--max-context", "40000", "--prefill-ms", "5",
                    "--reasoning-tokens", "2", "--content-tokens", "3", "--interval-ms", "1",
                    *extra]))
            return started[rule, method]

        yield get


@pytest.mark.parametrize("rule,method", [("words4", "tokenize"), ("syllable3", "tokenize"),
                                         ("words4", "probe"), ("syllable3", "probe")])
def test_planned_vs_counted_within_half_a_percent(sims, tmp_path: Path, rule: str,
                                                  method: str) -> None:
    """Counted by the server's /tokenize where it has one (vLLM), else by max_tokens=1
    probes (`--no-tokenize`, as a server whose tokenize skips the chat template)."""
    sim = sims(rule, method)
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    # the server's metrics unscraped: no figure of theirs is read here, and the sampler is
    # one more process per run
    proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path),
                 "--no-server-metrics")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load_json(result_path(proc))
    assert doc["completed"] == 4
    for r in doc["request_timings"]:
        err_pct = abs(r["prompt_tokens"] - r["planned_context_tokens"]) / \
            r["planned_context_tokens"] * 100
        print(f"{rule}: planned {r['planned_context_tokens']} counted {r['prompt_tokens']} "
              f"({err_pct:.3f} %)")
        assert err_pct <= 0.5, r
    assert doc["prompt_calibration"]["method"] == method
    assert doc["prompt_calibration"]["planned_vs_counted_error_pct_max"] <= 0.5
    assert verify_benchmark(doc) == []


def test_anvil_prompts_reports_planned_vs_counted(sims) -> None:
    sim = sims("syllable3", "tokenize")  # counted by /tokenize: no prefill is ever asked for
    proc = anvil("prompts", "--host", sim.url, "--tokens", "4096,20000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    assert [int(r[0]) for r in rows] == [4096, 20000]
    for planned, counted, err, _build in rows:
        assert abs(int(counted) - int(planned)) / int(planned) * 100 <= 0.5
        assert abs(float(err)) <= 0.5
    bad = anvil("prompts", "--host", sim.url, "--tokens", "4096,x")
    assert bad.returncode == 2 and "--tokens" in bad.stderr and "Traceback" not in bad.stderr
