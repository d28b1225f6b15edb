"""serverroles: each role's figures from its own samples file, the sums of what adds, and
verify's recomputation; the flag's ROLE=URL values."""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson
import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.load.optionvalues import metrics_target, metrics_targets, split_target
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.telemetry.serverfields import Server
from anvil_metrics.telemetry.servermetrics import ClientFigures, server_block
from anvil_metrics.telemetry.serverroles import check_role_files, with_roles
from tests.unit.telemetry.test_servermetrics import _row, vllm

FLAG = "--server-metrics-url"


LAB = '{engine="0",model_name="m"}'


def _kv(transfers: int, tpot_s: float) -> dict[str, float]:
    """NIXL series of `transfers` transfers (1000 B and 2 ms each), none failed, and the
    per-request TPOT histogram of as many requests at `tpot_s` each."""
    return {f"vllm:nixl_xfer_time_seconds_sum{LAB}": 0.002 * transfers,
            f"vllm:nixl_xfer_time_seconds_count{LAB}": transfers,
            f"vllm:nixl_bytes_transferred_sum{LAB}": 1000.0 * transfers,
            f"vllm:nixl_bytes_transferred_count{LAB}": transfers,
            f"vllm:nixl_num_failed_transfers_total{LAB}": 0.0,
            f"vllm:request_time_per_output_token_seconds_sum{LAB}": tpot_s * transfers,
            f"vllm:request_time_per_output_token_seconds_count{LAB}": transfers}


def _write(folder: Path, role: str, finished: tuple[int, int], prompt: tuple[int, int],
           kv: bool = False) -> None:
    """A role's file: first and last samples, `finished` / `prompt` Δ from first to last
    (with `kv`: one KV transfer per request finished, and a 5 ms TPOT each)."""
    lines = [{"type": "scrape", "url": f"http://{role}/metrics"}]
    for seq, mark, i in ((0, "first", 0), (1, None, 1), (2, "last", 1)):
        series = vllm(2.0, 0.0, 0.5, 0, 0, 0, (0.1 * finished[i], finished[i]),
                      (0.3 * finished[i], finished[i]), (0.0, finished[i]),
                      (float(prompt[i]), finished[i]), (4.0 * finished[i], finished[i]))
        if kv:
            series.update(_kv(finished[i], 0.005))
        lines.append({"type": "sample", "seq": seq, "t_ns": seq, "done_ns": seq,
                      "mark": mark, "ok": True, "series": series})
    (folder / f"server_metrics.{role}.jsonl").write_bytes(
        b"".join(orjson.dumps(x) + b"\n" for x in lines))


def _block(folder: Path, rows: RowColumns | None = None, third: str | None = None) -> dict:
    top = server_block({"engine": "vllm", "version": None, "max_model_len": None,
                        "metrics_url": None}, None, ClientFigures(None, None, 0, 0.0, 0),
                       None, "scraped per role: see roles")
    params = {"roles": {"prefill": "http://prefill/metrics",
                        "decode": "http://decode/metrics",
                        **({third: f"http://{third}/metrics"} if third else {})}}
    return with_roles(top, params, folder, rows)


def _rows() -> RowColumns:
    """Two measured requests: first chunks at 110 and 130 ms, mean ITL 6 and 8 ms."""
    rows = []
    for i, (chunk, itl) in enumerate(((110.0, 6.0), (130.0, 8.0))):
        r = _row(i, chunk=chunk, e2e=400.0, prompt=100)
        r["mean_inter_token_latency_ms"] = itl
        rows.append(r)
    out = RowColumns.from_rows(rows)
    assert out is not None
    return out


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
    assert block["combined"] == {
        "requests": 10, "prompt_tokens": 800, "generation_tokens": 40, "kv_transfers": None,
        "kv_transfer_bytes": None,
        "null_reasons": {"kv_transfer_bytes": "no role counted KV-transfer bytes",
                         "kv_transfers": "no role counted KV-transfer transfers"}}
    assert pre["kv_transfer"] is None and "no KV connector" in pre["null_reasons"][
        "kv_transfer"]
    assert block["requests"] is None and block["ttft_ms_mean"] is None  # never a mixed mean
    problems: list[str] = []
    check_role_files({"server": block}, None, tmp_path, problems)
    assert problems == []
    block["roles"]["decode"]["requests"] = 4
    block["combined"]["requests"] = 11
    check_role_files({"server": block}, None, tmp_path, problems)
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


def test_kv_transfers_per_role_add_up_and_each_role_pairs_its_own_part(tmp_path: Path
                                                                       ) -> None:
    _write(tmp_path, "prefill", (5, 12), (100, 870), kv=True)
    _write(tmp_path, "decode", (1, 4), (0, 30), kv=True)
    _write(tmp_path, "router", (0, 9), (0, 900))
    rows = _rows()
    block = _block(tmp_path, rows, "router")
    msgspec.convert(block, Server)
    pre, dec, router = (block["roles"][r] for r in ("prefill", "decode", "router"))
    assert pre["kv_transfer"]["transfers"] == 7 and dec["kv_transfer"]["transfers"] == 3
    assert pre["kv_transfer"]["bytes"] == 7000 and pre["kv_transfer"]["failed"] == 0
    assert pre["kv_transfer"]["transfer_ms_mean"] == pytest.approx(2.0)
    assert pre["kv_transfer"]["latency_ms"] is None and pre["kv_transfer"]["offload"] is None
    assert (block["combined"]["kv_transfers"], block["combined"]["kv_transfer_bytes"]) == (
        10, 10000)  # the router, with no connector, counts none and does not null the sum
    # prefill: the client's first chunk (mean 120 ms) against its TTFT (0.1 s each)
    assert pre["client_minus_server_ms"]["first_chunk_vs_ttft"] == pytest.approx(20.0)
    assert pre["client_minus_server_ms"]["tpot"] is None
    assert pre["client_minus_server_ms"]["e2e"] is None
    # decode: the client's mean ITL (7 ms) against its per-request TPOT (5 ms)
    assert dec["client_minus_server_ms"] == {"first_chunk_vs_ttft": None, "e2e": None,
                                             "tpot": pytest.approx(2.0)}
    assert dec["effective_prefill_excl_queue_tok_s"] is None
    assert router["client_minus_server_ms"] is None
    assert "only the roles named prefill" in router["null_reasons"]["client_minus_server_ms"]
    problems: list[str] = []
    check_role_files({"server": block}, rows, tmp_path, problems)
    assert problems == []
    block["roles"]["decode"]["kv_transfer"]["bytes"] = 3001
    block["roles"]["decode"]["client_minus_server_ms"]["tpot"] = 2.5
    block["combined"]["kv_transfers"] = 11
    check_role_files({"server": block}, rows, tmp_path, problems)
    assert [p.split(":")[0] for p in problems] == [
        "server.roles.decode.kv_transfer", "server.roles.decode.client_minus_server_ms",
        "server.combined.kv_transfers"], problems
