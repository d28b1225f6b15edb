"""serverroles: each role's figures from its own samples file, the sums of what adds, and
verify's recomputation; the flag's ROLE=URL values."""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson
import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.load.optionvalues import metrics_target, metrics_targets, split_target
from anvil_metrics.telemetry.serverfields import Server
from anvil_metrics.telemetry.servermetrics import ClientFigures, server_block
from anvil_metrics.telemetry.serverroles import check_role_files, with_roles
from tests.unit.telemetry.test_servermetrics import vllm

FLAG = "--server-metrics-url"


def _write(folder: Path, role: str, finished: tuple[int, int], prompt: tuple[int, int]
           ) -> None:
    """A role's file: first and last samples, `finished` / `prompt` Δ from first to last."""
    lines = [{"type": "scrape", "url": f"http://{role}/metrics"}]
    for seq, mark, i in ((0, "first", 0), (1, None, 1), (2, "last", 1)):
        series = vllm(2.0, 0.0, 0.5, 0, 0, 0, (0.1 * finished[i], finished[i]),
                      (0.3 * finished[i], finished[i]), (0.0, finished[i]),
                      (float(prompt[i]), finished[i]), (4.0 * finished[i], finished[i]))
        lines.append({"type": "sample", "seq": seq, "t_ns": seq, "done_ns": seq,
                      "mark": mark, "ok": True, "series": series})
    (folder / f"server_metrics.{role}.jsonl").write_bytes(
        b"".join(orjson.dumps(x) + b"\n" for x in lines))


def _block(folder: Path) -> dict:
    top = server_block({"engine": "vllm", "version": None, "max_model_len": None,
                        "metrics_url": None}, None, ClientFigures(None, None, 0, 0.0, 0),
                       None, "scraped per role: see roles")
    params = {"roles": {"prefill": "http://prefill/metrics",
                        "decode": "http://decode/metrics"}}
    return with_roles(top, params, folder)


def test_each_role_is_its_own_server_and_only_what_adds_is_summed(tmp_path: Path) -> None:
    _write(tmp_path, "prefill", (5, 12), (100, 870))
    _write(tmp_path, "decode", (1, 4), (0, 30))
    block = _block(tmp_path)
    msgspec.convert(block, Server)  # the typed definition holds it
    pre, dec = block["roles"]["prefill"], block["roles"]["decode"]
    assert (pre["requests"], dec["requests"]) == (7, 3)
    assert pre["prompt_tokens_mean"] == pytest.approx(770 / 7)
    assert pre["e2e_ms_mean"] == pytest.approx(300.0) and pre["engine"] == "vllm"
    assert pre["client_minus_server_ms"] is None and "per role" in pre["null_reasons"][
        "client_minus_server_ms"]
    assert block["combined"] == {"requests": 10, "prompt_tokens": 800,
                                 "generation_tokens": 40, "null_reasons": {}}
    assert block["requests"] is None and block["ttft_ms_mean"] is None  # never a mixed mean
    problems: list[str] = []
    check_role_files({"server": block}, tmp_path, problems)
    assert problems == []
    block["roles"]["decode"]["requests"] = 4
    block["combined"]["requests"] = 11
    check_role_files({"server": block}, tmp_path, problems)
    assert len(problems) == 2 and "server.roles.decode.requests" in problems[0], problems


def test_a_role_without_its_file_is_null_with_why_and_so_are_the_sums(tmp_path: Path) -> None:
    _write(tmp_path, "prefill", (0, 3), (0, 90))
    block = _block(tmp_path)
    assert block["roles"]["decode"]["requests"] is None
    assert block["combined"]["requests"] is None
    assert block["combined"]["null_reasons"]["requests"].startswith("role decode:")


def test_the_flag_takes_one_bare_url_or_roles_each_once() -> None:
    assert split_target(FLAG, "http://h:1/metrics?a=b") == (None, "http://h:1/metrics?a=b")
    assert split_target(FLAG, "decode=http://h:2/metrics") == ("decode", "http://h:2/metrics")
    assert metrics_targets(FLAG, ["http://a/m"]) == ("http://a/m", ())
    assert metrics_targets(FLAG, None) == (None, ())
    for bad in ("pre fill=http://h/m", "decode=ftp://h/m", "=http://h/m"):
        with pytest.raises(UsageError, match=FLAG):
            metrics_target(FLAG, bad)
    for given in (["a=http://a/m", "a=http://b/m"], ["http://a/m", "a=http://b/m"],
                  ["http://a/m", "http://b/m"]):
        with pytest.raises(UsageError, match=FLAG):
            metrics_targets(FLAG, given)
