"""The README's exit-code table, command by command: every `anvil` command is run here (in
process, through the same `main` the console script calls) into each code it can give
without a server, and the codes only a real run gives (3, 4, 130, 143) are named with the
end-to-end test that sees them from a real process.

Why: a script that drives anvil (CI, a campaign wrapper) branches on the exit code; one
command answering 1 where another answers 2 for the same kind of mistake breaks it.
"""

from __future__ import annotations

import shutil
import signal
import socket
from collections.abc import Iterator

import orjson
import pytest
from conftest import REPO
from reportbuild import campaign_folder, request, write_run

from anvil_metrics.cli.main import build_parser, main
from anvil_metrics.errors import ExitCode

SMOKE = str(REPO / "scenarios" / "smoke.toml")
CAMPAIGN = str(REPO / "scenarios" / "campaigns" / "fp8-vs-nvfp4.toml")

# command, argv (`{name}` stands for a file made below), code, a part of the one line said
CASES: list[tuple[str, list[str], ExitCode, str]] = [
    ("run", ["run", "{missing}.toml", "-H", "http://127.0.0.1:9"], ExitCode.USAGE,
     "missing.toml' does not exist"),
    ("run", ["run", SMOKE, "-H", "http://127.0.0.1:9", "--fail-on-error-rate", "1"],
     ExitCode.USAGE, "--fail-on-error-rate '1' is not allowed; expected a fraction >= 0 and < 1"),
    ("postprocess", ["postprocess", "{run}"], ExitCode.OK, ""),
    ("postprocess", ["postprocess", "{empty}"], ExitCode.USAGE, "no requests.jsonl"),
    ("verify", ["verify", "{run}/benchmark.json"], ExitCode.OK, ""),
    ("verify", ["verify", "{altered}"], ExitCode.PROBLEM, "MISMATCH"),
    ("verify", ["verify", "{foreign}"], ExitCode.USAGE, "not an anvil-serving document"),
    ("verify", ["verify", "{missing}.json"], ExitCode.USAGE, "missing.json"),
    # report's 0 draws (seconds of CPU): tests/unit/report/test_build.py
    ("report", ["report", "{empty}"], ExitCode.USAGE, "empty"),
    ("sim", ["sim", "--interval-ms", "-1"], ExitCode.USAGE, "--interval-ms"),
    ("prompts", ["prompts", SMOKE, "-H", "http://127.0.0.1:9", "--context", "lots"],
     ExitCode.USAGE, "--context"),
    ("metrics", ["metrics"], ExitCode.OK, ""),
    ("check", ["check", "json", "-H", "http://127.0.0.1:{dead}"], ExitCode.USAGE,
     "cannot reach http://127.0.0.1:{dead}/v1"),
    ("check", ["check", "nonsense", "-H", "http://127.0.0.1:9"], ExitCode.USAGE, "nonsense"),
    ("capacity", ["capacity", SMOKE, "-H", "http://127.0.0.1:9", "--slo", "warp_ms<=1"],
     ExitCode.USAGE, "warp_ms"),
    ("campaign", ["campaign", "run", CAMPAIGN, "--dry-run", "--results-dir", "{dir}/c"],
     ExitCode.OK, ""),
    ("campaign", ["campaign", "run", "{bad_campaign}"], ExitCode.USAGE, "name"),
    ("summarize", ["summarize", "{campaign}"], ExitCode.OK, ""),
    ("summarize", ["summarize", "{empty}"], ExitCode.USAGE, "empty"),
    ("demo", ["demo", "--no-such-flag"], ExitCode.USAGE, "--no-such-flag"),
    ("compare", ["compare", "{run}", "{run}/benchmark.json"], ExitCode.OK, ""),
    ("compare", ["compare", "{run}", "{missing}"], ExitCode.USAGE, "no benchmark.json there"),
    ("export", ["export", "{run}", "--vllm-json", "{dir}/v.json"], ExitCode.OK, ""),
    ("export", ["export", "{run}"], ExitCode.USAGE, "nothing to write"),
    ("trace", ["trace", "stats", "{trace}"], ExitCode.OK, ""),
    ("trace", ["trace", "stats", "{bad_trace}"], ExitCode.USAGE, "bad.jsonl:2: input_tokens = 0"),
]

# the codes only a real run can give, and the end-to-end test that sees each from a process
FROM_REAL_RUNS = {
    ExitCode.ABORTED: ("tests/e2e/test_abort.py", "assert code == 3"),
    # every measured request failed, or more than --fail-on-error-rate of them
    ExitCode.FAILED: ("tests/e2e/test_exit_codes.py", '("all_failed", anvil_run'),
    ExitCode.SIGINT: ("tests/e2e/test_stop_signals.py", "(signal.SIGINT, 130"),
    ExitCode.SIGTERM: ("tests/e2e/test_stop_signals.py", "(signal.SIGTERM, 143"),
    # a campaign whose run failed: 1, named on stderr
    ExitCode.PROBLEM: ("tests/e2e/test_campaign_run.py", "proc.returncode == 1"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("exit-codes")
    bench = write_run(root / "run", [request(i, 50.0 + i, 10.0) for i in range(5)], 1)
    doc = orjson.loads(bench.read_bytes())
    doc["metrics"]["ttft_p50_ms"] += 1.0
    (root / "altered.json").write_bytes(orjson.dumps(doc))
    (root / "foreign.json").write_bytes(b'{"hello": 1}')
    (root / "empty").mkdir()
    (root / "bad.toml").write_text("name = 5\n")
    line = {"timestamp": 0, "input_tokens": 10, "output_tokens": 2}
    (root / "trace.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    (root / "bad.jsonl").write_bytes(orjson.dumps(line) + b"\n"
                                     + orjson.dumps({**line, "input_tokens": 0}) + b"\n")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    yield {"run": str(root / "run"), "altered": str(root / "altered.json"),
           "foreign": str(root / "foreign.json"), "empty": str(root / "empty"),
           "missing": str(root / "missing"), "bad_campaign": str(root / "bad.toml"),
           "campaign": str(campaign_folder(root / "camp")), "dir": str(root),
           "dead": str(dead), "trace": str(root / "trace.jsonl"),
           "bad_trace": str(root / "bad.jsonl")}
    shutil.rmtree(root, ignore_errors=True)


def exit_code(argv: list[str]) -> int:
    """What `anvil ARGV` exits with: `main`'s return, or argparse's SystemExit."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        for sig, handler in handlers.items():  # main installs its own
            signal.signal(sig, handler)


@pytest.mark.parametrize(("command", "argv", "code", "says"), CASES,
                         ids=[f"{c[0]}-{int(c[2])}-{i}" for i, c in enumerate(CASES)])
def test_each_command_exits_as_the_table_says(files: dict[str, str], capsys,
                                              command: str, argv: list[str], code: ExitCode,
                                              says: str) -> None:
    got = exit_code([a.format(**files) for a in argv])
    out, err = capsys.readouterr()
    assert got == code, (out[-2000:], err[-2000:])
    if code == ExitCode.OK:
        assert "Traceback" not in err
    else:  # says what was wrong (one line per problem: test_bad_input holds each to it)
        assert says.format(**files) in err + out, (out[-2000:], err[-2000:])
        assert "Traceback" not in err


def test_every_command_and_every_code_is_covered() -> None:
    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert {c[0] for c in CASES} == commands
    here = {c[2] for c in CASES}
    for code, (path, line) in FROM_REAL_RUNS.items():
        assert line in (REPO / path).read_text(encoding="utf-8"), (code, path)
    assert here | set(FROM_REAL_RUNS) == set(ExitCode)
