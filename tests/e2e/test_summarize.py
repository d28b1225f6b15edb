"""`anvil summarize` end to end against known truth (issue 17's acceptance).

Two simulators stand for one model served with speculation off (a token every 10 ms) and
on ("mtp3": every 5 ms, with speculative counters, K = 3, A = 0.7). A real `anvil campaign
run` makes three runs of each, interleaved (one process for the six: a run's own `anvil`
process would cost ~0.5 CPU-s more each, and the campaign runs Locust as `anvil run` does);
each test summarizes copies of them under a campaign.json whose e2e gate has the threshold
it needs; `anvil summarize` (a real process) must then give:

- the deltas the simulators delivered, from their own send stamps (`--stamp-send`) for the
  same requests, aggregated as the summary aggregates (each run's nearest-rank median, the
  mean over runs), within the range the client's own recorded loop lag allows
  (`delivered`; seen on a calm machine: within 1 percentage point; beside busy ones the
  kernel delivered chunks late and together, which the send stamps account for, and the
  client's loop lagged, which its monitor records); the simulators' own lateness on a busy
  machine is theirs (tests/e2e/test_sim.py), so the plan they were told (decode rate =
  1000 / interval tok/s, so +100 %; e2e = prefill + (tokens − 1) × interval, so
  (100 + 29·5) / (100 + 29·10) − 1 = −37.2 %) is only a loose check that they followed it;
- acceptance rates equal to the simulator's own draft account (`sim/specdecode.spec_counts`);
- the decision the gates call for: promotion when the threshold is far below the real
  improvement; no-promotion when the threshold is the measured improvement itself, so the
  95 % interval must contain it (a gate failing on a non-significant delta, whatever the
  noise of this machine — a threshold at the configured truth could fall just outside a
  narrow interval and make the test flaky).
"""

from __future__ import annotations

import hashlib
import html
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario
from jsonschema import Draft202012Validator
from report_view import view_report
from sendstamps import lag_bounds_ms, readable_ns
from simfork import start_simulator

from anvil_metrics.errors import UsageError
from anvil_metrics.post.significance import mean
from anvil_metrics.post.stats import nearest_rank
from anvil_metrics.report.build import make_report
from anvil_metrics.schemas.build import FILES, shipped
from anvil_metrics.sim.specdecode import spec_counts
from anvil_metrics.summary.folder import read_campaign_folder, summary_document, write_summary
from anvil_metrics.summary.markdown import markdown

pytestmark = pytest.mark.e2e

PREFILL_MS, TOKENS, OFF_MS, ON_MS, SPEC_K, SPEC_A = 100.0, 30, 10.0, 5.0, 3, 0.7
TRUE_DECODE_DELTA = 100 * ((1000 / ON_MS) / (1000 / OFF_MS) - 1)
TRUE_E2E_DELTA = 100 * ((PREFILL_MS + (TOKENS - 1) * ON_MS)
                        / (PREFILL_MS + (TOKENS - 1) * OFF_MS) - 1)
SCENARIO = """
measurement_protocol = "campaign-e2e"
concurrency = 2
requests = 6
warmup_requests = 2
max_tokens = 64
context_tokens = 8192
max_context_tokens = 8192
[context_distribution]
512 = 6
[request]
include_usage = true
"""
CAMPAIGN = """
name = "sim-off-vs-mtp3"
scenario = "{scenario}"
runs_per_variant = 3
placements = ["first", "first", "swapped"]
order = "interleaved"
baseline = "m/off"
candidate = "m/mtp3"
incumbent = "m/off"

[facts.hardware]
gpu = "none: the simulator"
count = 0

[[variants]]
model = "m"
served_model = "sim"
speculation = "off"
host = "{off}"
gpus = 2
gpu_hour_price = 2.0

[[variants]]
model = "m"
served_model = "sim"
speculation = "mtp3"
host = "{on}"
gpus = 1

[gates]
e2e_p50_improvement_percent = {threshold}
no_saturated_runs = true
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], dict]:
    """(a campaign folder of six run folders, campaign.json's runs, the campaign's fields)."""
    root = tmp_path_factory.mktemp("campaign")
    scenario = write_scenario(root / "scenario.toml", SCENARIO)
    common = ["--model", "sim", "--prefill-ms", str(PREFILL_MS), "--reasoning-tokens", "0",
              "--content-tokens", str(TOKENS), "--max-context", "8192", "--stamp-send"]
    with start_simulator([*common, "--interval-ms", str(OFF_MS)]) as off, \
            start_simulator([*common, "--interval-ms", str(ON_MS), "--spec-k", str(SPEC_K),
                             "--spec-accept", str(SPEC_A)]) as on:
        fields = {"scenario": str(scenario), "off": off.url, "on": on.url}
        (root / "campaign.toml").write_text(CAMPAIGN.format(threshold=20, **fields))
        proc = anvil("campaign", "run", str(root / "campaign.toml"), "--results-dir",
                     str(root), timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = root / "sim-off-vs-mtp3"
    entries = load_json(folder / "campaign.json")["runs"]
    assert [(e["folder"], e["variant"], e["run_index"], e["placement"], e["state"])
            for e in entries] == [
        (f"{k}-m-{spec}-run{i}", f"m/{spec}", i, ["first", "first", "swapped"][i - 1], "done")
        for k, (i, spec) in enumerate([(i, s) for i in (1, 2, 3) for s in ("off", "mtp3")], 1)]
    return folder, entries, fields


@pytest.fixture(scope="module")
def summarized(runs, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """The runs summarized under an e2e threshold of 20 %, far below the improvement:
    (the folder, summary.json, summary.md). Tests only read it; one that changes a file
    copies the folder first."""
    folder = campaign_dir(tmp_path_factory.mktemp("summarized"), runs, threshold=20)
    return (folder, *summarize(folder))


def campaign_dir(tmp_path: Path, runs: tuple[Path, list[dict], dict], threshold: float
                 ) -> Path:
    """A campaign folder holding copies of the module's runs and a campaign.json whose
    e2e gate has this threshold."""
    root, entries, fields = runs
    out = tmp_path / "camp"
    out.mkdir(parents=True)
    for e in entries:
        shutil.copytree(root / e["folder"], out / e["folder"])
    toml = CAMPAIGN.format(threshold=threshold, **fields)
    (tmp_path / "campaign.toml").write_text(toml)
    (out / "campaign.json").write_bytes(orjson.dumps({
        "schema": "anvil-campaign/v1", "name": "sim-off-vs-mtp3",
        "campaign_file": str(tmp_path / "campaign.toml"), "campaign_toml": toml,
        "scenario_file": fields["scenario"], "runs": entries, "redone": []}))
    return out


def summarize(folder: Path) -> tuple[dict, str]:
    proc = anvil("summarize", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    path = result_path(proc)
    assert path == folder / "summary.json"
    return load_json(path), (folder / "summary.md").read_text()


Range = tuple[float, float]


def delivered(runs: tuple[Path, list[dict], dict]) -> dict[str, dict[str, Range]]:
    """What a client could have measured of what the simulators delivered, per variant, as
    the summary aggregates it (the mean over the variant's runs of each run's nearest-rank
    median), for the decode rate and end to end: a (low, high) range.

    Each measured request's truth is its send stamps (`sendstamps.readable_ns`): generation
    from when its first output could be read to the last send, end to end from anvil's start
    to the last send. Each of anvil's stamps is later than that by up to its run's
    every-request lag bound (`sendstamps.lag_bounds_ms`, from the run's own loop lag): the
    generation by up to that bound either way, end to end by up to it. A nearest-rank median
    and a mean are monotone in each value, so the aggregate of the lows and of the highs
    bound what anvil may report."""
    root, entries, _ = runs
    per_run: dict[str, list[dict[str, Range]]] = {}
    for e in entries:
        folder = root / e["folder"]
        _, most = lag_bounds_ms(load_json(folder / "benchmark.json"))
        decode: list[Range] = []
        e2e: list[Range] = []
        for x in raw_lines(folder):
            if x["type"] != "request" or x["warmup"]:
                continue
            readable = readable_ns(x)
            gen_ms = (readable["end_ns"] - readable["first_output_ns"]) / 1e6
            shortest = gen_ms - most
            decode.append(((TOKENS - 1) / ((gen_ms + most) / 1000),
                           (TOKENS - 1) / (shortest / 1000) if shortest > 0 else np.inf))
            whole = (readable["end_ns"] - x["start_ns"]) / 1e6
            e2e.append((whole, whole + most))
        assert len(decode) == 6
        per_run.setdefault(e["variant"].split("/")[1], []).append(
            {key: (nearest_rank([v[0] for v in values], 50),
                   nearest_rank([v[1] for v in values], 50))
             for key, values in (("decode", decode), ("e2e", e2e))})
    return {v: {key: (float(np.mean([r[key][0] for r in rs])),
                      float(np.mean([r[key][1] for r in rs])))
                for key in ("decode", "e2e")} for v, rs in per_run.items()}


def delivered_delta(runs, key: str) -> Range:
    """The range of mtp3's delta over off, in percent, that `delivered` allows."""
    truth = delivered(runs)
    (on_lo, on_hi), (off_lo, off_hi) = truth["mtp3"][key], truth["off"][key]
    return 100 * (on_lo / off_hi - 1), 100 * (on_hi / off_lo - 1)


def test_promotion_with_the_configured_deltas(runs, summarized) -> None:
    _, doc, md = summarized
    off, on = doc["performance"]
    assert (off["speculation"], on["speculation"]) == ("off", "mtp3")
    assert "decode_delta_percent" not in off
    truth = delivered(runs)
    decode_delta, e2e_delta = delivered_delta(runs, "decode"), delivered_delta(runs, "e2e")
    print(f"\ndelivered: {truth}; deltas {decode_delta} %, {e2e_delta} %; summary "
          f"{on['decode_delta_percent']:.2f} %, {on['e2e_delta_percent']:.2f} %")
    assert decode_delta[0] <= on["decode_delta_percent"] <= decode_delta[1]
    assert e2e_delta[0] <= on["e2e_delta_percent"] <= e2e_delta[1]
    # and exactly what the six benchmark.json files give: 100 × (mean / mean − 1) of their
    # medians (each run's own figures are judged against its stamps in test_truth)
    root, entries, _ = runs
    medians: dict[str, dict[str, list[float]]] = {}
    for e in entries:
        m = load_json(root / e["folder"] / "benchmark.json")["metrics"]
        per = medians.setdefault(e["variant"].split("/")[1], {"decode": [], "e2e": []})
        per["decode"].append(m["decode_tok_s_p50"])
        per["e2e"].append(m["e2e_p50_ms"])
    for key in ("decode", "e2e"):
        exact = 100 * (np.mean(medians["mtp3"][key]) / np.mean(medians["off"][key]) - 1)
        assert on[f"{key}_delta_percent"] == pytest.approx(exact, rel=1e-12, abs=1e-12)
    assert truth["off"]["decode"][0] <= off["decode_tok_s_p50"] <= truth["off"]["decode"][1]
    # the simulators' plans, only as the direction and size of the change: how late each
    # simulator was on a busy machine is its own (seen: +110 % delivered for +100 % planned),
    # and the summary is judged above against what they delivered
    assert on["decode_delta_percent"] > TRUE_DECODE_DELTA / 2
    assert on["e2e_delta_percent"] < TRUE_E2E_DELTA / 2
    assert on["runs"] == off["runs"] == 3
    truth = spec_counts(TOKENS, SPEC_K, SPEC_A)
    (tele,) = doc["sampled_speculative_telemetry"]
    rate = truth.accepted_tokens / truth.draft_tokens
    assert tele["acceptance_rate_range"] == pytest.approx([rate, rate])
    assert tele["accepted_length_range"] == pytest.approx([1 + truth.accepted_tokens
                                                           / truth.drafts] * 2)
    # the saturation gate judges the client's timing (its event loop's lag): a run beside a
    # CPU hog can record a saturated client (seen, before the shared fixtures too); what
    # the summary must decide then is what the runs' own benchmark.json files record
    root, entries, _ = runs
    saturated = [(e["variant"], bench["run_id"]) for e in entries
                 for bench in (load_json(root / e["folder"] / "benchmark.json"),)
                 if bench["client"]["saturated"] is True]
    assert doc["decision"] == ("no-promotion" if saturated else "promotion"), saturated
    assert [g["outcome"] for g in doc["gates"]] == ["pass", "fail" if saturated else "pass"]
    assert list(doc)[:4] == ["schema", "date", "decision", "hardware"]
    assert doc["hardware"] == {"gpu": "none: the simulator", "count": 0}
    assert doc["performance_protocol"]["aggregation"] == (
        "mean of run medians across 2 first-placement and 1 swapped-placement runs")
    assert "functional" not in doc and "restoration" not in doc
    assert set(doc["not_included"]) == {"functional", "multimodal", "restoration",
                                        "checks_under_load"}
    assert [x.split(": the load generator was saturated")[0] for x in doc["retained_failures"]
            ] == [f"Run {rid} of {variant}" for variant in ("m/off", "m/mtp3")
                  for v, rid in saturated if v == variant]
    assert f"**{doc['decision']}**" in md and "| m | mtp3 |" in md


def test_the_summary_carries_each_variants_per_gpu_figures(runs, summarized) -> None:
    """Each variant's gpus (and price) reach its runs: the summary's per-GPU and $ figures
    are the means of the runs' own, the runs' throughput ÷ their variant's gpus."""
    root, entries, _ = runs
    _, doc, md = summarized
    for row, gpus in zip(doc["performance"], (2, 1), strict=True):
        mine = [load_json(root / e["folder"] / "benchmark.json") for e in entries
                if e["variant"] == f"m/{row['speculation']}"]
        assert all(d["gpus"] == gpus and d["metrics"]["output_tok_s_per_gpu"]
                   == d["metrics"]["throughput_tok_s"] / gpus for d in mine)
        per_gpu = [d["metrics"]["output_tok_s_per_gpu"] for d in mine]
        assert row["output_tok_s_per_gpu"] == mean(per_gpu)  # the summary's own mean
        assert "j_per_output_token" not in row  # no energy block: left out, not null
    off, on = doc["performance"]
    assert off["usd_per_m_output_tokens"] > 0  # mtp3 has no price: none of its runs has one
    assert "usd_per_m_output_tokens" not in on and "usd_per_m_output_tokens" not in on[
        "null_reasons"]
    assert "| output tok/s/GPU | $/M output tok | runs |" in md


def test_no_promotion_when_the_threshold_is_inside_the_interval(tmp_path: Path, runs,
                                                                summarized) -> None:
    _, first, _ = summarized
    measured = first["gates"][0]["figures"]["improvement_percent"]
    low, high = delivered_delta(runs, "e2e")
    assert -high <= measured <= -low
    doc, md = summarize(campaign_dir(tmp_path, runs, threshold=round(measured, 6)))
    gate = doc["gates"][0]
    low, high = gate["figures"]["improvement_ci95_percent"]
    assert low <= gate["threshold"] <= high
    assert gate["outcome"] == "not_significant"
    assert doc["decision"] == "no-promotion"
    assert "not significant" in md and "**no-promotion**" in md


def test_a_variant_without_a_usable_run_is_refused(tmp_path: Path, runs) -> None:
    """Every mtp3 run failed: nothing to summarize it by; one line, exit 2, no file."""
    folder = campaign_dir(tmp_path, runs, threshold=20)
    data = orjson.loads((folder / "campaign.json").read_bytes())
    for e in data["runs"]:
        if e["variant"] == "m/mtp3":
            e.update(state="failed", failure="the server went away")
    (folder / "campaign.json").write_bytes(orjson.dumps(data))
    proc = anvil("summarize", str(folder))
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("anvil: summarize: no finished run whose benchmark.json "
                                  "verifies for m/mtp3 (states: m/mtp3: failed, failed, "
                                  "failed)")
    assert not (folder / "summary.json").exists()


def test_verify_recomputes_the_summary_from_the_runs(tmp_path: Path, runs,
                                                     summarized) -> None:
    """`anvil verify summary.json`: every figure from the six real runs (exit 0); one figure
    changed in the last bit, or a run's file damaged, and it is named (exit 1). On a copy of
    the module's summarized folder (this test damages its files)."""
    folder = tmp_path / "camp"
    shutil.copytree(summarized[0], folder)
    doc = load_json(folder / "summary.json")
    path = folder / "summary.json"
    proc = anvil("verify", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        f"{path}: every figure recomputes from 6 runs in {folder.resolve()}")
    want = doc["performance"][1]["e2e_p50_ms"]
    doc["performance"][1]["e2e_p50_ms"] = float(np.nextafter(want, np.inf))
    path.write_bytes(orjson.dumps(doc))
    proc = anvil("verify", str(path))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "schema: checked against public-summary-v1.schema.json (JSON Schema draft 2020-12)",
        f"MISMATCH performance[1].e2e_p50_ms: file has "
        f"{doc['performance'][1]['e2e_p50_ms']!r}, recomputed {want!r}",
        f"{path}: 1 mismatch(es)"]
    doc["performance"][1]["e2e_p50_ms"] = want  # the figure right again, a run's file wrong
    path.write_bytes(orjson.dumps(doc))
    bench = folder / runs[1][0]["folder"] / "benchmark.json"
    run = load_json(bench)
    run["metrics"]["e2e_p50_ms"] += 1.0
    bench.write_bytes(orjson.dumps(run))
    proc = anvil("verify", str(path))
    assert proc.returncode == 1
    assert "MISMATCH performance[0].runs: file has 3, recomputed 2" in proc.stdout


def test_anvil_outputs_validate_against_the_shipped_schemas(runs, summarized) -> None:
    """Other tools can validate anvil's files: every real run's benchmark.json and the real
    summary pass the shipped JSON Schemas (draft 2020-12), and verify says it checked."""
    validators = {which: Draft202012Validator(shipped(which)) for which in FILES}
    root, entries, _ = runs
    for e in entries:
        doc = load_json(root / e["folder"] / "benchmark.json")
        assert list(validators[doc["schema"]].iter_errors(doc)) == [], e["folder"]
    _, doc, _ = summarized
    assert list(validators[doc["schema"]].iter_errors(doc)) == []
    proc = anvil("verify", str(root / entries[0]["folder"] / "benchmark.json"))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[0] == (
        "schema: checked against anvil's definition of anvil-serving.benchmark/v1, the one "
        "benchmark-v1.schema.json is generated from")


@pytest.mark.browser
def test_report_draws_the_summary_the_runs_give(tmp_path: Path, runs) -> None:
    """`anvil report` of the six real runs with the summary `anvil summarize` writes (its own
    writer, in process): drawn (2 PNGs), every file named with its SHA-256, the decision and
    gates as the summary has them, opened in headless Chromium fetching nothing (screenshot:
    report-campaign-runs.png); a figure of summary.json changed, and it is refused."""
    folder = campaign_dir(tmp_path, runs, threshold=20)
    doc = summary_document(read_campaign_folder(folder))
    write_summary(doc, markdown(doc), folder / "summary.json", folder / "summary.md")
    report = make_report(folder, tmp_path / "out")
    page = report.html_path.read_text()
    assert report.kind == "campaign" and len(report.png_paths) == 3  # and the frontier
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in report.png_paths)
    _, entries, _ = runs
    files = ["campaign.json", "summary.json",
             *(f"{e['folder']}/benchmark.json" for v in ("m/off", "m/mtp3")
               for e in entries if e["variant"] == v)]
    for relative in files:
        data = (folder / relative).read_bytes()
        assert (f"<tr><td>{relative}</td><td>{len(data)}</td>"
                f'<td class="src">{hashlib.sha256(data).hexdigest()}</td></tr>') in page
    # whatever this machine's load made of the saturation gate, the page says what the file does
    decided = "pass" if doc["decision"] == "promotion" else "fail"
    assert f'<td class="{decided}">{doc["decision"]}</td>' in page
    for g in doc["gates"]:
        passed = "pass" if g["outcome"] in ("pass", "not_required") else "fail"
        assert (f'<td>{html.escape(g["reason"])}</td><td class="{passed}">{g["outcome"]}</td>'
                in page)
    # as its reader opens it: headless Chromium, offline, every figure shown
    view_report(report.html_path, tmp_path, "report-campaign-runs.png")
    doc["performance"][0]["decode_tok_s_p50"] *= 1.01
    (folder / "summary.json").write_bytes(orjson.dumps(doc))
    with pytest.raises(UsageError, match=r"performance\[0\]\.decode_tok_s_p50: file has .*"
                       r"re-run `anvil summarize "):
        make_report(folder, tmp_path / "out2")


def test_compare_of_the_campaigns_runs_says_mtp3_is_better(runs) -> None:
    """`anvil compare` on the campaign's own runs (no new load): m/mtp3 against m/off is
    better on e2e p50 (the simulator delivered ~−37 %), and its TTFT (the same prefill) is
    neither better nor worse. (Two runs of one configuration: `test_compare_effect.py`,
    whose runs go side by side: these ran one after the other.)"""
    root, entries, _ = runs
    off = [root / e["folder"] for e in entries if e["variant"] == "m/off"]
    on = [root / e["folder"] for e in entries if e["variant"] == "m/mtp3"]
    proc = anvil("compare", str(off[0]), str(on[0]), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    by_name = {f["name"]: f for f in doc["figures"]}
    assert by_name["ttft_p50_ms"]["margin"] == {"value": 2.0, "unit": "%", "floor": 1.0}
    e2e = by_name["e2e_p50_ms"]["vs_baseline"][1]
    assert e2e["verdict"] == "better" and e2e["delta_pct"] < -20, e2e
    assert by_name["ttft_p50_ms"]["vs_baseline"][1]["verdict"] in ("equivalent",
                                                                   "inconclusive")
