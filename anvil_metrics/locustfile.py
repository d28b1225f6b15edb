"""The locustfile anvil ships: streaming chat completions with anvil's options and records.

`locust -f locustfiles/chat.py` (a one-line re-export of this module) or `anvil run` both
load it. Importing `anvil_metrics.plugin` registers anvil's options and run hooks.
"""

from anvil_metrics import plugin  # noqa: F401  (registers options and event listeners)
from anvil_metrics.users import ChatUser

__all__ = ["ChatUser"]
