"""`anvil prompts`: build prompts of planned sizes against a real endpoint and report how
close the server's own count comes (the check behind every prefill figure).

The same calibration a run uses: a two-count linear fit, then per-size correction; each
count from the server's tokenize endpoint (vLLM style, chat template applied) where it has
one, else a `max_tokens=1` chat request's `usage.prompt_tokens`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from anvil_metrics.prep.counting import server_counter
from anvil_metrics.prep.model import discover_model
from anvil_metrics.prep.prompts import PromptFactory, calibrate_by_probe
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient


@dataclass(frozen=True, slots=True)
class SizeResult:
    planned_tokens: int
    counted_tokens: int | None
    build_ms: float  # building the body once calibrated (no network)

    @property
    def error_pct(self) -> float | None:
        if self.counted_tokens is None:
            return None
        return (self.counted_tokens - self.planned_tokens) / self.planned_tokens * 100


@dataclass(frozen=True, slots=True)
class SizingReport:
    model: str
    base_url: str
    method: str
    counter: str
    tokens_per_word: float
    results: tuple[SizeResult, ...]


def measure_sizes(host: str, sizes: list[int], *, model: str | None = None,
                  api_key: str | None = None, seed: int = 0,
                  timeout_s: float = 900.0, tokenizer_path: str | None = None
                  ) -> SizingReport:
    endpoint = Endpoint.parse(host)
    client = ChatClient(endpoint, api_key, network_timeout_s=timeout_s)
    try:
        model = model or discover_model(client)
        counter = server_counter(client, {"model": model}, tokenizer_path)
        calibration = calibrate_by_probe(counter.count, seed, method=counter.method)
        factory = PromptFactory(calibration, seed, "sizing00")
        factory.prepare(sizes, counter.count)
        # the count reported is the server's count of a real request's prompt, not of the
        # sizing prompt the fit used
        counted = {size: counter.count(factory.messages(size, 0)) for size in set(sizes)}
    finally:
        client.close()
    results = []
    for size in sizes:  # rebuilding from the found word counts is what a run does
        rebuilt = PromptFactory(calibration, seed, "sizing00", words=factory.words)
        t0 = time.perf_counter()
        rebuilt.prepare([size])
        build_ms = (time.perf_counter() - t0) * 1000
        results.append(SizeResult(size, counted.get(size), build_ms))
    return SizingReport(model, endpoint.base_url, calibration.method,
                        counter.source, calibration.tokens_per_word, tuple(results))
