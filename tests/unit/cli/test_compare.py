"""`anvil compare` from the command line: the table, `--json` (the document `compare_runs`
gives), `-o` (the same, written), and each user mistake one line on stderr with exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from comparebuild import run_of

from anvil_metrics.cli.main import main
from anvil_metrics.compare.runs import compare_runs


def test_text_json_and_output_file(tmp_path: Path, capsys) -> None:
    draws = np.random.default_rng(31).lognormal(np.log(100), 0.2, 100)
    runs = [run_of(tmp_path / "a", draws), run_of(tmp_path / "b", draws * 1.2)]
    assert main(["compare", str(tmp_path / "a"), str(runs[1].path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A  ") and "* worse" in out
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", "--seed", "4",
                 "-o", str(tmp_path / "c.json")]) == 0
    printed = orjson.loads(capsys.readouterr().out)
    assert printed == orjson.loads((tmp_path / "c.json").read_bytes())
    want = compare_runs(runs, seed=4)
    assert printed["figures"] == want["figures"] and printed["seed"] == 4


def test_mistakes_are_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    run_of(tmp_path / "a", np.full(10, 100.0))
    for argv, words in (
            (["compare", str(tmp_path / "a")], "1 run given; pass two or more"),
            (["compare", str(tmp_path / "a"), str(tmp_path / "none")], "no benchmark.json")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    with pytest.raises(SystemExit) as exc:  # argparse's own one line, after the usage
        main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--resamples", "5"])
    assert exc.value.code == 2
    assert "--resamples '5' is not allowed; expected a whole number >= 100" in (
        capsys.readouterr().err.strip().splitlines()[-1])
