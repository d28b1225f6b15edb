"""`anvil capacity`: the largest load that meets every SLO, by doubling and then bisecting.

Why: the question users ask of a server is "how much load meets my SLO?", not "what is
the latency at 16 users?". vLLM's bench has an SLA search; here the search is explicit and
every step is an ordinary anvil run with its own `benchmark.json` (so every figure it
decides on is one `anvil verify` can recompute).

The search (`Search`, pure, tested on its own): start at `start` (default 1) and double
while every SLO is met, up to `max`; then bisect between the largest load that met them
and the smallest that did not, down to `resolution` (1 user, or `--rate-resolution`
requests/s). By users (closed loop: `-u L`) or by rate (open loop: `--rate L`, the pool of
users fixed). Meeting an SLO is not assumed to be monotonic; the search reports what it
measured, and each step's figures are in `capacity.json`.

An SLO is `KEY OP NUMBER` (ops `<=`, `<`, `>=`, `>`), e.g. `ttft_p95_ms<=2000`: KEY is a
`metrics` key of benchmark/v1 (`anvil metrics`), or a percentile of a per-request field
written the same way with any percentile (`e2e_p99_ms`, `decode_tok_s_p10`: nearest rank
over the step's rows), or `error_rate` (failed requests other than `cancelled`, over
requests). A missing value (no rows) does not meet an SLO.

A step whose load generator was saturated (`client.saturated`), or whose open-loop schedule
outran its users, is not trusted: the search stops there and says so, with the advice; so
does a step the server stopped answering (aborted: refused, silent) or a signal stopped. A
step whose every request failed (its run exits 4) is a step that fails its SLOs, also when
the run ended itself on them, as long as the server answered them (an HTTP status): it is
there, and this load is too much for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from anvil_metrics import catalog
from anvil_metrics.errors import UsageError
from anvil_metrics.load.criteria import OPS, parse_bounds
from anvil_metrics.post import loadblock, stats
from anvil_metrics.post.outcome import error_rate, server_failures

if TYPE_CHECKING:
    from anvil_metrics.runs.display import Display


@dataclass(frozen=True, slots=True)
class Slo:
    """`key op limit`; `field`/`p` when the key is a percentile of a row field."""

    key: str
    op: str
    limit: float
    field: str | None = None
    p: int | None = None

    def text(self) -> str:
        return f"{self.key}{self.op}{self.limit:g}"


def _percentile_key(key: str) -> tuple[str, int] | None:
    """(row field, p) for a key written like a catalogue percentile with any p."""
    for f in catalog.ROW:
        if f.percentiles is None:
            continue
        head, tail = f.percentiles.split("{p}")
        m = re.fullmatch(re.escape(head) + r"p(\d{1,3})" + re.escape(tail), key)
        if m and 0 <= int(m.group(1)) <= 100:
            return f.name, int(m.group(1))
    return None


def parse_slos(text: str, flag: str = "--slo") -> tuple[Slo, ...]:
    """SLOs from `"ttft_p95_ms<=2000,e2e_p99_ms<=30000"`; UsageError naming the bad one."""
    out: list[Slo] = []
    for key, op, limit, part in parse_bounds(text, flag, "ttft_p95_ms<=2000"):
        pct = _percentile_key(key)
        if pct is not None:
            out.append(Slo(key, op, limit, *pct))
        elif key in catalog.METRIC_KEYS or key == "error_rate":
            out.append(Slo(key, op, limit))
        else:
            raise UsageError(f"{flag} {part!r}: {key!r} is not a metrics key, a percentile "
                             "of a request field (e.g. e2e_p99_ms) or error_rate; see "
                             "`anvil metrics`")
    return tuple(out)


def slo_value(slo: Slo, doc: Mapping[str, Any]) -> float | None:
    """The step's measured value of `slo`'s key (None when it has none)."""
    if slo.key == "error_rate":
        return error_rate(doc)
    if slo.field is None:
        v = (doc.get("metrics") or {}).get(slo.key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    values = [r.get(slo.field) for r in doc.get("request_timings") or []]
    column = np.array([v for v in values if isinstance(v, int | float)], dtype=np.float64)
    assert slo.p is not None
    return stats.nearest_rank_columns(column, [slo.p])[0]


def meets(slos: Sequence[Slo], values: Mapping[str, float | None]) -> bool:
    return all(values.get(s.key) is not None and bool(OPS[s.op](values[s.key], s.limit))
               for s in slos)


@dataclass
class Search:
    """Doubling, then bisection, over integer users (`resolution` 1) or a rate."""

    start: float
    maximum: float
    resolution: float
    integer: bool = True
    tried: dict[float, bool] = field(default_factory=dict)

    def next_load(self) -> float | None:
        """The next load to try, or None when the search is over."""
        good = [x for x, ok in self.tried.items() if ok]
        bad = [x for x, ok in self.tried.items() if not ok]
        if not self.tried:
            return self.start
        if not bad:  # still doubling
            top = max(good)
            if top >= self.maximum:
                return None
            return min(top * 2, self.maximum)
        lo = max((g for g in good if g < min(bad)), default=None)
        hi = min(bad)
        if lo is None:
            return None  # the first load failed
        if hi - lo <= self.resolution:
            return None
        mid = (lo + hi) // 2 if self.integer else round((lo + hi) / 2, 6)
        return None if mid in self.tried else mid

    def record(self, load: float, ok: bool) -> None:
        self.tried[load] = ok

    def capacity(self) -> float | None:
        """The largest load that met every SLO below the smallest that did not."""
        bad = [x for x, ok in self.tried.items() if not ok]
        limit = min(bad) if bad else float("inf")
        good = [x for x, ok in self.tried.items() if ok and x < limit]
        return max(good) if good else None


@dataclass(frozen=True, slots=True)
class Step:
    load: float
    meets: bool
    values: dict[str, float | None]
    goodput_rps: float | None
    benchmark: str | None
    trusted: bool = True
    why: str | None = None


# run_step(load) -> (benchmark document or None, path or None)
RunStep = Callable[[float], tuple[dict[str, Any] | None, str | None]]


def search(by: str, slos: Sequence[Slo], run_step: RunStep, *, start: float,
           maximum: float, resolution: float,
           on_step: Callable[[Step], None] | None = None) -> tuple[Search, list[Step], str | None]:
    """Run the search; returns it, the steps in the order run, and why it stopped early
    (None when it finished)."""
    if start > maximum:
        raise UsageError(f"--start {start:g} is above --max {maximum:g}")
    s = Search(start, maximum, resolution, integer=(by == "users"))
    steps: list[Step] = []
    while (load := s.next_load()) is not None:
        doc, path = run_step(load)
        if doc is None:
            return s, steps, f"the step at {by} {load:g} wrote no benchmark.json (see its log)"
        values = {slo.key: slo_value(slo, doc) for slo in slos}
        why = _untrusted(doc)
        step = Step(load, meets(slos, values), values,
                    (doc.get("metrics") or {}).get("goodput_rps"), path,
                    trusted=why is None, why=why)
        steps.append(step)
        if on_step is not None:
            on_step(step)
        if why is not None:
            return s, steps, f"the step at {by} {load:g} is not trusted: {why}"
        s.record(load, step.meets)
    return s, steps, None


def _untrusted(doc: Mapping[str, Any]) -> str | None:
    if doc.get("ended_by") == "aborted" and _answered_with_errors(doc):
        return None  # the server is there, failing this load: a step that fails its SLOs
    if doc.get("ended_by") in ("aborted", "signal"):  # not the load it planned: stop there
        return f"the run was {'aborted' if doc['ended_by'] == 'aborted' else 'interrupted'}: " \
            f"{doc.get('end_reason')}"
    client = doc.get("client") or {}
    if client.get("saturated"):
        return (f"the load generator was saturated ({client.get('verdict')}); rerun with more "
                "load processes (--processes N) or on a larger client")
    late = loadblock.behind(doc.get("load"), doc.get("requests"))
    if late:
        return late
    return None


def _answered_with_errors(doc: Mapping[str, Any]) -> bool:
    """Every measured request failed, and the server answered some with an HTTP status: it
    is up and failing this load (a step that fails its SLOs), not gone (refused, silent)."""
    requests = doc.get("requests") or 0
    failures = doc.get("failures") or []
    return (requests > 0 and sum(server_failures(doc).values()) == requests
            and any(f.get("http_status") for f in failures))


def result_doc(by: str, slos: Sequence[Slo], s: Search, steps: Sequence[Step],
               stopped: str | None) -> dict[str, Any]:
    """`capacity.json`."""
    return {
        "by": by,
        "capacity": None if stopped else s.capacity(),
        "slo": [x.text() for x in slos],
        "resolution": s.resolution,
        "maximum": s.maximum,
        "stopped": stopped,
        "steps": [{by: st.load, "meets": st.meets, "values": st.values,
                   "goodput_rps": st.goodput_rps, "benchmark": st.benchmark,
                   "trusted": st.trusted} for st in steps],
    }


def run_capacity(scenario_path: str, host: str, *, by: str, slos: Sequence[Slo],
                 start: float, maximum: float, resolution: float,
                 values: Mapping[str, Any], users: int | None, api_key: str | None,
                 processes: int, results_dir: str,
                 on_step: Callable[[Step], None] | None = None,
                 display: Callable[[str], Display | None] | None = None
                 ) -> tuple[dict[str, Any], str]:
    """Run the search with one `anvil run` per step (`values`: the run options every step
    shares, with `requests` or `duration` set); returns `capacity.json`'s document and the
    folder that holds it and the steps' run folders. `display(title)`: where a step's
    progress is drawn, titled with the step."""
    import orjson

    from anvil_metrics.jsonio import atomic_write_json
    from anvil_metrics.live.recorder import create_run_dir
    from anvil_metrics.load.options import run_options
    from anvil_metrics.runs.launch import prepare_run, run_scenario

    _, folder = create_run_dir(results_dir)
    search_dir = folder.with_name("capacity-" + folder.name.removeprefix("benchmark-"))
    folder.rename(search_dir)

    steps_run: list[float] = []

    def run_step(load: float) -> tuple[dict[str, Any] | None, str | None]:
        steps_run.append(load)
        step_values = dict(values)
        step_users = users
        if by == "users":
            step_users = int(load)
        else:
            step_values["rate"] = float(load)
        opts = run_options(step_values, host=host, users=step_users, api_key=api_key)
        run_dir = prepare_run(host, str(search_dir))
        result = run_scenario(opts.scenario, scenario_path, host, users=opts.users,
                              run_dir=run_dir, values=step_values, api_key=api_key,
                              processes=processes, display=display and display(
                                  f"capacity step {len(steps_run)}: {by} {load:g}"))
        if result.benchmark_path is None:
            return None, str(run_dir)
        return orjson.loads(result.benchmark_path.read_bytes()), str(result.benchmark_path)

    s, steps, stopped = search(by, slos, run_step, start=start, maximum=maximum,
                               resolution=resolution, on_step=on_step)
    doc = result_doc(by, slos, s, steps, stopped)
    atomic_write_json(search_dir / "capacity.json", doc)
    return doc, str(search_dir)
