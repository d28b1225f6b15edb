"""`anvil report` of a run, against runs whose every stamp is known (tests/rawbuild.py).

What must hold: the requests drawn are the ones the document counts, in its order, on the
master's clock (a worker's measured offset applied); a CDF reaches each percentile exactly
at the document's nearest-rank value; the in-flight count is +1 per start and −1 per end;
the page holds every PNG it wrote, byte for byte, and names its sources with their SHA-256;
a folder whose benchmark.json disagrees with its raw file is refused; bad input is one line
with exit code 2; without matplotlib the command names the extra to install.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.cli.main import main
from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import dump_line
from anvil_metrics.post import stats
from anvil_metrics.post.postprocess import postprocess_run
from anvil_metrics.records import Failure
from anvil_metrics.report import draw, runfigs
from anvil_metrics.report.build import folder_kind, make_report
from anvil_metrics.report.page import cell

ANCHOR = HEADER["perf_anchor_ns"]
OFFSET = 7_000_000  # worker w:1's clock is 7 ms behind the master's


def make_run(folder: Path) -> Path:
    """8 measured requests (index 5 failed by timeout, 2 and 6 from worker w:1 with a
    measured offset), 2 warm-ups first; varied latencies so percentiles differ."""
    folder.mkdir(parents=True, exist_ok=True)
    recs = [completed(0, warmup=True), completed(1, warmup=True)]
    for i in range(8):
        start = ANCHOR + 50_000_000 + i * 20_000_000
        if i == 5:
            recs.append(failed(i + 2, start_ns=start, failure=Failure(
                kind="timeout", message="no data", phase="decode"), http_status=200,
                end_ns=start + 9_000_000))
            continue
        ttfo = (1 + i) * 1_000_000
        worker = "w:1" if i in (2, 6) else None
        recs.append(completed(i + 2, start_ns=start, first_output_ns=start + ttfo,
                              first_content_ns=start + 2 * ttfo, end_ns=start + 3 * ttfo + 1,
                              worker=worker,
                              usage={"prompt_tokens": 100 + i, "completion_tokens": 6 + i}))
    write_raw(folder / "requests.jsonl", HEADER, recs)
    raw = folder / "requests.jsonl"
    lines = raw.read_bytes().splitlines(keepends=True)
    worker = dump_line({"type": "worker", "worker": "w:1", "client_id": "c1", "host": "w",
                        "pid": 1, "clock": "ping", "perf_offset_ns": OFFSET,
                        "offset_uncertainty_ns": 1000})
    raw.write_bytes(lines[0] + worker + b"".join(lines[1:]))
    postprocess_run(folder)
    return folder


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("run") / "benchmark-20260801T160039Z")


def test_the_requests_drawn_are_the_documents_in_its_order(run_dir: Path) -> None:
    d = runfigs.load_run(run_dir)
    doc = orjson.loads((run_dir / "benchmark.json").read_bytes())
    assert len(d.start_s) == doc["requests"] == 8
    assert d.failed.tolist() == [i == 5 for i in range(8)]
    assert d.failure_kind.tolist() == ["timeout" if i == 5 else "" for i in range(8)]
    for i in range(8):
        start = 50_000_000 + i * 20_000_000 + (OFFSET if i in (2, 6) else 0)
        assert d.start_s[i] == start / 1e9
        if i != 5:
            ttfo = (1 + i) * 1_000_000
            assert d.first_output_s[i] == (start + ttfo) / 1e9
            assert d.end_s[i] == (start + 3 * ttfo + 1) / 1e9
    assert np.isnan(d.first_output_s[5])
    assert d.output_tokens[~d.failed].tolist() == [6 + i for i in range(8) if i != 5]
    rows = doc["request_timings"]
    assert d.rows.values("ttft_ms").tolist() == [r["ttft_ms"] for r in rows]


def test_in_flight_counts_starts_and_ends(run_dir: Path) -> None:
    d = runfigs.load_run(run_dir)
    t, flight = runfigs._in_flight(d)
    starts, ends = d.start_s, d.end_s
    for at, n in zip(t.tolist(), flight.tolist(), strict=True):
        # just after `at`: started at or before it, not ended at or before it
        assert n == np.sum(starts <= at) - np.sum(ends <= at)
    assert flight[-1] == 0


def test_a_cdf_reaches_each_percentile_at_its_nearest_rank_value() -> None:
    rng = np.random.default_rng(3)
    values = rng.lognormal(3, 1, 997)
    values[::50] = np.nan  # missing values are not requests of the CDF
    fig, axes = draw.new()
    draw.cdf(axes[0][0], values, "x")
    line = axes[0][0].get_lines()[0]
    x, y = line.get_xdata(), line.get_ydata()
    draw.png(fig)
    present = values[np.isfinite(values)].tolist()
    for p in (1, 50, 90, 95, 99, 100):
        first = x[np.flatnonzero(y >= p / 100 - 1e-12)[0]]
        assert first == stats.nearest_rank(present, p)


def test_the_page_holds_its_pngs_and_names_its_sources(run_dir: Path, tmp_path: Path
                                                       ) -> None:
    r = make_report(run_dir, tmp_path / "out")
    assert r.kind == "run" and r.html_path == tmp_path / "out" / "report.html"
    html = r.html_path.read_text()
    names = [p.name for p in r.png_paths]
    assert names == ["latency-cdf.png", "prefill.png", "decode.png", "timeline.png",
                     "load-over-time.png", "client-health.png"]  # no server samples here
    inline = re.findall(r'<figure id="([^"]+)">.*?src="data:image/png;base64,([^"]+)"', html)
    assert [n for n, _ in inline] == names
    for name, data in inline:
        assert base64.b64decode(data) == (tmp_path / "out" / name).read_bytes()
    for src in ("requests.jsonl", "benchmark.json"):
        digest = hashlib.sha256((run_dir / src).read_bytes()).hexdigest()
        assert f"<td>{src}</td><td>{(run_dir / src).stat().st_size}</td>" in html
        assert digest in html
    assert re.search(r"anvil \S+ \((commit [0-9a-f]{12}|not a git checkout)", html)
    assert "default-src &#x27;none&#x27;" in html  # the CSP, escaped in its attribute
    # the p50 the table shows is the document's
    doc = orjson.loads((run_dir / "benchmark.json").read_bytes())
    assert f"{doc['metrics']['ttft_p50_ms']:,.2f}" in html


def test_a_benchmark_that_differs_from_its_raw_file_is_refused(run_dir: Path,
                                                               tmp_path: Path) -> None:
    copy = tmp_path / "run"
    copy.mkdir()
    (copy / "requests.jsonl").write_bytes((run_dir / "requests.jsonl").read_bytes())
    doc = orjson.loads((run_dir / "benchmark.json").read_bytes())
    doc["metrics"]["ttft_p50_ms"] += 1.0
    (copy / "benchmark.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    with pytest.raises(UsageError, match=r"metrics differ .*`anvil postprocess"):
        make_report(copy, tmp_path / "out")
    assert not (tmp_path / "out" / "report.html").exists()


def test_folder_kinds_and_bad_paths(run_dir: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert folder_kind(run_dir) == "run"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "capacity.json").write_text("{}")
    assert folder_kind(tmp_path / "c") == "capacity"
    for bad, says in ((tmp_path / "nope", "is not a folder"),
                      (tmp_path, "holds no requests.jsonl, capacity.json or campaign.json")):
        assert main(["report", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err and "Traceback" not in err
    (tmp_path / "file").write_text("x")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "file")]) == 2
    assert "--out" in capsys.readouterr().err


def test_without_matplotlib_the_extra_is_named(run_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    assert main(["report", str(run_dir), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'anvil-metrics[report]'" in err and err.count("\n") == 1


def test_a_sweep_draws_its_steps_from_the_document(tmp_path: Path) -> None:
    """Two steps (1 then 2 users), criteria given: the page is a sweep's, its steps table
    holds the document's step figures and its first figure is the steps'."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    header = {**HEADER, "params": {**HEADER["params"], "goodput": ["ttft_ms<=3"]}}
    recs = []
    for i in range(6):
        start = ANCHOR + 10_000_000 + i * 20_000_000
        ttfo = (1 + i % 3) * 1_000_000
        recs.append(completed(i, start_ns=start, first_output_ns=start + ttfo,
                              first_content_ns=start + 2 * ttfo, end_ns=start + 3 * ttfo))
    write_raw(folder / "requests.jsonl", header, recs)
    raw = folder / "requests.jsonl"
    lines = raw.read_bytes().splitlines(keepends=True)
    step = [dump_line({"type": "step", "step": k, "t_ns": ANCHOR + k * 60_000_000,
                       "users": k + 1, "rate": None}) for k in range(2)]
    end = dump_line({"type": "step_end", "t_ns": ANCHOR + 130_000_000})
    raw.write_bytes(lines[0] + step[0] + b"".join(lines[1:4]) + step[1]
                    + b"".join(lines[4:]) + end)
    postprocess_run(folder)
    doc = orjson.loads((folder / "benchmark.json").read_bytes())
    assert [s["requests"] for s in doc["steps"]] == [3, 3]
    r = make_report(folder, tmp_path / "out")
    assert r.kind == "sweep" and r.png_paths[0].name == "steps.png"
    html = r.html_path.read_text()
    assert "<h2>The sweep</h2>" in html
    for s in doc["steps"]:
        cells = (f"<td>{s['step']}</td><td>{s['users']} users</td>"
                 f"<td>{s['started_s']:.2f}–{s['ended_s']:.2f}</td><td>{s['requests']}</td>")
        assert cells in html
        assert f"<td>{cell(s['metrics']['ttft_p95_ms'])}</td>" in html
