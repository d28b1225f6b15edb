"""The load a scenario asks for: how its keys that depend on one another make a request
budget, a duration, an open-loop plan, a sweep and the windows left out of the figures.

Kept apart from the other rules (`scenariorules.py`) so that each stays short: these keys
— `requests`, `duration`, `rate`, `arrival`, `burstiness`, `arrival_seed`, `steps`,
`rates`, `step_duration`, `warmup`, `cooldown` — are what the load models of `arrivals.py`,
`live/control.py`, `post/steps.py` and `post/loadblock.py` run on. Each value alone is
checked by its row of the table (`scenariofields.py`) before these rules run; a rule's
refusal is a `ScenarioError` naming the key, the value and what is allowed beside the
others, for a file and for the flags over it alike.
"""

from __future__ import annotations

from typing import Any

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.arrivals import ArrivalPlan
from anvil_metrics.load.optionvalues import seconds_of

# (the document, the fields checked so far, its source): what each rule is called with
Doc = dict[str, Any]


def load_mode(requests: int | None, conversations: int | None, duration_s: float | None
              ) -> str:
    """"budget" (a count of requests, or of conversations, ends the run; a duration, if
    any, is a time limit), "duration", or "until_stopped" (the web UI's Stop, Ctrl-C)."""
    if requests is not None or conversations is not None:
        return "budget"
    return "duration" if duration_s is not None else "until_stopped"


def load(data: Doc, v: Doc, src: str | None) -> None:
    """A request budget, a duration, a rate, a sweep: a sweep lasts its steps ×
    `step_duration`, so no budget or duration beside it; with neither a budget nor a
    duration, a `context_distribution`'s total is the budget (not a trace's run: its
    requests are the trace's)."""
    users, step_rates = v["steps"], v["rates"]
    step_s = seconds_of(v["step_duration"])
    if users is not None and step_rates is not None:
        raise ScenarioError("rates", step_rates, "none beside steps: a sweep changes users or a "
                            "rate", source=src)
    sweep = users is not None or step_rates is not None
    if sweep and step_s is None:
        raise ScenarioError("step_duration", None, 'how long each step lasts, e.g. "60s"',
                            source=src)
    if not sweep and step_s is not None:
        raise ScenarioError("step_duration", v["step_duration"], "none without steps or rates",
                            source=src)
    for key in ("requests", "duration") if sweep else ():
        if v[key] is not None:
            raise ScenarioError(key, v[key], "no request count or duration with steps (a "
                                "sweep lasts its steps × step_duration)", source=src)
    if step_rates is not None and v["rate"] is not None:
        raise ScenarioError("rate", v["rate"], "none beside rates (each step has its own)",
                            source=src)
    rate = v["rate"] if step_rates is None else sum(step_rates) / len(step_rates)
    v["arrivals"] = _arrivals(data, v, rate, src)
    duration = step_s * len(users or step_rates) if step_s is not None else seconds_of(
        v["duration"])
    requests = v["requests"]  # a None in the document: the wire's "no budget"
    if (requests is None and "requests" not in data and data.get("context_distribution")
            and duration is None and "trace" not in data):
        requests = sum(v["context_distribution"].values())
    v.update(requests=requests, duration_s=duration, step_duration_s=step_s,
             step_users=None if users is None else tuple(users),
             step_rates=None if step_rates is None else tuple(float(r) for r in step_rates))


def _arrivals(data: Doc, v: Doc, rate: float | None, src: str | None) -> ArrivalPlan | None:
    """The open-loop plan of `rate` (a rate sweep's: the mean of its steps), `arrival`,
    `burstiness`, `arrival_seed`: None without a rate (the others need one). Without an
    `arrival`, a burstiness other than 1 means gamma, as vLLM's bench reads it."""
    if rate is None:
        for k in ("arrival", "burstiness", "arrival_seed"):
            if k in data:
                raise ScenarioError(k, data[k], "none without a rate (requests/s): it "
                                    "shapes an open-loop schedule", source=src)
        return None
    burst = v["burstiness"]
    arrival = v["arrival"] or ("poisson" if burst == 1 else "gamma")
    if arrival == "poisson" and burst != 1:
        raise ScenarioError("burstiness", burst, '1 with arrival = "poisson" (use arrival = '
                            '"gamma" for other shapes)', source=src)
    return ArrivalPlan(float(rate), arrival, float(burst), v["arrival_seed"])


def windows(data: Doc, v: Doc, src: str | None) -> None:
    """`warmup` / `cooldown`: the first and last stretches of a duration run left out of
    the figures; both inside it, leaving some of it."""
    warm, cool = seconds_of(v["warmup"]), seconds_of(v["cooldown"])
    v.update(warmup_s=warm, cooldown_s=cool)
    if warm is None and cool is None:
        return
    key = "warmup" if warm is not None else "cooldown"
    conversation = v["conversation"]
    mode = load_mode(v["requests"], conversation and conversation.conversations,
                     v["duration_s"])
    if mode != "duration":
        raise ScenarioError(key, v[key], "a duration run around it (a duration, or steps "
                            "or rates, and no request budget): the windows lie inside it",
                            source=src)
    duration = v["duration_s"]
    if (warm or 0) + (cool or 0) >= duration:
        key = "cooldown" if cool is not None else "warmup"
        raise ScenarioError(key, v[key], f"windows that leave some of the {duration:g} s "
                            f"duration (warmup {warm or 0:g} s + cooldown {cool or 0:g} s)",
                            source=src)
