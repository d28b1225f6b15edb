"""The frontier (report/frontier.py): the Pareto rule, and a sweep's points are its steps'
own figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from anvil_metrics.post.postprocess import RAW_FILE, postprocess_run
from anvil_metrics.report.frontier import Curve, Point, frontier_section, pareto, sweep_curve
from anvil_metrics.report.runfigs import load_run

STEPS = Path(__file__).resolve().parents[2] / "fixtures" / "postprocess" / "steps"


def test_a_point_is_optimal_unless_another_is_higher_on_both() -> None:
    xy = [(10.0, 100.0), (20.0, 50.0), (5.0, 90.0), (20.0, 100.0), (None, 500.0), (1.0, None)]
    assert pareto(xy) == [False, False, False, True, False, False]
    # higher on one and equal on the other dominates; a tie everywhere keeps both
    assert pareto([(1.0, 2.0), (1.0, 3.0), (2.0, 1.0)]) == [False, True, True]
    assert pareto([(3.0, 3.0), (3.0, 3.0)]) == [True, True]
    assert pareto([]) == []


def test_a_sweeps_points_are_its_steps_own_figures(tmp_path: Path) -> None:
    shutil.copy(STEPS / RAW_FILE, tmp_path / RAW_FILE)
    lines = (tmp_path / RAW_FILE).read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["params"]["gpus"] = 2
    (tmp_path / RAW_FILE).write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    written = json.loads(postprocess_run(tmp_path).path.read_text())
    d = load_run(tmp_path)
    curve = sweep_curve(d.doc, d.rows, "sweep")
    assert len(curve.points) == len(written["steps"]) >= 2
    for p, s in zip(curve.points, written["steps"], strict=True):
        assert (p.x, p.y) == (s["metrics"]["decode_tok_s_p50"],
                              s["metrics"]["output_tok_s_per_gpu"])
        assert p.load == s["users"]
        assert p.x_band is not None and p.x_band[0] <= p.x <= p.x_band[1]
        assert p.y_band is not None and p.y_band[0] <= p.y <= p.y_band[1]
    section = frontier_section([curve], ["benchmark.json"])
    assert [f.name for f in section.figures] == ["frontier.png"]  # no energy block: no chart
    assert section.tables[0].rows[0][3] != "null"


def test_the_energy_chart_is_drawn_only_with_an_energy_figure() -> None:
    a = Curve("fp8", (Point("run 1", 4.0, 50.0, 900.0, j_per_token=0.4),
                      Point("run 2", 16.0, 30.0, 2000.0, j_per_token=0.25)))
    b = Curve("nvfp4", (Point("run 1", 4.0, 60.0, 1000.0),))
    section = frontier_section([a, b], ["x"])
    assert [f.name for f in section.figures] == ["frontier.png", "energy-per-token.png"]
    assert [r[5] for r in section.tables[0].rows] == ["", "yes", "yes"]
