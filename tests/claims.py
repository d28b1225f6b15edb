"""Test files claimed one at a time by whichever shard is free (`tests/shards.py`).

Why: dealing files to shards in advance, by the seconds each took last time, left the shards
ending up to 36 s apart (257-293 s in one run of 6, 291-319 s in one of 4), because this VM's
speed changes within a run and new tests have no recorded time. Here every shard collects
every file, in the same order (longest first), and before running a file takes it with an
exclusive create of one marker file in a folder all shards share: the first shard to ask gets
it, the others pass on. So each shard keeps working while any file is left, and they all end
within about one file's time of each other.

A file is taken whole, so its module fixtures (a shared simulator) serve all its tests in one
process, as in plain pytest. The next file is claimed before the last test of the current one
runs, so pytest knows the next test and tears the module's fixtures down at the right moment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ENV = "ANVIL_TEST_CLAIMS"  # the shared folder; the plugin is active only when it is set


def claim(folder: Path, name: str) -> bool:
    """True for the one caller that creates the marker of `name` first."""
    marker = folder / name.replace("/", "__").replace("::", "--")
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True


def by_file(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """The collected tests grouped by file, in their collection order."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(item.nodeid.split("::")[0], []).append(item)
    return list(groups.values())


class ClaimPlugin:
    """Runs only the files this process claims from `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def claimed(self, items: list[pytest.Item]) -> Iterator[list[pytest.Item]]:
        for group in by_file(items):
            if claim(self.folder, group[0].nodeid.split("::")[0]):
                yield group

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        """pytest's own loop (`_pytest.main.pytest_runtestloop`) over the claimed files."""
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} errors during collection")
        if session.config.option.collectonly:
            return True
        files = self.claimed(session.items)
        group = next(files, None)
        while group is not None:
            following = None
            for i, item in enumerate(group):
                if i + 1 < len(group):
                    nextitem: pytest.Item | None = group[i + 1]
                else:
                    following = next(files, None)
                    nextitem = following[0] if following else None
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                if session.shouldfail:
                    raise session.Failed(session.shouldfail)
                if session.shouldstop:
                    raise session.Interrupted(session.shouldstop)
            group = following
        return True


def register(config: pytest.Config) -> None:
    """From conftest: take part in the claiming when `shards.py` set the shared folder."""
    folder = os.environ.get(ENV)
    if folder:
        config.pluginmanager.register(ClaimPlugin(Path(folder)), "anvil-claims")
