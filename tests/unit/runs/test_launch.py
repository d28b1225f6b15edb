"""launch: `anvil run`'s Locust command line, its run folder, the child it starts (the
host and key by environment, never on the command line), the plan in words and the
summary of a benchmark.

Why: a key on the command line is visible to every user of the machine (`ps`); a request
count left off the Locust command line would run a different plan than the one checked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.errors import UsageError
from anvil_metrics.load.arrivals import ArrivalPlan
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.load.trace import TracePlan
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.runs import launch


def _sc(**kw: object) -> Scenario:
    return Scenario(measurement_protocol="p", **kw)


def test_the_locust_command_line_holds_the_plan(tmp_path: Path) -> None:
    run_dir = tmp_path / "r" / "benchmark-x"
    argv = launch.locust_argv(_sc(requests=12), "s.toml", 4, run_dir,
                              values={"model": "m", "api_key": "sk-secret"},
                              run_time_s=2.5, processes=3)
    assert argv[:5] == [sys.executable, "-m", "anvil_metrics.runs.locustmain", "-f",
                        str(launch.LOCUSTFILE)]
    assert argv[argv.index("-u") + 1] == "4" and argv[argv.index("-r") + 1] == "4"
    assert argv[argv.index("--requests") + 1] == "12"
    assert argv[argv.index("--scenario") + 1] == "s.toml"
    assert argv[argv.index("--run-dir") + 1] == str(run_dir)
    assert argv[argv.index("--csv") + 1] == str(run_dir / "locust")
    assert argv[argv.index("--run-time") + 1] == "3s"  # rounded up to whole seconds
    assert argv[argv.index("--processes") + 1] == "3"
    assert "sk-secret" not in " ".join(argv)
    single = launch.locust_argv(_sc(requests=1), "s.toml", 1, run_dir)
    assert "--processes" not in single and "--run-time" not in single


def test_prepare_run_checks_the_url_and_the_folder(tmp_path: Path) -> None:
    run_dir = launch.prepare_run("http://127.0.0.1:9", str(tmp_path / "results"))
    assert run_dir.is_dir() and run_dir.parent == tmp_path / "results"
    with pytest.raises(UsageError, match="is not a usable URL"):
        launch.prepare_run("ftp://h", str(tmp_path))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match=r"^--results-dir '.*file' cannot hold run folders"):
        launch.prepare_run("http://127.0.0.1:9", str(blocker))


def test_the_child_gets_the_host_and_key_by_environment(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    script = ("import os, json, sys; d = sys.argv[1]; "
              "open(d + '/benchmark.json', 'w').write('{}'); "
              "json.dump({'message': os.environ['LOCUST_HOST'] + ' '"
              " + os.environ['ANVIL_API_KEY'] + ' ' + ' '.join(sys.argv)}, "
              "open(d + '/error.json', 'w')); print('from locust'); sys.exit(3)")

    def argv(sc: Scenario, path: str, users: int, run_dir: Path, **kw: object) -> list[str]:
        return [sys.executable, "-c", script, str(run_dir)]

    monkeypatch.setattr(launch, "locust_argv", argv)
    result = launch.run_scenario(_sc(requests=1), "s.toml", "http://u:pw@127.0.0.1:9",
                                 users=1, run_dir=tmp_path, api_key="sk-k")
    assert result.locust_exit_code == 3
    assert result.benchmark_path == tmp_path / "benchmark.json"
    assert result.log_path.read_text() == "from locust\n"
    host, key, args = result.error.split(" ", 2)
    assert (host, key) == ("http://u:pw@127.0.0.1:9", "sk-k")
    assert "pw" not in args and "sk-k" not in args


@pytest.mark.parametrize(("sc", "users", "want"), [
    (_sc(requests=10, warmup_requests=2), 4, "10 requests (2 warm-up), 4 users back to back,"),
    (_sc(requests=5, duration_s=30.0), 1,
     "5 requests (at most 30 s) (0 warm-up), 1 users back to back,"),
    (_sc(duration_s=60.0, arrivals=ArrivalPlan(2.5)), 8,
     "for 60 s (0 warm-up), poisson arrivals at 2.5 requests/s, at most 8 in flight,"),
    (_sc(duration_s=20.0, step_users=(1, 4), step_duration_s=10.0), 4,
     "for 20 s (0 warm-up), steps of 1, 4 users back to back, 10 s each,"),
    (_sc(), 2, "until stopped (Ctrl-C) (0 warm-up), 2 users back to back,"),
    (_sc(trace=TracePlan("/d/jobs.jsonl", agent=True, jobs=60)), 16,
     "60 jobs (0 warm-up), agent jobs of jobs.jsonl, 16 at once,"),
    (_sc(trace=TracePlan("/d/jobs.jsonl", agent=True, jobs=60, start_at="sampled")), 16,
     "60 jobs (each at a sampled turn, primed by one warm-up), agent jobs of "
     "jobs.jsonl, 16 at once,"),
])
def test_plan_text(sc: Scenario, users: int, want: str) -> None:
    assert launch.plan_text(sc, users) == want


def test_summary_lines_of_a_built_document(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    write_raw(path, HEADER, [completed(0), completed(1), failed(2)])
    doc = build_benchmark(read_raw(path))
    lines = launch.summary_lines(orjson.loads(orjson.dumps(doc)))
    assert lines[0].startswith(f"run {HEADER['run_id']}  model None")
    assert "requests 3  completed 2  failed 1" in lines[1] and lines[1].endswith("[PARTIAL]")
    assert lines[2].split() == ["metric", "p50", "p95", "unit"]
    assert any(line.startswith("failure #2: http_error 503 503 busy") for line in lines)
    assert len(lines) >= 3 + len(launch.SUMMARY_ROWS)
