"""`compare_runs` against changes planted in known rows: a 20 % slower TTFT is found, beyond
noise and worse; the very same rows in another order are a change of exactly 0, noise; an
independent draw of the same distribution is noise too; the same inputs and seed give the
same document; and a run that is no benchmark is one line naming it.

Why rows built from raw records: the documents are then what `anvil run` writes (the same
`build`), so each compared value is the file's own figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from comparebuild import run_of

from anvil_metrics.compare.runs import (
    PERCENTILE_FIGURES,
    RUN_FIGURES,
    SCHEMA,
    compare_runs,
    read_run,
)
from anvil_metrics.errors import UsageError


def ttft(result: dict, name: str = "ttft_p50_ms") -> dict:
    (figure,) = [f for f in result["figures"] if f["name"] == name]
    return figure


@pytest.fixture(scope="module")
def draws() -> np.ndarray:
    return np.random.default_rng(11).lognormal(np.log(100), 0.2, 300)


def test_a_planted_20_percent_slower_ttft_is_beyond_noise_and_worse(tmp_path: Path,
                                                                    draws) -> None:
    result = compare_runs([run_of(tmp_path / "a", draws), run_of(tmp_path / "b", draws * 1.2)])
    f = ttft(result)
    v = f["vs_baseline"][1]
    assert v["delta_pct"] == pytest.approx(20.0, abs=0.01)  # the same draws, each × 1.2
    assert v["beyond_noise"] is True and v["change"] == "worse"
    assert v["ci"][0] > 0 and v["ci"][0] <= v["delta"] <= v["ci"][1]
    assert f["better"] == "lower" and f["unit"] == "ms"
    p95 = ttft(result, "ttft_p95_ms")["vs_baseline"][1]
    assert p95["beyond_noise"] is True and p95["delta_pct"] == pytest.approx(20, abs=0.01)


def test_the_same_rows_in_another_order_are_a_change_of_0_and_noise(tmp_path: Path,
                                                                     draws) -> None:
    shuffled = np.random.default_rng(12).permutation(draws)
    result = compare_runs([run_of(tmp_path / "a", draws), run_of(tmp_path / "b", shuffled)])
    for f in result["figures"]:
        v = f["vs_baseline"][1]
        if f["name"] == "throughput_tok_s":  # of the wall clock too, which the order moves
            continue
        assert v["delta"] == 0.0, f["name"]
        if v["ci"] is not None:
            assert v["ci"][0] <= 0.0 <= v["ci"][1] and v["beyond_noise"] is False, f["name"]
            assert v["change"] is None


def test_an_independent_draw_of_the_same_server_is_noise(tmp_path: Path, draws) -> None:
    other = np.random.default_rng(13).lognormal(np.log(100), 0.2, 300)
    result = compare_runs([run_of(tmp_path / "a", draws), run_of(tmp_path / "b", other)])
    for name in ("ttft_p50_ms", "ttft_p95_ms", "e2e_p50_ms"):
        v = ttft(result, name)["vs_baseline"][1]
        assert v["beyond_noise"] is False, (name, v)


def test_the_document_is_the_same_for_the_same_runs_and_seed(tmp_path: Path, draws) -> None:
    runs = [run_of(tmp_path / "a", draws), run_of(tmp_path / "b", draws * 1.05),
            run_of(tmp_path / "c", draws * 0.9)]
    first = compare_runs(runs, seed=3)
    assert compare_runs(runs, seed=3) == first
    assert first["schema"] == SCHEMA and first["baseline"] == 0
    assert [r["path"] for r in first["runs"]] == [str(r.path) for r in runs]
    assert all(len(f["values"]) == len(f["vs_baseline"]) == 3 for f in first["figures"])
    assert all(f["vs_baseline"][0] is None for f in first["figures"])
    names = [f["name"] for f in first["figures"]]
    order = [name for name, _, _ in PERCENTILE_FIGURES]
    cut = names.index("throughput_tok_s")  # then the run figures: one value a run
    assert names[:cut] == sorted(names[:cut], key=order.index)  # the catalogue's order
    assert names[cut:] == [n for n in RUN_FIGURES if n in names[cut:]]
    assert ttft(first, "throughput_tok_s")["vs_baseline"][1]["ci"] is None
    assert ttft(first)["vs_baseline"][2]["change"] == "better"


def test_a_run_that_is_not_there_or_no_benchmark_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no benchmark.json there"):
        read_run(tmp_path / "nothing")
    (tmp_path / "x.json").write_text('{"schema": "something else"}')
    with pytest.raises(UsageError, match="not a well-formed benchmark/v1 file"):
        read_run(tmp_path / "x.json")
    with pytest.raises(UsageError, match="1 run given; pass two or more"):
        compare_runs([run_of(tmp_path / "a", np.full(5, 100.0))])


def test_the_energy_blocks_joules_per_token_is_compared(tmp_path: Path, draws) -> None:
    """A run figure outside `metrics` (energy.j_per_output_token: summaryfigures'
    BLOCK_FIGURES) is read from its block, in its direction, and printed with its unit."""
    from anvil_metrics.compare.text import compare_lines

    runs = [run_of(tmp_path / "a", draws), run_of(tmp_path / "b", draws)]
    for run, joules in zip(runs, (0.5, 0.4), strict=True):
        run.doc["energy"] = {"j_per_output_token": joules}
    got = compare_runs(runs, seed=1)
    j = next(f for f in got["figures"] if f["name"] == "j_per_output_token")
    assert (j["unit"], j["better"], j["values"]) == ("J/tok", "lower", [0.5, 0.4])
    assert j["vs_baseline"][1]["change"] == "better"
    assert any(line.startswith("j_per_output_token (J/tok)") and " 0.5 " in line
               for line in compare_lines(got))
