"""`anvil sim`'s options (`sim/options.py`): the table, the parser looped from it, the
cross-checks, and the config they make.

The table's defaults must be `SimConfig`'s own (one can drift from the other), `--help` must
list every row once in its order with its default, and each bad value exits 2 with one line
naming the flag, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.options import OPTIONS, build_parser, config_from_args, parse_args


@pytest.mark.parametrize("argv,flag,allowed", [
    (["--spec-k", "17"], "--spec-k", "0 to 16"),
    (["--spec-k", "two"], "--spec-k", "0 to 16"),
    (["--spec-accept", "1.5"], "--spec-accept", "0 to 1"),
    (["--spec-accept", "nan"], "--spec-accept", "0 to 1"),
    (["--metrics-format", "tgi"], "--metrics-format", "vllm"),
    (["--kv-capacity-tokens", "0"], "--kv-capacity-tokens", ">= 1"),
    (["--max-running", "0"], "--max-running", ">= 1"),
    (["--max-running", "-1"], "--max-running", ">= 1"),
    (["--max-running", "two"], "--max-running", "integer"),
    (["--burst", "0"], "--burst", ">= 1"),
    (["--burst", "x"], "--burst", "integer"),
    (["--interval-ms", "-1"], "--interval-ms", ">= 0"),
    (["--prefill-ms", "inf"], "--prefill-ms", ">= 0"),
    (["--tokenizer", "bpe"], "--tokenizer", "words4"),
    (["--reasoning-field", "x"], "--reasoning-field", "reasoning_content"),
])
def test_bad_flags_exit_2_with_one_line(argv: list[str], flag: str, allowed: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert flag in last and argv[1] in last and allowed in last, last


@pytest.mark.parametrize("argv,words", [
    (["--prefix-cache-block", "32", "--prefix-cache-tokens", "16"],
     ["--prefix-cache-tokens", "(32)", "got 16"]),
    (["--burst", "2", "--fault", "http500@0"], ["--burst", "--fault"]),
    (["--script-fault", "tools:wrong_name"], ["--script-fault", "needs --script"]),
    (["--script", "--script-fault", "tools:nonsense"], ["'tools:nonsense'", "allowed:"]),
    (["--fault", "bogus@0"], ["--fault", "bogus"]),
    (["--script", "--script-fault-above", "4"], ["--script-fault-above", "needs --script-fault"]),
    (["--script", "--script-fault", "json:wrong_value", "--script-fault-above", "-1"],
     ["--script-fault-above", "must be >= 0"]),
])
def test_cross_checks_exit_2_with_one_line(argv: list[str], words: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert all(w in last for w in words), last


def test_the_table_defaults_are_the_config_defaults() -> None:
    before = time.monotonic_ns()
    cfg = config_from_args(parse_args([]))
    assert before <= cfg.origin_ns <= time.monotonic_ns()  # the drift counts from now
    assert dataclasses.replace(cfg, origin_ns=0) == SimConfig()


def test_flags_reach_the_config() -> None:
    cfg = config_from_args(parse_args(["--metrics-format", "sglang", "--spec-k", "4",
                                       "--spec-accept", "0.62", "--kv-capacity-tokens", "999"]))
    assert (cfg.metrics_format, cfg.spec_k, cfg.spec_accept, cfg.kv_capacity) == (
        "sglang", 4, 0.62, 999)
    default = config_from_args(parse_args([]))
    assert (default.metrics_format, default.spec_k, default.kv_capacity) == (
        "vllm", 0, 16 * default.max_context)
    assert default.max_running is None and default.burst == 1
    assert config_from_args(parse_args(["--max-running", "3"])).max_running == 3
    assert config_from_args(parse_args(["--burst", "8"])).burst == 8


def test_switches_repeats_and_aliases() -> None:
    cfg = config_from_args(parse_args([
        "--no-tokenize", "--no-done", "--model", "m", "--alias", "a", "--alias", "m",
        "--alias", "b", "--alias", "a", "--fault", "http500@0", "--fault", "http503@1",
        "--script", "--script-fault", "tools:wrong_name", "--script-fault-above", "3"]))
    assert cfg.tokenize_api == "none" and cfg.no_done and not cfg.stamp_send
    assert cfg.aliases == ("a", "b")  # the model itself and repeats dropped, order kept
    assert [r.spec for r in cfg.faults] == ["http500@0", "http503@1"]
    assert cfg.script and cfg.script_faults == ("tools:wrong_name",)
    assert cfg.script_fault_above == 3


def test_help_lists_every_row_once_in_order_with_its_default() -> None:
    text = build_parser().format_help()
    places = [text.index(f"  {o.flag}") for o in OPTIONS]
    assert places == sorted(places)
    assert all(text.count(f"  {o.flag} ") + text.count(f"  {o.flag}\n") == 1 for o in OPTIONS)
    assert "(default: 4000000)" in text and "(default: reasoning_content)" in text
    assert "%P draws" in text and "%%" not in text  # argparse's escape undone
