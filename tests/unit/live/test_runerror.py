"""runerror: the first error a run logs reaches `anvil run` through `error.json`, whole,
once, and never overwritten by a later one.

Why: `anvil run` prints this line when no benchmark appears; a later, secondary error
replacing the first would send the user after the wrong cause.
"""

from __future__ import annotations

import logging
from pathlib import Path

from anvil_metrics.live.runerror import ERROR_FILE, ErrorFile, SetUp, read_error, write_error


def test_the_first_error_is_kept(tmp_path: Path) -> None:
    assert read_error(tmp_path) is None
    assert write_error(tmp_path, "cannot reach the server") is True
    assert write_error(tmp_path, "a later error") is False
    assert read_error(tmp_path) == "cannot reach the server"
    assert sorted(p.name for p in tmp_path.iterdir()) == [ERROR_FILE]  # no temporary left


def test_the_handler_writes_only_errors_and_only_the_first(tmp_path: Path) -> None:
    log = logging.getLogger("anvil-test-runerror")
    log.propagate = False
    handler = ErrorFile(tmp_path)
    log.addHandler(handler)
    try:
        log.warning("only a warning")
        assert read_error(tmp_path) is None
        log.error("bad %s", "flag")
        log.critical("worse")
    finally:
        log.removeHandler(handler)
    assert read_error(tmp_path) == "bad flag"


def test_a_damaged_or_empty_file_reads_as_no_error(tmp_path: Path) -> None:
    for text in (b"{", b"[]", b'{"message": ""}', b'{"message": 3}'):
        (tmp_path / ERROR_FILE).write_bytes(text)
        assert read_error(tmp_path) is None, text


def test_a_handler_that_cannot_write_does_not_raise(tmp_path: Path) -> None:
    handler = ErrorFile(tmp_path / "missing-folder")
    handler.handleError = lambda record: None  # type: ignore[method-assign]  # quiet
    handler.emit(logging.makeLogRecord({"msg": "x", "levelno": logging.ERROR}))
    assert handler.written and not (tmp_path / "missing-folder").exists()


def test_a_signal_in_the_set_up_names_its_phase_once(tmp_path: Path) -> None:
    """Given a run folder (`anvil run`'s), error.json goes there; the first signal's line is
    kept, a second changes nothing."""
    setup = SetUp(str(tmp_path / "results"), tmp_path)
    setup.enter("sizing the prompts")
    line = setup.stop("SIGINT (Ctrl-C): stopped by hand")
    assert line == ("anvil: SIGINT (Ctrl-C): stopped by hand in the run's set-up (sizing the "
                    "prompts), before its first request: nothing was measured")
    setup.enter("building the request bodies")
    setup.stop("SIGTERM: the process was asked to stop")
    assert read_error(tmp_path) == line and setup.stopped == "SIGINT (Ctrl-C): stopped by hand"
    assert not (tmp_path / "results").exists()


def test_a_set_up_without_a_folder_yet_makes_one_for_its_error(tmp_path: Path) -> None:
    """Plain Locust makes its run folder late in the set-up: a signal before it makes one."""
    setup = SetUp(str(tmp_path))
    setup.stop("SIGTERM: the process was asked to stop")
    (run_dir,) = tmp_path.glob("benchmark-*")
    assert setup.run_dir == run_dir
    assert read_error(run_dir).endswith("(reading the options), before its first request: "
                                        "nothing was measured")
