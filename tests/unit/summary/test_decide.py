"""The summary's figures against known truth: the spec example's `performance` block rebuilt
from runs constructed to give it, statistics against hand-computed cases, gates on both sides
of their thresholds, and missing inputs giving null with a reason.

Why constructed runs: the example's runs are not published, only their means. Five runs per
variant are built around each row's figure (offsets that sum to zero, as first and swapped
placements would differ), so the mean of the run medians is the example's figure and every
delta follows from the definitions, not from anything the code under test computed.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from summarybuild import BENCHMARK, DATA, OFFSETS, SHARED, SUMMARY_NAME, run, runs_for

from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import strict_json_problems
from anvil_metrics.post.significance import (
    _u_counts,
    bootstrap_delta_ci,
    delta_percent,
    mann_whitney,
)
from anvil_metrics.summary.decide import (
    DISPLAY_DECIMALS,
    VariantRuns,
    rounded,
    run_failures,
    summarize,
    telemetry_row,
)

EXAMPLE_GATES = {"e2e_p50_improvement_percent": 10, "no_saturated_runs": True,
                 "functional": "all_pass"}


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    vendored = (DATA / SUMMARY_NAME).read_bytes()
    shared = SHARED / "spec/examples" / SUMMARY_NAME
    if shared.is_file():
        assert shared.read_bytes() == vendored, f"tests/data/{SUMMARY_NAME} differs from {shared}"
    return orjson.loads(vendored)






def example_variants(example: dict[str, Any], spread: float = 1.0) -> list[VariantRuns]:
    return [VariantRuns(r["model"], r["speculation"], runs_for(r, spread))
            for r in example["performance"]]


def e2e_variant(model: str, values: list[float], spec: str = "mtp3") -> VariantRuns:
    return VariantRuns(model, spec, [run(i, e2e_p50_ms=v) for i, v in enumerate(values)])


# --- the acceptance test: the example's performance block ---------------------------------


def test_reproduces_the_example_performance_block(example: dict[str, Any]) -> None:
    s = summarize(example_variants(example), gates=EXAMPLE_GATES,
                  candidate="inferact-nvfp4/mtp3", incumbent="official-fp8/mtp3")
    assert len(s.performance) == len(example["performance"])
    for got, want in zip(s.performance, example["performance"], strict=True):
        shown = rounded(got)
        for key, value in want.items():
            if key.endswith("_delta_percent"):
                # the example's deltas agree with its rounded rows to one decimal
                assert got[key] == pytest.approx(value, abs=0.05), (want["model"], key)
            else:
                assert shown[key] == value, (want["model"], want["speculation"], key)
        # "not applicable" is absent, as in the example; the added fields are there
        has_deltas = want["speculation"] != "off"
        assert ("decode_delta_percent" in got) == has_deltas
        assert got["prompt_tokens_p50"] == pytest.approx(3610.0)
        assert got["runs"] == 5 and got["null_reasons"] == {}
    for row in s.performance[1::2]:  # each interval holds its delta; runs 2 % apart separate
        for stem in ("decode_delta", "e2e_delta"):
            low, high = row[f"{stem}_ci95_percent"]
            assert low < row[f"{stem}_percent"] < high
            assert row[f"{stem}_mann_whitney_p"] == pytest.approx(2 / 252)
    # the spec's worked deltas: 111.3 / 48.0 → +131.9 %, 954.2 / 1450.9 → −34.2 %
    fp8_mtp = s.performance[1]
    assert fp8_mtp["decode_delta_percent"] == pytest.approx(100 * (111.3 / 48.0 - 1), rel=1e-9)
    assert fp8_mtp["e2e_delta_percent"] == pytest.approx(100 * (954.2 / 1450.9 - 1), rel=1e-9)
    # the document's members are strict JSON (no NaN, no Infinity) and keep full precision
    assert strict_json_problems(s.to_json()) == []
    again = orjson.loads(orjson.dumps(s.to_json()))
    assert again["performance"][1]["decode_delta_percent"] == fp8_mtp["decode_delta_percent"]
    # the example's own decision, and why: 913.7 against 954.2 ms is a 4.2 % improvement
    assert s.decision == example["decision"] == "no-promotion"
    e2e = s.gates[0]
    assert e2e.outcome == "fail"
    assert e2e.figures["improvement_percent"] == pytest.approx(100 * (1 - 913.7 / 954.2))


def test_reproduces_the_example_protocol(example: dict[str, Any]) -> None:
    placements = ["first", "first", "first", "swapped", "swapped"]
    got = summarize(example_variants(example), gates={},
                    placements=placements).performance_protocol
    want = example["performance_protocol"]
    for key in ("requests_per_run", "runs_per_model", "concurrency", "configured_input_tokens",
                "max_output_tokens"):
        assert got[key] == want[key], key
    assert got["aggregation"] == (
        "mean of run medians across 3 first-placement and 2 swapped-placement runs")
    assert got["null_reasons"] == {}


def test_protocol_figures_the_runs_disagree_on_are_null() -> None:
    a, b = run(0), run(1)
    b["max_tokens"] = 512
    b["context_distribution"] = {"4096": 6, "8192": 6}
    got = summarize([VariantRuns("m", "off", [a, b]), VariantRuns("n", "off", [a])],
                    gates={}).performance_protocol
    assert got["max_output_tokens"] is None and "1024, 512" in got["null_reasons"][
        "max_output_tokens"]
    assert got["configured_input_tokens"] is None
    assert got["runs_per_model"] is None and got["concurrency"] == 1
    assert got["requests_per_run"] == BENCHMARK["requests"]
    assert got["aggregation"] == "mean of run medians"


def test_reproduces_the_example_telemetry(example: dict[str, Any]) -> None:
    s = summarize(example_variants(example), gates={})
    got = [rounded(r) for r in s.sampled_speculative_telemetry]
    want = example["sampled_speculative_telemetry"]
    assert [(r["model"], r["speculation"]) for r in got] == [
        ("official-fp8", "mtp3"), ("inferact-nvfp4", "mtp3")]
    for g, w in zip(got, want, strict=True):
        assert g["model"] == w["model"]
        assert g["accepted_length_range"] == w["accepted_length_range"]
        assert g["acceptance_rate_range"] == w["acceptance_rate_range"]
        assert g["runs_sampled"] == 5 and g["unsampled_runs"] == []


def test_a_row_is_the_mean_of_the_run_medians() -> None:
    v = VariantRuns("m", "off", [run(0, e2e_p50_ms=10.0, throughput_tok_s=1.0),
                                 run(1, e2e_p50_ms=20.0, throughput_tok_s=2.0),
                                 run(2, e2e_p50_ms=60.0, throughput_tok_s=6.0)])
    row = summarize([v], gates={}).performance[0]
    assert row["e2e_p50_ms"] == 30.0
    assert row["aggregate_output_tok_s"] == 3.0
    # the template's other figures are the same in each run, so their mean is that figure
    assert row["ttft_p50_ms"] == pytest.approx(BENCHMARK["metrics"]["ttft_p50_ms"])


def test_deltas_against_the_same_models_off_variant() -> None:
    off_a = e2e_variant("a", [100.0, 100.0], "off")
    on_a = e2e_variant("a", [80.0, 80.0])
    off_b = e2e_variant("b", [50.0, 50.0], "off")
    on_b = e2e_variant("b", [60.0, 60.0])
    rows = summarize([off_a, on_a, off_b, on_b], gates={}).performance
    assert rows[1]["e2e_delta_percent"] == pytest.approx(-20.0)
    assert rows[3]["e2e_delta_percent"] == pytest.approx(20.0)
    # identical runs: the interval is the point
    assert rows[1]["e2e_delta_ci95_percent"] == pytest.approx([-20.0, -20.0])
    # tied within each sample, so the normal approximation: U = 0, mean 2, σ² = 4/12 ×
    # (5 − 2 × (2³ − 2)/(4 × 3)) = 4/3, z = (2 − 0.5)/√(4/3) = 1.2990, p = erfc(z/√2)
    assert rows[1]["e2e_delta_mann_whitney_p"] == pytest.approx(0.193931, abs=1e-6)


# --- missing inputs: null with a reason, never 0 ------------------------------------------


def test_a_run_without_a_figure_makes_the_figure_null_with_the_run_named() -> None:
    runs = [run(0, e2e_p50_ms=10.0), run(1, e2e_p50_ms=None, rid="benchmark-x")]
    del runs[0]["metrics"]["prompt_tokens_p50"]
    row = summarize([VariantRuns("m", "off", runs)], gates={}).performance[0]
    assert row["e2e_p50_ms"] is None and "benchmark-x" in row["null_reasons"]["e2e_p50_ms"]
    assert row["prompt_tokens_p50"] is None
    assert "prompt_tokens_p50" in row["null_reasons"]["prompt_tokens_p50"]
    assert row["decode_tok_s_p50"] is not None  # the other figures stand


def test_no_off_variant_and_no_runs() -> None:
    lone = e2e_variant("a", [80.0, 81.0])
    empty = VariantRuns("b", "off", [])
    s = summarize([lone, empty], gates={})
    row, none = s.performance
    assert row["e2e_delta_percent"] is None and row["e2e_delta_ci95_percent"] is None
    assert "no speculation-off variant of a" in row["null_reasons"]["e2e_delta_percent"]
    assert none["e2e_p50_ms"] is None and none["runs"] == 0
    assert "has no runs" in none["null_reasons"]["e2e_p50_ms"]
    tele = s.sampled_speculative_telemetry[0]
    assert tele["accepted_length_range"] is None and tele["runs_sampled"] == 0
    assert "no run of a/mtp3 has server.spec_decode.accepted_length" in tele["null_reasons"][
        "accepted_length_range"]
    assert tele["unsampled_runs"] == [r["run_id"] for r in lone.runs]
    nothing = telemetry_row(VariantRuns("c", "mtp3", []))
    assert nothing["acceptance_rate_range"] is None and nothing["runs"] == 0
    assert "has no runs" in nothing["null_reasons"]["acceptance_rate_range"]


def test_delta_with_a_missing_reference_figure_is_null() -> None:
    off = VariantRuns("a", "off", [run(0, decode_tok_s_p50=None), run(1)])
    on = VariantRuns("a", "mtp3", [run(0), run(1)])
    row = summarize([off, on], gates={}).performance[1]
    assert row["decode_delta_percent"] is None and row["decode_delta_mann_whitney_p"] is None
    assert "a/off" in row["null_reasons"]["decode_delta_percent"]
    assert row["e2e_delta_percent"] == pytest.approx(0.0)


def test_telemetry_range_leaves_out_runs_without_it_and_says_so() -> None:
    runs = [run(0), run(1), run(2)]
    runs[0]["server"] = {"spec_decode": {"accepted_length": 2.5, "acceptance_rate": 0.5}}
    runs[1]["server"] = {"spec_decode": {"accepted_length": 3.5, "acceptance_rate": 0.8}}
    runs[2]["server"] = {"spec_decode": {"accepted_length": 3.0, "acceptance_rate": None}}
    runs.append(run(3))  # no server block at all
    row = telemetry_row(VariantRuns("m", "mtp3", runs))
    assert row["accepted_length_range"] == [2.5, 3.5]
    assert row["acceptance_rate_range"] == [0.5, 0.8]  # the null rate is not a 0
    assert row["runs_sampled"] == 3 and row["runs"] == 4
    assert row["unsampled_runs"] == [runs[2]["run_id"], runs[3]["run_id"]]
    assert row["null_reasons"] == {}


# --- statistics against hand-computed values ----------------------------------------------


def test_u_distribution_counts_by_hand() -> None:
    # 3 against 3: the 20 orderings by U (listed by hand: U = 0 once, 1 once, 2 twice, ...)
    assert _u_counts(3, 3) == [1, 1, 2, 3, 3, 3, 3, 2, 1, 1]
    assert _u_counts(1, 2) == [1, 1, 1]
    assert sum(_u_counts(5, 5)) == math.comb(10, 5)


@pytest.mark.parametrize(("x", "y", "u", "p"), [
    ([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], 25.0, 2 / 252),   # separated 5 vs 5: exact 2/C(10,5)
    ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], 0.0, 2 / 252),
    ([1, 2, 3], [4, 5, 6], 0.0, 2 / 20),
    ([1, 2, 4], [3, 5, 6], 1.0, 2 * 2 / 20),               # P(U ≤ 1) = (1 + 1) / 20
    ([1, 4, 5], [2, 3, 6], 4.0, 1.0),                      # U = 4 < mean 4.5: 2 × 10/20
])
def test_mann_whitney_exact(x: list[float], y: list[float], u: float, p: float) -> None:
    got = mann_whitney(x, y)
    assert got is not None and got.method == "exact"
    assert got.u == u
    assert got.p_two_sided == pytest.approx(p, rel=1e-12)


def test_mann_whitney_ties_use_the_corrected_normal_approximation() -> None:
    # pooled 1 2 3 3 4 5, ranks 1 2 3.5 3.5 5 6: R_x = 6.5, U = 6.5 − 6 = 0.5; mean 4.5;
    # σ² = 9/12 × (7 − (2³ − 2)/(6 × 5)) = 0.75 × 6.8 = 5.1; z = (4 − 0.5)/√5.1 = 1.5498
    got = mann_whitney([1, 2, 3], [3, 4, 5])
    assert got is not None and got.method.startswith("normal")
    assert got.u == 0.5
    assert got.p_two_sided == pytest.approx(0.121183, abs=1e-6)
    assert mann_whitney([2, 2], [2, 2]).p_two_sided == 1.0  # type: ignore[union-attr]
    assert mann_whitney([], [1.0]) is None


def test_bootstrap_interval_contains_the_truth_and_is_seeded() -> None:
    # runs scattered ±2 % around 80 and 100: the true delta of the means is −20 %
    x = [80 * (1 + o) for o in OFFSETS]
    r = [100 * (1 - o) for o in OFFSETS]
    truth = delta_percent(x, r)
    assert truth == pytest.approx(-20.0)
    a = bootstrap_delta_ci(x, r, seed=7)
    assert a.low_percent is not None and a.high_percent is not None
    assert a.low_percent < -20.0 < a.high_percent
    assert a.high_percent - a.low_percent < 5.0  # a ±2 % scatter cannot give a wide interval
    assert bootstrap_delta_ci(x, r, seed=7) == a  # the same bits for the same seed
    assert bootstrap_delta_ci(x, r, seed=8) != a
    one = bootstrap_delta_ci([1.0], r, seed=7)
    assert one.as_list() is None and "at least 2 runs" in (one.reason or "")


def test_bootstrap_percentiles_by_hand() -> None:
    # 3 runs at 90, 100, 110 against a constant 100: a resample's mean is (sum of 3 draws)/3,
    # so the delta is −10 % with probability 1/27 (3.7 %), −6.67 % with 3/27, −3.33 % with 6/27
    # and so on symmetrically. 3.7 % > 2.5 %: the 95 % interval is exactly [−10, +10]; a 90 %
    # interval ends inside the ±6.67 % mass (P(≤ −10) = 3.7 % < 5 % < P(≤ −6.67) = 14.8 %).
    x, r = [90.0, 100.0, 110.0], [100.0, 100.0, 100.0]
    assert bootstrap_delta_ci(x, r, seed=3).as_list() == pytest.approx([-10.0, 10.0])
    ninety = bootstrap_delta_ci(x, r, seed=3, confidence=0.90).as_list()
    assert ninety == pytest.approx([-20 / 3, 20 / 3])


# --- gates -------------------------------------------------------------------------------


def gate_campaign(candidate_e2e: list[float], incumbent_e2e: list[float],
                  **gates: Any) -> Any:
    cand, inc = e2e_variant("new", candidate_e2e), e2e_variant("old", incumbent_e2e)
    return summarize([inc, cand], gates=gates or {"e2e_p50_improvement_percent": 10,
                                                  "no_saturated_runs": True},
                     candidate="new/mtp3", incumbent="old/mtp3", seed=1)


def test_promotion_when_the_interval_clears_the_threshold() -> None:
    s = gate_campaign([79.0, 80.0, 81.0, 80.5, 79.5], [100.0, 99.0, 101.0, 100.5, 99.5])
    e2e, sat = s.gates
    assert e2e.outcome == "pass" and sat.outcome == "pass"
    assert e2e.figures["improvement_percent"] == pytest.approx(20.0)
    low, high = e2e.figures["improvement_ci95_percent"]
    assert 10 < low < 20.0 < high
    assert e2e.figures["mann_whitney_p"] == pytest.approx(2 / 252)
    assert s.decision == "promotion"


def test_not_significant_when_the_interval_crosses_the_threshold() -> None:
    # a 12 % mean improvement, but runs scattered from 70 to 106: the interval contains 10
    s = gate_campaign([70.0, 106.0, 75.0, 100.0, 89.0], [100.0, 99.0, 101.0, 100.5, 99.5])
    e2e = s.gates[0]
    assert e2e.figures["improvement_percent"] == pytest.approx(12.0)
    low, high = e2e.figures["improvement_ci95_percent"]
    assert low < 10 < high
    assert e2e.outcome == "not_significant" and "not significant" in e2e.reason
    assert s.decision == "no-promotion"
    assert any("not_significant" in why for why in s.decision_reasons)


def test_fail_when_the_interval_is_below_the_threshold() -> None:
    s = gate_campaign([95.0, 96.0, 95.5, 94.5, 95.0], [100.0, 99.0, 101.0, 100.5, 99.5])
    assert s.gates[0].outcome == "fail" and s.decision == "no-promotion"


def test_decode_improvement_is_higher_is_better() -> None:
    cand = VariantRuns("new", "mtp3", [run(i, decode_tok_s_p50=v) for i, v in
                                       enumerate([130.0, 131.0, 129.0])])
    inc = VariantRuns("old", "mtp3", [run(i, decode_tok_s_p50=v) for i, v in
                                      enumerate([100.0, 101.0, 99.0])])
    s = summarize([inc, cand], gates={"decode_p50_improvement_percent": 20},
                  candidate="new/mtp3", incumbent="old/mtp3")
    assert s.gates[0].figures["improvement_percent"] == pytest.approx(30.0)
    assert s.gates[0].outcome == "pass"


def test_saturated_or_unknown_runs() -> None:
    cand = e2e_variant("new", [80.0, 80.0])
    inc = e2e_variant("old", [100.0, 100.0])
    cand.runs[1]["client"]["saturated"] = True
    s = summarize([inc, cand], gates={"no_saturated_runs": True})
    assert s.gates[0].outcome == "fail" and s.decision == "no-promotion"
    assert cand.runs[1]["run_id"] in s.gates[0].reason
    cand.runs[1]["client"]["saturated"] = None
    assert summarize([inc, cand], gates={"no_saturated_runs": True}).gates[0].outcome == (
        "not_evaluated")
    off = summarize([inc, cand], gates={"no_saturated_runs": False})
    assert off.gates[0].outcome == "not_required" and off.decision is None


def test_functional_gate_and_missing_inputs() -> None:
    v = [e2e_variant("new", [80.0, 80.0]), e2e_variant("old", [100.0, 100.0])]
    gates = {"functional": "all_pass"}
    assert summarize(v, gates=gates).gates[0].outcome == "not_evaluated"
    assert summarize(v, gates=gates, functional={"json": True, "tools": True}).decision == (
        "promotion")
    bad = summarize(v, gates=gates, functional={"json": True, "tools": False})
    assert bad.gates[0].outcome == "fail" and bad.gates[0].figures["failed"] == ["tools"]
    # no candidate named: the improvement gate cannot pass
    s = summarize(v, gates={"e2e_p50_improvement_percent": 10})
    assert s.gates[0].outcome == "not_evaluated" and s.decision == "no-promotion"
    assert summarize(v, gates={}).decision is None


def test_bad_campaign_inputs_are_refused() -> None:
    v = [e2e_variant("new", [80.0, 80.0])]
    with pytest.raises(UsageError, match="unknown gate"):
        summarize(v, gates={"p99_improvement": 3})
    with pytest.raises(UsageError, match="names no variant"):
        summarize(v, gates={}, candidate="nope/off")
    with pytest.raises(UsageError, match="given twice"):
        summarize(v + v, gates={})
    with pytest.raises(UsageError, match="must be a number"):
        summarize(v, gates={"e2e_p50_improvement_percent": "ten"})


# --- retained failures and display rounding ----------------------------------------------


def test_retained_failures_in_words() -> None:
    doc = run(0, rid="benchmark-r1")
    doc["requests"] = 10
    doc["failures"] = [
        {"request_index": 3, "kind": "http_error", "http_status": 503, "message": "busy"},
        {"request_index": 5, "kind": "http_error", "http_status": 500, "message": "boom"},
        {"request_index": 7, "kind": "timeout", "http_status": None, "message": "slow"}]
    doc["client"] = {"saturated": True, "verdict": "saturated: loop lag p99 80 ms"}
    doc["partial"] = True
    lines = run_failures(VariantRuns("m", "off", [doc, run(1)]))
    assert lines == [
        "Run benchmark-r1 of m/off: 3 of 10 requests failed: 2 http_error (HTTP 500, 503), "
        "1 timeout.",
        "Run benchmark-r1 of m/off: the load generator was saturated (saturated: loop lag "
        "p99 80 ms); its latencies may include the client's own delays.",
        "Run benchmark-r1 of m/off: rebuilt from the raw records of a run that did not finish."]


def test_display_rounding() -> None:
    row = {"model": "m", "effective_prefill_tok_s_p50": 6511.6, "e2e_p50_ms": 954.24,
           "acceptance_rate_range": [0.7812, 0.8449], "e2e_delta_percent": None}
    assert rounded(row) == {"model": "m", "effective_prefill_tok_s_p50": 6512,
                            "e2e_p50_ms": 954.2, "acceptance_rate_range": [0.78, 0.84],
                            "e2e_delta_percent": None}
    assert isinstance(rounded(row)["effective_prefill_tok_s_p50"], int)
    assert DISPLAY_DECIMALS["decode_delta_percent"] == 1


def test_a_deltas_verdict_needs_the_minimum_effect_too() -> None:
    """The rule of `anvil compare` on the deltas between variants, 2 % a margin: −20 % on
    tight runs is better (e2e is a time), +1 % on tight runs is beyond noise but equivalent,
    a wide spread straddling the margin is inconclusive."""
    off = e2e_variant("a", [100.0, 100.2, 99.8, 100.0], "off")
    for values, verdict in (([80.0, 80.1, 79.9, 80.0], "better"),
                            ([120.0, 120.1, 119.9, 120.0], "worse"),
                            ([101.0, 101.1, 100.9, 101.0], "equivalent"),
                            ([90.0, 110.0, 95.0, 105.0], "inconclusive")):
        row = summarize([off, e2e_variant("a", values)], gates={}).performance[1]
        assert row["e2e_delta_verdict"] == verdict, (values, row)
        if verdict == "equivalent":
            assert row["e2e_delta_ci95_percent"][0] > 0  # beyond noise, inside the margin
    alone = summarize([e2e_variant("b", [80.0, 80.0])], gates={}).performance[0]
    assert alone["e2e_delta_verdict"] is None
