"""The locustfile anvil ships: streaming chat completions with anvil's options and records.

`locust -f locustfiles/chat.py` (a one-line re-export of this module) or `anvil run` both
load it. Importing `anvil_metrics.plugin` registers anvil's options and run hooks;
`anvil_metrics.webui` adds the LLM tab and the `/anvil/` page to Locust's web UI.
"""

from anvil_metrics import (
    plugin,  # noqa: F401  (registers options and event listeners)
    webui,  # noqa: F401  (the web UI's LLM tab, /anvil/ page and downloads)
)
from anvil_metrics.users import ChatUser

__all__ = ["ChatUser"]
