"""locustfile: importing anvil's locustfile gives Locust the chat user and registers the
plugin's hooks and the web UI's tab on Locust's events.

Why: `locust -f` finds users by what the file exposes and anvil's options only by the
listeners an import registers; a locustfile that loses either import still runs, but
without anvil's options or its run.
"""

from __future__ import annotations

from locust import events

from anvil_metrics.live import webui
from anvil_metrics.live.users import ChatUser
from anvil_metrics.runs import locustfile, plugin


def test_it_exposes_the_concrete_chat_user() -> None:
    assert locustfile.ChatUser is ChatUser and locustfile.__all__ == ["ChatUser"]
    assert not ChatUser.abstract


def test_importing_it_registers_anvils_hooks() -> None:
    assert plugin.add_options in events.init_command_line_parser._handlers
    assert plugin.on_test_start in events.test_start._handlers
    assert plugin.on_test_stop in events.test_stop._handlers
    assert any(getattr(h, "__module__", "") == webui.__name__ for h in events.init._handlers)
