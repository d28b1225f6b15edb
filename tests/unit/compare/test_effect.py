"""The minimum effect: the verdict rule on constructed intervals (wholly beyond the margin,
straddling it, inside it; relative and absolute margins), the settle estimate's formula, the
flag's parts and its one-line mistakes, and the rule on rows with a planted change: +20 %
TTFT is `worse` at +20 %; two draws of one server are never better or worse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from comparebuild import run_of

from anvil_metrics.cli.main import main
from anvil_metrics.compare.effect import DEFAULT, Margin, parse_min_effect
from anvil_metrics.compare.runs import compare_runs, figure_units
from anvil_metrics.errors import UsageError
from anvil_metrics.post.significance import effect_verdict, settle_factor


@pytest.mark.parametrize(("ci", "eq", "margin", "better", "verdict"), [
    ((3.0, 5.0), (3.2, 4.8), 2.0, "lower", "worse"),      # wholly above +margin
    ((3.0, 5.0), (3.2, 4.8), 2.0, "higher", "better"),
    ((-5.0, -3.0), (-4.8, -3.2), 2.0, "lower", "better"),  # wholly below −margin
    ((3.0, 5.0), (3.2, 4.8), 2.0, None, "changed"),
    ((0.5, 1.5), (0.6, 1.4), 2.0, "lower", "equivalent"),  # beyond noise, inside the margin
    ((-1.9, 2.1), (-1.5, 1.9), 2.0, "lower", "equivalent"),  # the 90 % interval decides
    ((1.0, 3.0), (1.2, 2.8), 2.0, "lower", "inconclusive"),  # straddles +margin
    ((-3.0, 3.0), (-2.5, 2.5), 2.0, "lower", "inconclusive"),  # straddles both
    ((0.0, 0.0), (0.0, 0.0), 0.0, "lower", "equivalent"),  # the very same rows, margin 0
    ((0.1, 0.3), (0.1, 0.3), 0.0, "lower", "worse"),  # margin 0: beyond noise alone
    ((2.0, 5.0), (2.5, 4.5), 2.0, "lower", "inconclusive"),  # touching the margin: not beyond
    (None, None, 2.0, "lower", None),
    ((3.0, 5.0), (3.2, 4.8), None, "lower", None),
])
def test_the_verdict_rule(ci, eq, margin, better, verdict) -> None:
    assert effect_verdict(ci, eq, margin, better) == verdict


def test_the_settle_estimate_is_n_times_half_width_over_distance_squared() -> None:
    # toward beyond: midpoint 3, half-width 2, margin 2: d = 1, so 4× the values
    assert settle_factor((1.0, 5.0), (1.5, 4.5), 2.0) == pytest.approx(4.0)
    # toward equivalent: the 90 % interval's midpoint 0.5, half-width 2, margin 2: d = 1.5
    assert settle_factor((-2.0, 3.0), (-1.5, 2.5), 2.0) == pytest.approx((2 / 1.5) ** 2)
    assert settle_factor((0.0, 4.0), (0.5, 3.5), 2.0) is None  # the midpoint on the margin


def test_relative_and_absolute_margins() -> None:
    assert Margin(2.0, "%").absolute(250.0) == pytest.approx(5.0)
    assert Margin(2.0, "%").absolute(-250.0) == pytest.approx(5.0)
    assert Margin(2.0, "%").absolute(None) is None
    assert Margin(10.0, "ms").absolute(250.0) == 10.0
    got = parse_min_effect("3%, ttft_p50_ms=5%,e2e_p50_ms=10ms,ttft_p95_ms=7", figure_units())
    assert got.default == Margin(3.0, "%")
    assert got.of("ttft_p50_ms") == Margin(5.0, "%")
    assert got.of("e2e_p50_ms") == Margin(10.0, "ms")
    assert got.of("ttft_p95_ms") == Margin(7.0, "ms") and got.of("itl_p50_ms") == got.default
    assert parse_min_effect("throughput_tok_s=50tok/s", figure_units()).of(
        "throughput_tok_s") == Margin(50.0, "tok/s")
    assert DEFAULT.of("ttft_p50_ms") == Margin(2.0, "%")


@pytest.mark.parametrize(("spec", "words"), [
    ("2", "a margin for every figure must be in %"),
    ("10ms", "a margin for every figure must be in %"),
    ("ttft_p5_ms=5%", "'ttft_p5_ms' is no figure anvil compare shows"),
    ("ttft_p50_ms=10s", "'10s' is not a number ≥ 0; ttft_p50_ms's unit is ms"),
    ("ttft_p50_ms=-5%", "'-5' is not a number ≥ 0"),
    ("e2e_p50_ms=nan", "'nan' is not a number ≥ 0"),
    ("2%,", "a margin for every figure must be in %"),
])
def test_a_bad_part_is_named(spec: str, words: str) -> None:
    with pytest.raises(UsageError, match="--min-effect") as e:
        parse_min_effect(spec, figure_units())
    assert words in str(e.value) and "allowed:" in str(e.value)


def test_a_bad_flag_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    run_of(tmp_path / "a", np.full(10, 100.0))
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"),
                 "--min-effect", "ttft_p50_ms=5x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--min-effect: 'ttft_p50_ms=5x'" in err[0], err


@pytest.fixture(scope="module")
def draws() -> np.ndarray:
    return np.random.default_rng(11).lognormal(np.log(100), 0.2, 300)


def _versus(result: dict, name: str) -> dict:
    (f,) = [f for f in result["figures"] if f["name"] == name]
    return f["vs_baseline"][1]


def test_a_planted_20_percent_ttft_is_worse_at_20_percent(tmp_path: Path, draws) -> None:
    result = compare_runs([run_of(tmp_path / "a", draws), run_of(tmp_path / "b", draws * 1.2)])
    for name in ("ttft_p50_ms", "ttft_p95_ms"):
        v = _versus(result, name)
        assert v["verdict"] == "worse" and v["delta_pct"] == pytest.approx(20.0, abs=0.01)
        assert v["settle"] is None
    # a margin of 25 % is more than the change: not worse, and not equivalent either
    wide = compare_runs([run_of(tmp_path / "c", draws), run_of(tmp_path / "d", draws * 1.2)],
                        min_effect=parse_min_effect("25%", figure_units()))
    v = _versus(wide, "ttft_p50_ms")
    assert v["beyond_noise"] is True and v["verdict"] in ("inconclusive", "equivalent")


def test_two_draws_of_one_server_are_never_better_or_worse(tmp_path: Path, draws) -> None:
    other = np.random.default_rng(13).lognormal(np.log(100), 0.2, 300)
    result = compare_runs([run_of(tmp_path / "a", draws), run_of(tmp_path / "b", other)])
    judged = [f for f in result["figures"] if f["vs_baseline"][1]["verdict"] is not None]
    assert judged
    for f in judged:
        v = f["vs_baseline"][1]
        assert v["verdict"] in ("equivalent", "inconclusive"), (f["name"], v)
        if v["verdict"] == "inconclusive":
            s = v["settle"]
            assert s["values_n"] == [300, 300]
            assert s["values_to_settle"] is None or min(s["values_to_settle"]) > 300


def test_a_change_beyond_noise_inside_the_margin_is_equivalent(tmp_path: Path, draws) -> None:
    many = np.tile(draws, 4)  # +5 % on narrow intervals, a 40 % margin
    close = compare_runs([run_of(tmp_path / "c", many), run_of(tmp_path / "d", many * 1.05)],
                         min_effect=parse_min_effect("ttft_p50_ms=40%", figure_units()))
    v = _versus(close, "ttft_p50_ms")
    assert v["beyond_noise"] is True and v["verdict"] == "equivalent"
