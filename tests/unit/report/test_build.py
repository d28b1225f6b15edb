"""build: which kind of folder a report is asked of, refused in one line when it is none;
each source file named with its size and SHA-256; and a run's report written — the page
and each figure's PNG — into the folder or `--out`.

Why: the kind decides which files are read; a folder taken for the wrong kind would draw
a report of something else, and a source named with a wrong hash could not be checked.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.errors import UsageError
from anvil_metrics.report.build import HTML_FILE, folder_kind, made_by, make_report, source


@pytest.mark.parametrize(("files", "kind"), [
    (["requests.jsonl"], "run"),
    (["requests.jsonl", "capacity.json"], "capacity"),
    (["capacity.json", "campaign.json"], "campaign"),
])
def test_the_first_file_that_matches_decides(tmp_path: Path, files: list[str],
                                             kind: str) -> None:
    for name in files:
        (tmp_path / name).write_text("{}")
    assert folder_kind(tmp_path) == kind


def test_what_is_no_report_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="holds no requests.jsonl, capacity.json or "
                                         "campaign.json; give a folder anvil wrote"):
        folder_kind(tmp_path)
    with pytest.raises(UsageError, match="is not a folder; give a run folder"):
        folder_kind(tmp_path / "missing")


def test_a_source_is_its_size_and_sha256(tmp_path: Path) -> None:
    data = b"x" * (3 << 20) + b"tail"  # more than one read block
    (tmp_path / "b.json").write_bytes(data)
    s = source(tmp_path, "b.json")
    assert (s.path, s.size_bytes, s.sha256) == ("b.json", len(data),
                                                hashlib.sha256(data).hexdigest())


def test_made_by_names_the_version_and_the_code() -> None:
    text = made_by()
    assert text.startswith("anvil ") and ("(commit " in text or "not a git checkout" in text)


def _run(folder: Path) -> Path:
    folder.mkdir()
    write_raw(folder / "requests.jsonl", HEADER, [completed(0), completed(1), failed(2)],
              run_end={"finished_at": "2026-08-01T16:01:00Z"})
    return folder


def test_a_runs_report_is_written_into_out(tmp_path: Path) -> None:
    folder = _run(tmp_path / "run")
    report = make_report(folder, tmp_path / "out")
    assert report.kind == "run" and report.html_path == tmp_path / "out" / HTML_FILE
    page = report.html_path.read_text()
    assert page.startswith("<!DOCTYPE html>") and HEADER["run_id"] in page
    assert report.png_paths and all(p.parent == tmp_path / "out" for p in report.png_paths)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in report.png_paths)
    assert not (folder / HTML_FILE).exists()  # nothing written beside the run


def test_an_out_that_is_a_file_and_a_missing_matplotlib_are_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _run(tmp_path / "run")
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match=r"^report: --out '.*f' is a file; give a folder$"):
        make_report(folder, tmp_path / "f")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UsageError, match=r"pip install 'anvil-metrics\[report\]'"):
        make_report(folder, tmp_path / "out")
