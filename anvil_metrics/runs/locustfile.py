"""The locustfile anvil ships: streaming chat completions with anvil's options and records.

`locust -f locustfiles/chat.py` (a one-line re-export of this module) or `anvil run` both
load it. Importing `anvil_metrics.runs.plugin` registers anvil's options and run hooks;
`anvil_metrics.live.webui` adds the LLM tab and the `/anvil/` page to Locust's web UI.
"""

from anvil_metrics.live import webui  # noqa: F401  (the web UI's LLM tab, /anvil/ page, downloads)
from anvil_metrics.live.users import ChatUser
from anvil_metrics.runs import plugin  # noqa: F401  (registers options and event listeners)

__all__ = ["ChatUser"]
