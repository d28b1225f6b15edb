"""Shared fixtures: real processes on 127.0.0.1, always stopped by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import claims

# Locust first: its import-time gevent monkey-patching must happen before any test starts a
# thread or takes an import lock, as in a Locust process. Imported later, from inside a test
# (a module that imports Locust lazily), the patching can deadlock the import system.
import locust  # noqa: F401, I001
import orjson
import pytest
import shards
from simfork import close_helper, start_simulator

from anvil_metrics.runs.simproc import SimProcess

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Two settings for the session: the test files this process runs, when `shards.py`
    shares them out (`claims.py`); and, where `PYTHONDONTWRITEBYTECODE` is set (this VM sets
    it), one bytecode cache for the processes the tests start (simulator, `anvil`, Locust,
    workers: hundreds of them), outside the source tree (`shards.bytecode_folder`: in the
    venv, kept; elsewhere a temporary folder removed at the end).

    Why the cache: without it every child recompiled each anvil module it imported from
    source, ~0.1-0.2 s of CPU a process. The children's behaviour is unchanged."""
    claims.register(config)
    if sys.flags.dont_write_bytecode and "PYTHONPYCACHEPREFIX" not in os.environ:
        import tempfile

        folder = shards.bytecode_folder()
        if folder is None:
            folder = config._anvil_pycache = Path(tempfile.mkdtemp(prefix="anvil-test-pycache-"))
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
        config._anvil_bytecode_env = True


def pytest_unconfigure(config: pytest.Config) -> None:
    close_helper()  # the process the tests' simulators are forked from (`simfork`)
    if getattr(config, "_anvil_bytecode_env", False):
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    folder = getattr(config, "_anvil_pycache", None)
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def _cpu_s() -> float:
    """CPU seconds of this process and of every child it has waited for (their children's,
    when they waited for them: an `anvil run` counts its Locust process)."""
    import resource

    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With `$ANVIL_TEST_CPU=FILE`, append `{"test", "cpu_s"}` per test: the CPU it cost,
    its set-up and teardown included (a simulator is counted with the process it is forked
    from, `simfork`, reaped at the session's end).
    Where the suite's CPU goes, to cut it (`make test` must stay under 5 minutes)."""
    path = os.environ.get("ANVIL_TEST_CPU")
    if not path:
        yield
        return
    before = _cpu_s()
    yield
    with open(path, "ab") as f:
        f.write(orjson.dumps({"test": item.nodeid, "cpu_s": round(_cpu_s() - before, 3)})
                + b"\n")


@pytest.fixture
def simulator() -> Iterator[Callable[..., SimProcess]]:
    """Factory: `simulator("--prefill-ms", "300", ...)` starts one; all stop at teardown."""
    stack = []

    def start(*args: str) -> SimProcess:
        cm = start_simulator(list(args))
        sim = cm.__enter__()
        stack.append(cm)
        return sim

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)


class DoneCallbacks:
    """The `when_done` part of `HttpConnection`'s contract, for fake connections: callbacks
    run once, last registered first, when the response ends (`settle`)."""

    def __init__(self) -> None:
        self.done: list[Callable[[], None]] = []

    def when_done(self, callback: Callable[[], None]) -> None:
        self.done.append(callback)

    def settle(self) -> None:
        done, self.done = self.done, []
        for callback in reversed(done):
            callback()


def anvil(*args: str, timeout: float = 120, env: dict | None = None
          ) -> subprocess.CompletedProcess:
    """Run the `anvil` CLI as a new user would (a real process). It runs in a process group
    of its own, so that on a timeout the Locust processes it started (master, workers) are
    killed with it (by that group's id) instead of being left behind."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "anvil_metrics", *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def set_script_faults(url: str, faults: list[str]) -> None:
    """Switch a scripted simulator's faults (`PUT /sim/script-faults`); it answers the list
    now in force, which must be the one asked for."""
    import urllib.request

    request = urllib.request.Request(f"{url}/sim/script-faults", method="PUT",
                                     data=orjson.dumps(faults))
    with urllib.request.urlopen(request, timeout=10) as response:
        assert orjson.loads(response.read()) == sorted(faults)


def finish_group(proc: subprocess.Popen, timeout_s: float = 60) -> int:
    """`proc`'s exit code, waited for at most `timeout_s`; its process group (a session of
    its own) killed if it is still running then."""
    try:
        return proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def write_scenario(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def result_path(proc: subprocess.CompletedProcess) -> Path:
    for line in proc.stdout.splitlines():
        if line.startswith("result: "):
            return Path(line.split(": ", 1)[1])
    raise AssertionError(f"no result line\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")


def load_json(path: Path) -> dict:
    return orjson.loads(path.read_bytes())


def raw_lines(run_dir: Path) -> list[dict]:
    return [orjson.loads(x) for x in (run_dir / "requests.jsonl").read_bytes().splitlines()]


def measured(run_dir: Path) -> list[dict[str, Any]]:
    return sorted((x for x in raw_lines(run_dir) if x["type"] == "request" and not x["warmup"]),
                  key=lambda x: x["request_index"])


def check_every_record_once(run_dir: Path, doc: dict[str, Any]) -> None:
    """Every measured raw request record is exactly one row or one failure, by index."""
    raw = measured(run_dir)
    assert [x["request_index"] for x in raw] == list(range(len(raw)))  # dense
    rows = {r["request_index"]: r for r in doc["request_timings"]}
    fails = {f["request_index"]: f for f in doc["failures"]}
    assert len(rows) == len(doc["request_timings"]) and len(fails) == len(doc["failures"])
    assert not rows.keys() & fails.keys()
    assert sorted(rows.keys() | fails.keys()) == list(range(len(raw)))
    assert doc["requests"] == len(raw)
    for x in raw:
        i = x["request_index"]
        if x["failure"] is None:
            assert rows[i]["e2e_ms"] == (x["end_ns"] - x["start_ns"]) / 1e6
        else:
            assert fails[i]["kind"] == x["failure"]["kind"]


def self_signed_cert(tmp_path: Path) -> tuple[Path, Path]:
    """(certificate, key) of a fresh self-signed certificate for 127.0.0.1, made with the
    openssl command (the test is skipped where there is none)."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@contextmanager
def http_server(handler: type) -> Iterator[int]:
    """A stdlib `ThreadingHTTPServer` on 127.0.0.1 serving `handler` in a thread: its port;
    shut down (and its thread joined) on exit."""
    import threading
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def GONE_SINCE(*_args: Any, **_kwargs: Any) -> Any:  # noqa: N802 - a constant-like stand-in
    """For `run_checks(ask=...)`: a server that answered who it is (nothing known) and then
    went down, so the suites themselves meet the transport error (a server down from the
    start is refused before any suite: `checks.runner`)."""
    from anvil_metrics.prep.provenance import Discovery

    return Discovery()


@pytest.fixture
def fired() -> Iterator[list[Any]]:
    """Every record fired on `anvil_events.request_record` while the test runs."""
    from anvil_metrics.events import anvil_events

    records: list[Any] = []

    def listen(record: Any, **_: Any) -> None:
        records.append(record)

    anvil_events.request_record.add_listener(listen)
    yield records
    anvil_events.request_record.remove_listener(listen)
