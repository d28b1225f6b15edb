"""One run's shared state in a Locust process, from test start to the written result.

`RunSession.start` does everything that must happen before the first measured byte: it
resolves the model, calibrates prompt sizing, builds every request body template (so no
prompt is built on the hub during the load), creates the run folder exclusively and writes
the raw file's header. `RunSession.finish` closes the raw file and writes `benchmark.json`.
Both run inside Locust's `test_start` / `test_stop` events (see `plugin.py`).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anvil_metrics.body import BodyBuilder, body_fields
from anvil_metrics.client import ChatClient, Endpoint
from anvil_metrics.control import RequestBudget
from anvil_metrics.errors import AnvilError, UsageError
from anvil_metrics.events import anvil_events
from anvil_metrics.prompts import (
    NO_CALIBRATION,
    Calibration,
    PromptFactory,
    calibrate_by_probe,
)
from anvil_metrics.recorder import RUN_ID, RawWriter, create_run_dir, new_run_id
from anvil_metrics.records import RequestRecord
from anvil_metrics.scenario import Scenario

log = logging.getLogger("anvil")

_current: RunSession | None = None


def current() -> RunSession | None:
    """The run in progress in this process, if any."""
    return _current


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What the user asked for on the command line / start form, already typed."""

    scenario: Scenario
    host: str
    users: int
    results_dir: str = "results"
    run_dir: str | None = None
    api_key: str | None = None
    run_nonce: str | None = None
    calibrate: bool = True


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


def probe_counter(client: ChatClient, fields: dict[str, Any]) -> Callable[[list[dict]], int]:
    """A function that sends a `max_tokens=1` request and returns `usage.prompt_tokens`.

    The probe carries the run's own body fields (thinking switch, extra body) but not its
    streaming or output-length ones, so the server applies the same chat template."""
    base = {k: v for k, v in fields.items()
            if k not in ("stream", "stream_options", "ignore_eos", "min_tokens")}

    def count(messages: list[dict]) -> int:
        status, body = client.post_json(
            "/chat/completions", {**base, "messages": messages, "max_tokens": 1, "stream": False})
        if status != 200 or not isinstance(body, dict):
            raise AnvilError(f"calibration probe got HTTP {status}: {str(body)[:200]}")
        usage = body.get("usage") or {}
        n = usage.get("prompt_tokens")
        if not isinstance(n, int):
            raise AnvilError("calibration probe: the server's response has no usage.prompt_tokens")
        return n

    return count


def tokenize_counter(client: ChatClient, fields: dict[str, Any]
                     ) -> Callable[[list[dict]], int] | None:
    """vLLM-style `POST /tokenize` with `messages` (chat template applied): a count with
    no prefill. None when the server has no such endpoint (then probes are used)."""
    root = client.endpoint.api_path.removesuffix("/v1")
    base = {k: fields[k] for k in ("model", "chat_template_kwargs") if k in fields}

    def count(messages: list[dict]) -> int:
        status, body = client.post_json(root + "/tokenize", {**base, "messages": messages},
                                        absolute=True)
        n = body.get("count") if isinstance(body, dict) else None
        if status != 200 or not isinstance(n, int):
            raise AnvilError(f"/tokenize answered HTTP {status}: {str(body)[:200]}")
        return n

    try:
        count([{"role": "user", "content": "hello"}])
    except Exception:  # no endpoint, or not this shape: fall back to probes
        return None
    return count


def server_counter(client: ChatClient, fields: dict[str, Any]
                   ) -> tuple[Callable[[list[dict]], int], str]:
    """The cheapest way this server counts a chat prompt, and its calibration method name:
    its tokenize endpoint, else `max_tokens=1` probes."""
    count = tokenize_counter(client, fields)
    if count is not None:
        return count, "tokenize"
    return probe_counter(client, fields), "probe"


class RunSession:
    def __init__(self, opts: RunOptions, endpoint: Endpoint, model: str,
                 calibration: Calibration, run_id: str, run_dir: Path, writer: RawWriter,
                 bodies: BodyBuilder, budget: RequestBudget, header: dict[str, Any]) -> None:
        self.opts = opts
        self.scenario = opts.scenario
        self.endpoint = endpoint
        self.api_key = opts.api_key
        self.model = model
        self.calibration = calibration
        self.run_id = run_id
        self.run_dir = run_dir
        self.writer = writer
        self.bodies = bodies
        self.budget = budget
        self.header = header
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.finished = False
        self.benchmark_path: Path | None = None
        anvil_events.request_record.add_listener(self._on_record)

    def _on_record(self, record: RequestRecord, **_: Any) -> None:
        self.writer.write_record(record)

    @classmethod
    def start(cls, opts: RunOptions, on_exhausted: Callable[[], None]) -> RunSession:
        global _current
        sc = opts.scenario
        endpoint = Endpoint.parse(opts.host)
        probe_client = ChatClient(endpoint, opts.api_key,
                                  connect_timeout_s=sc.timeouts.connect_s,
                                  network_timeout_s=sc.timeouts.network_s)
        nonce = opts.run_nonce or secrets.token_hex(4)
        sizes = sc.planned_sizes()
        try:
            model = sc.meta.get("model") or discover_model(probe_client)
            count, method = server_counter(probe_client, body_fields(sc, model))
            calibration = NO_CALIBRATION
            if opts.calibrate:
                try:
                    calibration = calibrate_by_probe(count, sc.context_seed, sc.system_prompt,
                                                     method=method)
                except Exception as e:  # any probe failure: size by estimate, say so
                    log.warning("anvil: prompt calibration failed (%s); sizing by estimate", e)
            prompts = PromptFactory(calibration, sc.context_seed, nonce, sc.system_prompt)
            bodies = BodyBuilder(sc, model, prompts)
            try:
                prompts.prepare(sizes, count if calibration.method != "none" else None)
            except Exception as e:  # a correction probe failed: keep the fitted sizes
                log.warning("anvil: prompt size correction failed (%s); using the fit", e)
                prompts.prepare(sizes)
            bodies.prepare(sizes)
        finally:
            probe_client.close()

        budget = RequestBudget(sc.requests, sc.warmup_requests, sizes, on_exhausted)

        if opts.run_dir:
            run_dir = Path(opts.run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            run_id = run_dir.name if RUN_ID.fullmatch(run_dir.name) else new_run_id()
        else:
            run_id, run_dir = create_run_dir(opts.results_dir)
        writer = RawWriter(run_dir / "requests.jsonl")
        distribution: dict[str, int] = {}
        for i in range(sc.requests):
            key = str(budget.size_for(i))
            distribution[key] = distribution.get(key, 0) + 1
        params = {
            "measurement_protocol": sc.measurement_protocol,
            "concurrency": opts.users,
            "context_tokens": sc.context_tokens,
            "max_context_tokens": sc.max_context_tokens,
            "context_distribution": distribution,
            "context_seed": sc.context_seed,
            "max_tokens": sc.max_tokens,
            "model": model,
            "engine": sc.meta.get("engine"),
            "gpu": sc.meta.get("gpu"),
            "tier": sc.meta.get("tier"),
            "manifest": sc.meta.get("manifest"),
            "source_recipe": sc.meta.get("source_recipe"),
            "base_url": endpoint.base_url,
            "serve_flags": sc.serve_flags(),
            "run_nonce": nonce,
            "prompt_calibration": {"method": calibration.method},
            "warmup_requests": sc.warmup_requests,
            "requests_planned": sc.requests,
        }
        header = writer.write_header(run_id, params)
        session = cls(opts, endpoint, model, calibration, run_id, run_dir, writer, bodies,
                      budget, header)
        _current = session
        return session

    def finish(self, locust_stats: dict[str, Any] | None = None) -> Path | None:
        """Close the raw file and write `benchmark.json`; idempotent."""
        global _current
        if self.finished:
            return self.benchmark_path
        self.finished = True
        self.budget.close()
        anvil_events.request_record.remove_listener(self._on_record)
        from anvil_metrics.postprocess import postprocess

        try:
            self.writer.write_end({"locust": locust_stats} if locust_stats else None)
        finally:
            self.writer.close()
        try:
            self.benchmark_path = postprocess(self.run_dir)
        except AnvilError as e:
            log.error("anvil: could not build benchmark.json for %s: %s", self.run_dir, e)
            self.benchmark_path = None
        if _current is self:
            _current = None
        anvil_events.run_finished.fire(run_dir=self.run_dir, benchmark_path=self.benchmark_path)
        return self.benchmark_path
