"""`anvil trace stats`: the trace's figures as `load.trace` computes them, as text or JSON,
and a bad flag or line as one line with exit 2."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from tracebuild import mooncake_trace

from anvil_metrics.cli.main import main
from anvil_metrics.load.trace import read_trace, trace_stats


def test_stats_print_the_traces_own_figures(tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.jsonl"
    cached, total = mooncake_trace(path, 300, seed=1)
    assert main(["trace", "stats", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    st = trace_stats(read_trace(path))
    assert out[0].startswith(f"trace {path}: 300 requests over {st.duration_s:.1f} s; mean ")
    assert out[1] == "input tokens  " + "  ".join(f"{k} {v}" for k, v in st.input_tokens.items())
    assert out[3].startswith(f"expected prefix reuse: {cached} of {total} input tokens "
                             f"({100 * cached / total:.1f} %)")
    assert main(["trace", "stats", str(path), "--json", "--trace-limit", "50"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["requests"] == 50
    assert doc["expected_hit_ratio"] == doc["cached_tokens"] / doc["total_input_tokens"]


@pytest.mark.parametrize("argv,says", [
    (["--trace-block", "0"], "--trace-block"),
    (["--trace-format", "parquet"], "--trace-format"),
])
def test_a_bad_flag_is_one_line_exit_2(tmp_path: Path, capsys, argv: list[str],
                                       says: str) -> None:
    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 5)
    with pytest.raises(SystemExit) as e:
        main(["trace", "stats", str(path), *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and err.count("\n") == 1


def test_a_wrong_block_size_names_the_line_and_the_flag(tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 5)
    assert main(["trace", "stats", str(path), "--trace-block", "256"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"anvil: {path}:1: hash_ids = ") and "--trace-block" in err
    assert err.count("\n") == 1


def test_stats_of_a_window_are_those_of_the_requests_a_replay_of_it_sends(tmp_path: Path,
                                                                         capsys) -> None:
    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 300, seed=2)
    assert main(["trace", "stats", str(path), "--json", "--trace-window", "1:3"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    want = trace_stats(read_trace(path, window_s=(1.0, 3.0)))
    assert doc["requests"] == want.requests and doc["duration_s"] == want.duration_s
    assert 0 < doc["requests"] < 300
    with pytest.raises(SystemExit) as exc:
        main(["trace", "stats", str(path), "--trace-window", "3:1"])
    assert exc.value.code == 2


def test_stats_of_agent_jobs_print_agentstats_figures(tmp_path: Path, capsys) -> None:
    from agentgen import agent_jobs, write_weka

    from anvil_metrics.load.agentread import read_jobs
    from anvil_metrics.load.agentstats import agent_stats

    path = write_weka(tmp_path / "w.jsonl", agent_jobs(200, seed=2))
    assert main(["trace", "stats", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    st = agent_stats(read_jobs(path))
    assert out[0] == (f"agent jobs {path}: 200 jobs, {st.sessions} sessions, "
                      f"{st.requests} requests")
    assert out[-1].startswith(f"expected prefix reuse: {st.cached_tokens} of "
                              f"{st.input_tokens} input tokens")
    assert main(["trace", "stats", str(path), "--json", "--trace-limit", "10"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["jobs"] == 10 and doc["expected_reuse"] == (
        doc["cached_tokens"] / doc["input_tokens"])
    assert main(["trace", "stats", str(path), "--trace-window", "0:5"]) == 2
    err = capsys.readouterr().err
    assert "--trace-window: not for a trace of agent jobs" in err and err.count("\n") == 1
