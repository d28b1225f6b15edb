"""Streaming chat completions with exact per-request records.

    locust -f locustfiles/chat.py --headless -H http://127.0.0.1:8000 -u 4 -r 4 \
        --scenario scenarios/smoke.toml --requests 20

Everything lives in the `anvil_metrics` package; subclass
`anvil_metrics.live.users.ChatStreamUser` in your own locustfile to customise.
"""

from anvil_metrics.runs.locustfile import ChatUser  # noqa: F401
