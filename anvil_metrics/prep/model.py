"""Which model the server serves: its `/v1/models` list, asked once before any load.

Why apart: a run (`live/session.py`) and `anvil prompts` (`prep/sizing.py`) both need the
model's name before they can count a prompt; a name the user typed is checked against the
list, so a typo is one clear line before the first request rather than a run of HTTP 404s.
"""

from __future__ import annotations

from anvil_metrics.errors import UsageError
from anvil_metrics.wire.client import ChatClient


def discover_model(client: ChatClient) -> str:
    try:
        status, body = client.get_json("/models")
    except Exception as e:  # refused, reset, timed out, not HTTP: all "cannot reach"
        raise UsageError(
            f"cannot reach {client.endpoint.base_url}/models ({e}); is the server running? "
            "check --host"
        ) from e
    if status == 200 and isinstance(body, dict):
        data = body.get("data") or []
        if data and isinstance(data[0], dict) and data[0].get("id"):
            return str(data[0]["id"])
    raise UsageError(
        f"could not discover a model from {client.endpoint.base_url}/models (HTTP {status}); "
        "pass --model NAME or set meta.model in the scenario"
    )


def check_model_served(client: ChatClient, model: str) -> None:
    """Refuse, before any load, a model the server says it does not serve (its
    `/v1/models` list); a server without that list is not second-guessed."""
    try:
        status, body = client.get_json("/models")
    except Exception:  # noqa: BLE001 - no list to check against; the requests will tell
        return
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return
    served = [str(m.get("id")) for m in body["data"] if isinstance(m, dict) and m.get("id")]
    if served and model not in served:
        raise UsageError(f"--model {model!r} is not served by {client.endpoint.base_url}; "
                         f"it serves: {', '.join(served[:10])}")
