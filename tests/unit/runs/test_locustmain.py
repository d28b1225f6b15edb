"""`anvil_metrics.runs.locustmain`: Locust's own command, its start without the ~25 readings
of every distribution's entry points that gevent's monkey-patching asks for."""

from __future__ import annotations

import importlib.metadata as metadata
import subprocess
import sys

from anvil_metrics.runs.locustmain import entry_points_read_once

GROUPS = ("gevent.plugins.monkey.will_patch_all", "gevent.plugins.monkey.did_patch_all",
          "console_scripts", "pytest11", "no.such.group")


def test_one_reading_answers_every_group_as_the_original_does(monkeypatch) -> None:
    original = metadata.entry_points
    calls = []

    def counted(**select):
        calls.append(select)
        return original(**select)

    monkeypatch.setattr(metadata, "entry_points", counted)
    with entry_points_read_once():
        got = {g: sorted(ep.value for ep in metadata.entry_points(group=g)) for g in GROUPS}
        again = {g: sorted(ep.value for ep in metadata.entry_points(group=g)) for g in GROUPS}
    assert calls == [{}]  # one reading of everything, whatever was asked
    assert metadata.entry_points is counted  # put back
    assert got == again == {g: sorted(ep.value for ep in original(group=g)) for g in GROUPS}
    assert got["console_scripts"] and "anvil_metrics.cli.main:main" in got["console_scripts"]


def test_it_is_locusts_own_command() -> None:
    ours = subprocess.run([sys.executable, "-m", "anvil_metrics.runs.locustmain", "--version"],
                          capture_output=True, text=True, timeout=60)
    theirs = subprocess.run([sys.executable, "-m", "locust", "--version"],
                            capture_output=True, text=True, timeout=60)
    assert ours.returncode == theirs.returncode == 0
    assert ours.stdout == theirs.stdout and "locust 2." in ours.stdout
