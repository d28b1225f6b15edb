"""`anvil check` in-process, with the suites' run replaced: a bad suite or --out is one
line before anything is asked; the flags reach the run; a line per suite as it ends, then
the tally, exit 0 only when every suite passed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

import anvil_metrics.checks.runner as runner
from anvil_metrics.cli.main import main

HOST = "http://127.0.0.1:9"


def fake_run(results: dict[str, str], seen: dict[str, Any]):
    def run_checks(host: str, suites: tuple[str, ...], *, model: str | None,
                   api_key: str | None, options: Any, on_suite: Any) -> dict[str, Any]:
        seen.update(host=host, suites=suites, model=model, api_key=api_key, options=options)
        for name in suites:
            ok = results[name] == "pass"
            on_suite(SimpleNamespace(suite=name, result=results[name], passed=int(ok),
                                     total=1, elapsed_s=1.25,
                                     error=None if ok else "no server"))
        return {"schema": "anvil-serving.checks/v1", "model": model or "org/m",
                "checks": {name: {"result": r} for name, r in results.items()}}
    return run_checks


@pytest.mark.parametrize("argv,line", [
    (["check", "nonsense", "-H", HOST], "anvil: check: suite 'nonsense' is not known"),
    (["check", "json", "-H", HOST, "--out", "c.txt"], "anvil: --out 'c.txt' must end in .json"),
])
def test_bad_input_is_one_line_before_anything_is_asked(monkeypatch, capsys, argv: list[str],
                                                         line: str) -> None:
    monkeypatch.setattr(runner, "run_checks", lambda *a, **k: pytest.fail("asked"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1


def test_each_suite_is_a_line_then_the_tally(monkeypatch, capsys, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(runner, "run_checks", fake_run({"json": "pass", "tools": "error"},
                                                       seen))
    monkeypatch.delenv("ANVIL_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    out = tmp_path / "c.json"
    assert main(["check", "json,tools", "-H", HOST, "--out", str(out), "--timeout", "2m",
                 "--seed", "3", "--transport", "cpu"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["json", "pass", "1/1", "in", "1.2", "s"]
    assert lines[1].split()[:3] == ["tools", "error", "0/1"]
    assert lines[1].endswith("s  (no server)")
    assert lines[2] == f"model org/m: 1 passed, 0 failed, 1 errors; result: {out}"
    assert seen["suites"] == ("json", "tools") and seen["api_key"] == "sk-env"
    assert (seen["options"].timeout_s, seen["options"].seed) == (120.0, 3)
    assert seen["options"].transport == "cpu"
    assert orjson.loads(out.read_bytes())["checks"]["json"] == {"result": "pass"}


def test_every_suite_passing_is_exit_0(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setattr(runner, "run_checks", fake_run({"json": "pass"}, {}))
    assert main(["check", "json", "-H", HOST, "--out", str(tmp_path / "c.json")]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("model org/m: 1 passed, 0 ")
