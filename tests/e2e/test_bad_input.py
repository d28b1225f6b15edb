"""Bad input to `anvil run`: malformed scenario files and flag combinations.

Every case must end with exit code 2 and one line of anvil's own (no traceback) that names
the field or flag, the bad value, and what is allowed — before any load starts. A host that
must answer is the built-in simulator on 127.0.0.1.

How the cases run: the tables of scenario, flag and host cases call the CLI's own entry
point, `anvil_metrics.cli.main.main(argv)` (what `python -m anvil_metrics` runs, then
exits with), in this process, its stdout and stderr captured: the same parsing, checks and
printing, without a new Python process per case (~0.3 CPU-s each, 55 cases). What only a
process shows (the exit status, nothing else on stderr, no traceback) is checked by running
the real CLI (`python -m anvil_metrics run ...`) for one case of each table
(`test_one_case_of_each_table_as_a_real_process`) and for every case here that touches a
file, the network or a server.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import anvil, write_scenario
from simfork import start_simulator

from anvil_metrics.cli.main import main
from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

# nothing listens on the discard port: every scenario case is refused before the host is
# contacted, and the unreachable-host case is refused when it is.
DEAD_HOST = "http://127.0.0.1:9"

def anvil_here(capsys: pytest.CaptureFixture[str], *args: str
               ) -> subprocess.CompletedProcess:
    """`anvil ARGS` through the CLI's entry point in this process: its exit code (returned,
    or argparse's `SystemExit`) and what it printed. `main` installs its SIGTERM handler;
    pytest's is put back."""
    capsys.readouterr()  # what came before is not this command's
    handler = signal.getsignal(signal.SIGTERM)
    try:
        code = main(list(args))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        signal.signal(signal.SIGTERM, handler)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["anvil", *args], code, out.out, out.err)


BASE = """\
measurement_protocol = "bad-input"
concurrency = 2
requests = 4
max_tokens = 64
context_tokens = 8192
max_context_tokens = 8192
context_seed = 0

[context_distribution]
300 = 4
"""

FAST_SIM = ("--prefill-ms", "5", "--reasoning-tokens", "2", "--content-tokens", "2",
            "--interval-ms", "1", "--max-context", "8192")


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The single non-empty line anvil wrote on stderr; nothing looks like a traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\n{out}"
    assert "Traceback" not in out, out
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{proc.stderr}"
    assert lines[0].startswith("anvil: "), lines[0]
    return lines[0]


def assert_names(line: str, field: str, value: str, allowed: str) -> None:
    assert field in line, f"field {field!r} not named in: {line}"
    assert value in line, f"value {value!r} not named in: {line}"
    assert allowed in line, f"allowed part {allowed!r} not in: {line}"


def no_load(results: Path) -> None:
    """No request was sent and no raw record written (a run folder may exist)."""
    assert not list(results.glob("*/requests.jsonl")), list(results.glob("*/*"))


_NEXT_LINE = BASE.count("\n") + 1

# (id, scenario text, field, value, allowed): the value and allowed substrings are derived
# from the case: repr() of what TOML parsed, and a word of the allowed part.
SCENARIO_CASES = [
    # the bad line is the first one after BASE; tomllib names it by number
    ("toml-syntax", BASE + "concurrency = = 3\n", "s.toml", f"line {_NEXT_LINE}",
     "not valid TOML"),
    ("toml-unclosed-table", BASE + "[serve_flags\n", "s.toml", f"line {_NEXT_LINE}",
     "not valid TOML"),
    ("unknown-top-key", BASE.replace("context_seed = 0", 'colour = "red"'),
     "colour", repr("red"), "one of the keys"),
    ("unknown-serve-flag", BASE + "[serve_flags]\nturbo = true\n",
     "serve_flags.turbo", repr(True), "one of the keys"),
    ("unknown-request-key", BASE + "[request]\nstream = false\n",
     "request.stream", repr(False), "one of the keys"),
    ("unknown-timeouts-key", BASE + "[timeouts]\nread_s = 5\n",
     "timeouts.read_s", repr(5), "one of the keys"),
    ("unknown-shared-prefix-key",
     BASE + "[serve_flags]\nshared_prefix_burst = true\n[shared_prefix]\nprefix_len = 128\n",
     "shared_prefix.prefix_len", repr(128), "one of the keys"),
    ("unknown-meta-key", BASE + '[meta]\ncolour = "blue"\n',
     "meta.colour", repr("blue"), "one of the keys"),
    ("string-concurrency", BASE.replace("concurrency = 2", 'concurrency = "2"'),
     "concurrency", repr("2"), ">= 1"),
    ("bool-requests", BASE.replace("requests = 4", "requests = true"),
     "requests", repr(True), ">= 1"),
    ("float-requests", BASE.replace("requests = 4", "requests = 2.5"),
     "requests", repr(2.5), "whole number"),
    ("requests-zero", BASE.replace("requests = 4", "requests = 0"),
     "requests", "requests = 0", ">= 1"),
    ("concurrency-negative", BASE.replace("concurrency = 2", "concurrency = -1"),
     "concurrency", repr(-1), ">= 1"),
    ("max-tokens-zero", BASE.replace("max_tokens = 64", "max_tokens = 0"),
     "max_tokens", "max_tokens = 0", ">= 1"),
    ("context-seed-negative", BASE.replace("context_seed = 0", "context_seed = -3"),
     "context_seed", repr(-3), ">= 0"),
    ("dist-key-abc", BASE.replace("300 = 4", "abc = 4"),
     "context_distribution", "abc", "token counts"),
    ("dist-key-zero", BASE.replace("300 = 4", '"0" = 4'),
     "context_distribution.0", repr(4), ">= 1"),
    ("dist-key-negative", BASE.replace("300 = 4", '"-5" = 4'),
     "context_distribution.-5", repr(4), ">= 1"),
    ("dist-count-zero", BASE.replace("300 = 4", "300 = 0"),
     "context_distribution.300", repr(0), "request count >= 1"),
    ("dist-count-string", BASE.replace("300 = 4", '300 = "four"'),
     "context_distribution.300", repr("four"), "request count >= 1"),
    ("dist-not-a-table", BASE.replace("[context_distribution]\n300 = 4\n",
                                      "context_distribution = 300\n"),
     "context_distribution", repr(300), "a table"),
    ("planned-size-plus-max-tokens-too-big", BASE.replace("300 = 4", "8190 = 4"),
     "context_distribution.8190", "8190 + 64 = 8254", "<= max_context_tokens"),
    ("connect-timeout-zero", BASE + "[timeouts]\nconnect_s = 0\n",
     "timeouts.connect_s", repr(0), "> 0"),
    ("connect-timeout-negative", BASE + "[timeouts]\nconnect_s = -1.5\n",
     "timeouts.connect_s", repr(-1.5), "> 0"),
    ("connect-timeout-string", BASE + '[timeouts]\nconnect_s = "60"\n',
     "timeouts.connect_s", repr("60"), "seconds > 0"),
    ("reasoning-effort-extreme", BASE + '[serve_flags]\nreasoning_effort = "extreme"\n',
     "serve_flags.reasoning_effort", repr("extreme"), "one of"),
    ("thinking-mode-maybe", BASE + '[serve_flags]\nthinking_mode = "maybe"\n',
     "serve_flags.thinking_mode", repr("maybe"), "one of"),
    ("no-thinking-not-bool", BASE + '[serve_flags]\nno_thinking = "yes"\n',
     "serve_flags.no_thinking", repr("yes"), "true or false"),
    ("no-thinking-with-thinking-on",
     BASE + '[serve_flags]\nthinking_mode = "on"\nno_thinking = true\n',
     "serve_flags.no_thinking", repr(True), "thinking_mode = 'on'"),
    ("extra-body-overrides-model", BASE + '[request]\nextra_body = { model = "other" }\n',
     "request.extra_body.model", repr("other"), "no key anvil sets"),
    ("extra-body-overrides-stream", BASE + "[request]\nextra_body = { stream = false }\n",
     "request.extra_body.stream", repr(False), "no key anvil sets"),
    ("extra-body-not-table", BASE + '[request]\nextra_body = "{}"\n',
     "request.extra_body", repr("{}"), "a table"),
    ("include-usage-not-bool", BASE + "[request]\ninclude_usage = 1\n",
     "request.include_usage", repr(1), "true or false"),
    ("meta-model-not-string", BASE + "[meta]\nmodel = 7\n",
     "meta.model", repr(7), "a string"),
    ("protocol-missing", BASE.replace('measurement_protocol = "bad-input"\n', ""),
     "measurement_protocol", repr(None), "non-empty string"),
    ("shared-prefix-without-burst", BASE + "[shared_prefix]\nprefix_tokens = 128\n",
     "shared_prefix", "'prefix_tokens': 128", "shared_prefix_burst = true"),
    ("shared-prefix-too-short",
     BASE + "[serve_flags]\nshared_prefix_burst = true\n[shared_prefix]\nprefix_tokens = 8\n",
     "shared_prefix.prefix_tokens", repr(8), ">= 64"),
    ("shared-prefix-longer-than-prompt",
     BASE + "[serve_flags]\nshared_prefix_burst = true\n[shared_prefix]\nprefix_tokens = 290\n",
     "shared_prefix.prefix_tokens", repr(290), "at most the smallest planned size"),
]


@pytest.mark.parametrize("text,field,value,allowed",
                         [c[1:] for c in SCENARIO_CASES], ids=[c[0] for c in SCENARIO_CASES])
def test_bad_scenario_is_one_line_exit_2(tmp_path: Path, capsys, text: str, field: str,
                                         value: str, allowed: str) -> None:
    sc = write_scenario(tmp_path / "s.toml", text)
    res = tmp_path / "res"
    proc = anvil_here(capsys, "run", str(sc), "--host", DEAD_HOST, "--results-dir", str(res))
    line = one_line(proc)
    assert_names(line, field, value, allowed)
    assert not res.exists(), "a scenario error must come before any run folder"


def test_nan_timeout_is_refused(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", BASE + "[timeouts]\nconnect_s = nan\n")
    res = tmp_path / "res"
    proc = anvil("run", str(sc), "--host", DEAD_HOST, "--results-dir", str(res))
    line = one_line(proc)
    assert_names(line, "timeouts.connect_s", "nan", "> 0")
    assert not res.exists()


# (id, extra argv, field/flag, value, allowed)
FLAG_CASES = [
    ("users-zero", ["--users", "0"], "--users", "'0'", ">= 1"),
    ("users-negative", ["-u", "-3"], "--users", "'-3'", ">= 1"),
    ("requests-abc", ["--requests", "abc"], "--requests", "'abc'", ">= 1"),
    ("requests-float", ["--requests", "2.5"], "--requests", "'2.5'", "whole number"),
    ("max-tokens-negative", ["--max-tokens", "-5"], "--max-tokens", "'-5'", ">= 1"),
    ("max-tokens-too-big-for-scenario", ["--max-tokens", "8000"], "--max-tokens", "8000",
     "at most 7892"),
    ("warmup-negative", ["--warmup-requests", "-1"], "--warmup-requests", "'-1'", ">= 0"),
    ("run-time-zero", ["--run-time", "0"], "--run-time", "'0'", "> 0"),
    ("run-time-nan", ["--run-time", "nan"], "--run-time", "'nan'", "> 0"),
    ("run-time-text", ["--run-time", "10m"], "--run-time", "'10m'", "seconds > 0"),
    ("run-nonce-bad", ["--run-nonce", "bad nonce!"], "--run-nonce", "'bad nonce!'",
     "letters, digits"),
    ("run-nonce-too-long", ["--run-nonce", "a" * 33], "--run-nonce", "a" * 33, "1-32"),
    ("tokenizer-missing", ["--tokenizer", "/nonexistent/tokenizer.json"], "--tokenizer",
     "/nonexistent/tokenizer.json", "tokenizer.json"),
    ("unknown-flag", ["--concurrency", "3"], "unrecognized", "--concurrency", "--help"),
    ("users-missing-value", ["--users"], "--users", "argument", "expected one argument"),
]


@pytest.mark.parametrize("argv,field,value,allowed", [c[1:] for c in FLAG_CASES],
                         ids=[c[0] for c in FLAG_CASES])
def test_bad_flag_is_one_line_exit_2(tmp_path: Path, capsys, argv: list[str], field: str,
                                     value: str, allowed: str) -> None:
    sc = write_scenario(tmp_path / "s.toml", BASE)
    res = tmp_path / "res"
    proc = anvil_here(capsys, "run", str(sc), "--host", DEAD_HOST, "--results-dir", str(res),
                      *argv)
    line = one_line(proc)
    assert_names(line, field, value, allowed)
    assert not res.exists(), "a flag error must come before any run folder"


HOST_CASES = [
    ("ftp-scheme", "ftp://x", "http(s)://"),
    ("no-scheme", "127.0.0.1:8000", "http(s)://"),
    ("bad-port", "http://127.0.0.1:notaport", "http(s)://"),
    ("no-hostname", "http://:8000", "http(s)://"),
]


@pytest.mark.parametrize("host,allowed", [c[1:] for c in HOST_CASES],
                         ids=[c[0] for c in HOST_CASES])
def test_bad_host_url_is_one_line_exit_2(tmp_path: Path, capsys, host: str, allowed: str
                                         ) -> None:
    sc = write_scenario(tmp_path / "s.toml", BASE)
    res = tmp_path / "res"
    proc = anvil_here(capsys, "run", str(sc), "--host", host, "--results-dir", str(res))
    line = one_line(proc)
    assert_names(line, "--host", repr(host), allowed)
    assert not res.exists()


REAL_PROCESS_CASES = [next(c for c in table if c[0] == name) for table, name in (
    (SCENARIO_CASES, "toml-syntax"), (SCENARIO_CASES, "string-concurrency"),
    (FLAG_CASES, "users-zero"), (FLAG_CASES, "unknown-flag"), (HOST_CASES, "ftp-scheme"))]


@pytest.mark.parametrize("case", REAL_PROCESS_CASES, ids=[c[0] for c in REAL_PROCESS_CASES])
def test_one_case_of_each_table_as_a_real_process(tmp_path: Path, case: tuple) -> None:
    """The tables above as a user meets them: a process of its own, exit status 2, one
    line on stderr and no traceback, whichever of the CLI's paths refused it (TOML, a field
    check, argparse's type, argparse itself, the URL)."""
    res = tmp_path / "res"
    if case in SCENARIO_CASES:
        _, text, field, value, allowed = case
        argv = [str(write_scenario(tmp_path / "s.toml", text)), "--host", DEAD_HOST]
    elif case in FLAG_CASES:
        _, extra, field, value, allowed = case
        argv = [str(write_scenario(tmp_path / "s.toml", BASE)), "--host", DEAD_HOST, *extra]
    else:
        _, host, allowed = case
        field, value = "--host", repr(host)
        argv = [str(write_scenario(tmp_path / "s.toml", BASE)), "--host", host]
    line = one_line(anvil("run", *argv, "--results-dir", str(res)))
    assert_names(line, field, value, allowed)
    assert not res.exists()


def test_missing_scenario_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    proc = anvil("run", str(missing), "--host", DEAD_HOST, "--results-dir", str(tmp_path / "r"))
    line = one_line(proc)
    assert_names(line, "scenario file", repr(str(missing)), ".toml path")


def test_scenario_is_a_directory(tmp_path: Path) -> None:
    proc = anvil("run", str(tmp_path), "--host", DEAD_HOST, "--results-dir", str(tmp_path / "r"))
    line = one_line(proc)
    assert_names(line, "scenario file", repr(str(tmp_path)), "cannot be read")


def test_unreachable_host(tmp_path: Path) -> None:
    """Nothing listens: one line naming --host and the URL, before any request is sent."""
    sc = write_scenario(tmp_path / "s.toml", BASE)
    res = tmp_path / "res"
    proc = anvil("run", str(sc), "--host", DEAD_HOST, "--results-dir", str(res), timeout=60)
    line = one_line(proc)
    assert_names(line, "--host", "127.0.0.1:9", "server running")
    no_load(res)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """FAST_SIM, for the case and its control below: neither reads the server's state, only
    what its own run says (a simulator ~0.4 CPU-s and ~0.5 s to start)."""
    with start_simulator(list(FAST_SIM)) as started:
        yield started


def test_model_the_server_does_not_serve(sim: SimProcess, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", BASE)
    res = tmp_path / "res"
    proc = anvil("run", str(sc), "--host", sim.url, "--model", "nosuchmodel",
                 "--results-dir", str(res), timeout=60)
    line = one_line(proc)
    assert_names(line, "--model", "nosuchmodel", "sim-model")
    no_load(res)


def test_good_model_against_simulator_runs(sim: SimProcess, tmp_path: Path) -> None:
    """Control for the case above: the served name is accepted and the run completes."""
    sc = write_scenario(tmp_path / "s.toml", BASE)
    proc = anvil("run", str(sc), "--host", sim.url, "--model", "sim-model",
                 "--results-dir", str(tmp_path / "res"), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "completed 4" in proc.stdout
