"""--otlp-endpoint and $OTEL_EXPORTER_OTLP_ENDPOINT read into `RunOptions` (`load/options.py`):
the flag first, then the variable, each URL checked, and the `[otlp]` extra asked for before
any load."""

from __future__ import annotations

import importlib.util

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.load import options
from anvil_metrics.load.options import OTLP_ENV, OTLP_INTERVAL_S, run_options

HOST = "http://127.0.0.1:9"


def _opts(values: dict) -> options.RunOptions:
    return run_options(values, host=HOST, users=1, api_key=None)


@pytest.fixture
def with_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.delenv(OTLP_ENV, raising=False)


def test_the_flag_comes_before_the_variable(with_extra: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert _opts({}).otlp_endpoint is None
    monkeypatch.setenv(OTLP_ENV, "http://collector:4318")
    assert _opts({}).otlp_endpoint == "http://collector:4318"
    got = _opts({"otlp_endpoint": "http://127.0.0.1:4318", "otlp_interval": "2s"})
    assert (got.otlp_endpoint, got.otlp_interval_s) == ("http://127.0.0.1:4318", 2.0)
    assert _opts({}).otlp_interval_s == OTLP_INTERVAL_S


def test_a_bad_flag_url_is_one_line(with_extra: None) -> None:
    with pytest.raises(UsageError) as e:
        _opts({"otlp_endpoint": "collector:4318"})
    assert str(e.value).startswith("--otlp-endpoint 'collector:4318' is not allowed; "
                                   "expected an http:// or https:// URL")


def test_a_variable_anvil_cannot_use_is_a_warning_not_a_refused_run(
        with_extra: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """$OTEL_EXPORTER_OTLP_ENDPOINT may be set for other software on the host (a gRPC
    collector's address, auto-instrumentation): anvil then pushes nothing and says so."""
    monkeypatch.setenv(OTLP_ENV, "collector:4318")
    with caplog.at_level("WARNING", logger="anvil"):
        assert _opts({}).otlp_endpoint is None
    assert "no OTLP push" in caplog.text and "collector:4318" in caplog.text


def test_without_the_extra_the_flag_is_refused_before_load_and_the_variable_ignored(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(OTLP_ENV, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert _opts({}).otlp_endpoint is None  # no push asked for: nothing needed
    with pytest.raises(UsageError) as e:
        _opts({"otlp_endpoint": "http://127.0.0.1:4318"})
    assert e.value.exit_code == 2
    assert str(e.value) == ("--otlp-endpoint needs the OpenTelemetry SDK: "
                            "pip install 'anvil-metrics[otlp]'")
    monkeypatch.setenv(OTLP_ENV, "http://collector:4318")
    with caplog.at_level("WARNING", logger="anvil"):
        assert _opts({}).otlp_endpoint is None
    assert "pip install 'anvil-metrics[otlp]'" in caplog.text
