"""Campaign files: many runs toward one promotion decision, loaded and checked up front.

Why its own module: a campaign is hours of GPU time. A typo found at run 17 of 20 wastes
all of it, so the whole file is checked before the first run, and every problem is found
in one pass (a user fixes them all at once, not one per attempt): `load_campaign` collects
them and raises one `CampaignError` whose message has one line per problem, each naming
the field, the bad value and what is allowed. The CLI prints it; nothing here prints.

    name = "qwen-fp8-vs-nvfp4"              # letters, digits, . _ - (the campaign's folder)
    scenario = "../performance.toml"        # the protocol of every run; a relative path is
                                            # relative to this file's folder
    runs_per_variant = 5
    placements = ["first", "first", "first", "swapped", "swapped"]  # optional: one label
                                            # per run index (run i of each variant)
    order = "interleaved"                   # A B C D A B C D … (default) | "grouped": A A … B B …
    baseline = "official-fp8/off"           # optional; variant ids are "model/speculation"
    candidate = "inferact-nvfp4/mtp3"       # what the decision is about
    incumbent = "official-fp8/mtp3"         # what it must beat (needed by comparing gates)
    reset_prefix_cache = "auto"             # optional: every run's --reset-prefix-cache

    [facts]                                 # any table, copied into the summary as written
    [[variants]]                            # variants[N] counts these from 1, as in the file
    model = "official-fp8"                  # the summary's label (letters, digits, . _ -)
    served_model = "Qwen/Qwen3.8-27B-FP8"   # sent as the request's "model"
    speculation = "off"                     # a label too; "off" is what deltas compare with
    host = "http://127.0.0.1:8000"          # credentials in it are used, never shown
    before_run = "switch-placement first"   # optional shell command before each of its runs
    api_key_env = "GPU_A_KEY"               # optional: the variable holding its API key
    gpus = 8                                # optional: its runs' --gpus (per-GPU figures)
    gpu_hour_price = 2.49                   # optional, beside gpus: its runs' --gpu-hour-price
    energy_urls = ["http://10.0.0.5:9400/metrics"]  # optional: its node's DCGM exporters
                                            # (its runs' --energy-url, over the scenario's)

    [gates]                                 # at least one; the names and meanings: gates.GATES
    e2e_p50_improvement_percent = 10
    [restoration]
    aliases = ["llm.primary"]               # optional: names that must answer after the last run
    host = "http://127.0.0.1:8000"          # optional: where they are asked (default: the
                                            # candidate's host; its API key goes with it)
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anvil_metrics.campaign.checkplan import CheckPlan, parse_checks
from anvil_metrics.campaign.gates import GATES
from anvil_metrics.errors import UsageError
from anvil_metrics.load.hookspec import hook_text
from anvil_metrics.load.scenario import Scenario, load_scenario
from anvil_metrics.urls import Endpoint, strip_credentials

ORDERS = ("interleaved", "grouped")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # safe in ids and folder names
_LABEL_TEXT = "letters, digits, '.', '_', '-' (starting with a letter or digit)"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST_TEXT = "http(s)://HOST:PORT[/v1], e.g. http://127.0.0.1:8000"


_TOP_KEYS = ("name", "scenario", "runs_per_variant", "placements", "order", "baseline",
             "candidate", "incumbent", "facts", "variants", "gates", "restoration", "checks",
             "reset_prefix_cache")
_VARIANT_KEYS = ("model", "served_model", "speculation", "host", "before_run", "api_key_env",
                 "gpus", "gpu_hour_price", "energy_urls")
_RESTORATION_KEYS = ("aliases", "host")


class CampaignError(UsageError):
    """A campaign file with problems (the CLI exits 2). `problems` holds one line each; the
    message is those lines, each prefixed with the file, so every line stands on its own."""

    def __init__(self, problems: list[str], *, source: str):
        self.problems = list(problems)
        self.source = source
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems))


@dataclass(frozen=True, slots=True)
class Variant:
    """One (model, speculation) pair, served at `endpoint`."""

    model: str
    served_model: str
    speculation: str
    endpoint: Endpoint  # its `base_url` is safe to show; `userinfo_key` is not
    before_run: str | None = None
    api_key_env: str | None = None
    gpus: int | None = None  # its runs' --gpus (TP1 against TP2: each variant its own)
    gpu_hour_price: float | None = None  # its runs' --gpu-hour-price, only beside gpus
    # its runs' --energy-url: the exporters of the variant's own node (each configuration
    # on its own GPUs); None: the scenario's [energy], if any
    energy_urls: tuple[str, ...] | None = None

    @property
    def id(self) -> str:
        return f"{self.model}/{self.speculation}"


@dataclass(frozen=True, slots=True)
class Campaign:
    """A validated campaign file. `gates` maps gate names (keys of `GATES`) to values;
    `facts` is the file's [facts] table as written."""

    name: str
    source: str
    scenario_path: str
    scenario: Scenario
    runs_per_variant: int
    placements: tuple[str, ...] | None  # one per run index, or None
    order: str
    baseline: str | None
    candidate: str
    incumbent: str | None
    variants: tuple[Variant, ...]
    gates: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    restoration_aliases: tuple[str, ...] = ()
    restoration_host: Endpoint | None = None  # None: the candidate's endpoint
    checks: CheckPlan | None = None  # [checks]: suites run once per variant (checkplan)
    reset_prefix_cache: str | None = None  # every run's --reset-prefix-cache (as written)

    @property
    def restoration_endpoint(self) -> Endpoint:
        """Where the restoration aliases are asked: [restoration] host, else the candidate's."""
        return self.restoration_host or self.variant(self.candidate).endpoint

    def variant(self, variant_id: str) -> Variant:
        """The variant with this id (a KeyError for an id the file does not declare)."""
        return {v.id: v for v in self.variants}[variant_id]


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Problems:
    """Collects problem lines in the order they are found."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def extend(self, lines: list[str]) -> None:
        """Problems another part's checks found, in its words."""
        self.lines += lines

    def bad(self, where: str, value: Any, expected: str) -> None:
        self.lines.append(f"{where}: {_shown(value)} is not allowed; expected {expected}")

    def missing(self, where: str, expected: str) -> None:
        self.lines.append(f"{where}: missing; expected {expected}")

    def unknown(self, where: str, key: str, allowed: tuple[str, ...] | list[str]) -> None:
        head = f"{where}: " if where else ""
        self.lines.append(f'{head}unknown key "{key}"; allowed: {", ".join(allowed)}')

    def text(self, d: dict, key: str, where: str, *, required: bool, label: bool = False
             ) -> str | None:
        expected = _LABEL_TEXT if label else "a non-empty string"
        if key not in d:
            if required:
                self.missing(where, expected)
            return None
        v = d[key]
        ok = isinstance(v, str) and (bool(_LABEL.match(v)) if label else bool(v.strip()))
        if not ok:
            self.bad(where, v, expected)
            return None
        return v


def _host(p: _Problems, host: Any, where: str, *, required: bool) -> Endpoint | None:
    """A host URL parsed, or None with its problem line (credentials never shown)."""
    if host is None:
        if required:
            p.missing(where, _HOST_TEXT)
    elif not isinstance(host, str):
        p.lines.append(f"{where}: a {type(host).__name__} is not allowed; expected {_HOST_TEXT}")
    else:
        try:
            return Endpoint.parse(host)
        except UsageError:
            p.bad(where, strip_credentials(host), _HOST_TEXT)
    return None


def _variant(p: _Problems, raw: Any, where: str) -> Variant | None:
    if not isinstance(raw, dict):
        p.bad(where, raw, "a [[variants]] table")
        return None
    for k in raw:
        if k not in _VARIANT_KEYS:
            p.unknown(where, k, _VARIANT_KEYS)
    model = p.text(raw, "model", f"{where}.model", required=True, label=True)
    served = p.text(raw, "served_model", f"{where}.served_model", required=True)
    spec = p.text(raw, "speculation", f"{where}.speculation", required=True, label=True)
    before = p.text(raw, "before_run", f"{where}.before_run", required=False)
    key_env = raw.get("api_key_env")
    if key_env is not None and not (isinstance(key_env, str) and _ENV_NAME.match(key_env)):
        p.bad(f"{where}.api_key_env", key_env, "an environment variable's name, e.g. GPU_A_KEY")
        key_env = None
    endpoint = _host(p, raw.get("host"), f"{where}.host", required=True)
    gpus, price = _hardware(p, raw, where)
    energy = _energy_urls(p, raw.get("energy_urls"), f"{where}.energy_urls")
    if model is None or served is None or spec is None or endpoint is None:
        return None
    return Variant(model, served, spec, endpoint, before, key_env, gpus, price, energy)


def _energy_urls(p: _Problems, raw: Any, where: str) -> tuple[str, ...] | None:
    """A variant's `energy_urls`: a list of http(s) URLs of its node's exporters (one per
    node), or None."""
    if raw is None:
        return None
    if not (isinstance(raw, list) and raw and all(
            isinstance(u, str) and u.startswith(("http://", "https://")) for u in raw)):
        p.bad(where, raw, "a list of http(s) URLs, one per node, e.g. "
                          "[\"http://10.0.0.5:9400/metrics\"]")
        return None
    return tuple(raw)


def _hardware(p: _Problems, raw: dict, where: str) -> tuple[int | None, float | None]:
    """A variant's `gpus` (a whole number >= 1) and `gpu_hour_price` (USD > 0, with gpus):
    its runs' --gpus and --gpu-hour-price, for the per-GPU and $ per million figures."""
    gpus, price = raw.get("gpus"), raw.get("gpu_hour_price")
    if gpus is not None and (type(gpus) is not int or gpus < 1):
        p.bad(f"{where}.gpus", gpus, "a whole number >= 1 (the GPUs serving the variant)")
        gpus = None
    if price is not None and (isinstance(price, bool) or not isinstance(price, int | float)
                              or not math.isfinite(price) or price <= 0):
        p.bad(f"{where}.gpu_hour_price", price, "a number > 0 (USD per GPU-hour)")
        price = None
    elif price is not None and raw.get("gpus") is None:
        p.bad(f"{where}.gpu_hour_price", price, "a price only beside the variant's gpus")
        price = None
    return gpus, None if price is None else float(price)


def _raw_id(raw: Any) -> str | None:
    """A variant table's id when its model and speculation are good labels, else None."""
    if not isinstance(raw, dict):
        return None
    model, spec = raw.get("model"), raw.get("speculation")
    if all(isinstance(x, str) and _LABEL.match(x) for x in (model, spec)):
        return f"{model}/{spec}"
    return None


def _gates(p: _Problems, raw: Any) -> dict[str, Any]:
    allowed = ", ".join(GATES)
    if raw is None:
        p.missing("gates", f"a [gates] table with at least one of: {allowed}")
        return {}
    if not isinstance(raw, dict):
        p.bad("gates", raw, f"a table of gates: {allowed}")
        return {}
    if not raw:
        p.missing("gates", f"at least one gate of: {allowed}")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        gate = GATES.get(name)
        if gate is None:
            p.lines.append(f"gates.{name}: unknown gate; allowed: {allowed}")
        elif not gate.accepts(value):
            p.bad(f"gates.{name}", value, gate.expected)
        else:
            out[name] = value
    return out


def _scenario(p: _Problems, raw: Any, base: Path) -> tuple[str | None, Scenario | None]:
    if raw is None:
        p.missing("scenario", "the path of a scenario TOML file, e.g. \"../performance.toml\"")
        return None, None
    if not isinstance(raw, str) or not raw.strip():
        p.bad("scenario", raw, "the path of a scenario TOML file")
        return None, None
    path = Path(raw)
    if not path.is_absolute():
        path = Path(os.path.normpath(base / path))
    try:
        return str(path), load_scenario(path)
    except UsageError as e:
        p.lines.append(f"scenario: {e} (relative paths are relative to the campaign file)")
        return None, None


def _placements(p: _Problems, raw: Any, runs: int | None) -> tuple[str, ...] | None:
    if raw is None:
        return None
    expected = "a list of labels, one per run of a variant"
    if runs is not None:
        expected += f" ({runs} = runs_per_variant)"
    if not isinstance(raw, list) or not all(isinstance(x, str) and _LABEL.match(x) for x in raw):
        p.bad("placements", raw, f"{expected}, each {_LABEL_TEXT}")
        return None
    if runs is not None and len(raw) != runs:
        p.bad("placements", raw, expected)
        return None
    return tuple(raw)


def _restoration(p: _Problems, raw: Any) -> tuple[tuple[str, ...], Endpoint | None]:
    """[restoration]: its aliases and its host (None: the candidate's)."""
    if raw is None:
        return (), None
    if not isinstance(raw, dict):
        p.bad("restoration", raw, "a table with aliases = [...] and an optional host")
        return (), None
    for k in raw:
        if k not in _RESTORATION_KEYS:
            p.unknown("restoration", k, _RESTORATION_KEYS)
    host = _host(p, raw.get("host"), "restoration.host", required=False)
    aliases = raw.get("aliases", [])
    expected = "a list of distinct non-empty served-model names"
    if (not isinstance(aliases, list)
            or not all(isinstance(a, str) and a.strip() for a in aliases)
            or len(set(aliases)) != len(aliases)):
        p.bad("restoration.aliases", aliases, expected)
        return (), host
    return tuple(aliases), host


def _variants(p: _Problems, raw_variants: Any) -> tuple[list[Variant], list[str] | None]:
    """The [[variants]] tables: the good ones, and every id declared (None when a table's
    id cannot be known: a role may name the variant it was meant to be)."""
    variants: list[Variant] = []
    first_at: dict[str, int] = {}  # variant id -> the table that declared it first
    ids_known = isinstance(raw_variants, list) and bool(raw_variants)
    if raw_variants is None:
        p.missing("variants", "one [[variants]] table per variant, at least two")
    elif not isinstance(raw_variants, list):
        p.bad("variants", raw_variants, "[[variants]] tables")
    else:
        if len(raw_variants) < 2:
            p.lines.append(f"variants: {len(raw_variants)} [[variants]] table(s); expected at "
                           "least two (a candidate and what it is compared with)")
        for i, raw in enumerate(raw_variants, 1):
            v = _variant(p, raw, f"variants[{i}]")
            vid = _raw_id(raw)
            if vid is None:
                ids_known = False
                continue
            if vid in first_at:
                p.lines.append(f'variants[{i}]: id "{vid}" repeats variants[{first_at[vid]}]; '
                               "expected each model/speculation pair once")
                continue
            first_at[vid] = i
            if v is not None:
                variants.append(v)
    return variants, list(first_at) if ids_known else None


def _roles(p: _Problems, data: dict[str, Any], ids: list[str] | None,
           gates: dict[str, Any]) -> dict[str, str | None]:
    """baseline, candidate and incumbent: variant ids (`ids`: those declared, None when not
    all are known); an incumbent is needed by a comparing gate and is not the candidate."""
    needs_incumbent = [g for g in gates if GATES[g].compares]
    roles: dict[str, str | None] = {}
    for role in ("baseline", "candidate", "incumbent"):
        value = data.get(role)
        required = role == "candidate" or (role == "incumbent" and needs_incumbent)
        roles[role] = None
        if value is None:
            if required:
                why = f" (gates {', '.join(needs_incumbent)} compare with it)" if (
                    role == "incumbent") else ""
                p.missing(role, f"a variant id (model/speculation){why}")
        elif not isinstance(value, str):
            p.bad(role, value, "a variant id (model/speculation)")
        elif ids is not None and value not in ids:
            p.bad(role, value, f"one of the variant ids: {', '.join(ids)}")
        else:
            roles[role] = value
    if roles["candidate"] is not None and roles["candidate"] == roles["incumbent"]:
        p.bad("incumbent", roles["incumbent"], "a variant other than the candidate")
    return roles


def campaign_from_dict(data: dict[str, Any], source: str, base: Path) -> Campaign:
    """Validate a parsed campaign document (`base`: the folder relative paths start from);
    raise one `CampaignError` listing every problem."""
    p = _Problems()
    for k in data:
        if k not in _TOP_KEYS:
            p.unknown("", k, _TOP_KEYS)
    name = p.text(data, "name", "name", required=True, label=True)
    scenario_path, scenario = _scenario(p, data.get("scenario"), base)
    runs = data.get("runs_per_variant")
    if runs is None:
        p.missing("runs_per_variant", "a whole number >= 1")
    elif isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        p.bad("runs_per_variant", runs, "a whole number >= 1")
        runs = None
    placements = _placements(p, data.get("placements"), runs)
    order = data.get("order", "interleaved")
    if order not in ORDERS:
        p.bad("order", order, " or ".join(f'"{o}"' for o in ORDERS))

    facts = data.get("facts", {})
    if not isinstance(facts, dict):
        p.bad("facts", facts, "a table (copied into the summary as written)")
        facts = {}

    variants, ids = _variants(p, data.get("variants"))
    gates = _gates(p, data.get("gates"))
    roles = _roles(p, data, ids, gates)

    aliases, restoration_host = _restoration(p, data.get("restoration"))
    reset = data.get("reset_prefix_cache")
    try:  # checked as the flag is, its text kept: each run is given it as its flag
        reset = None if reset is None else hook_text("reset_prefix_cache", reset)
    except (UsageError, AttributeError):
        p.bad("reset_prefix_cache", reset, "auto, an http(s) URL or cmd:COMMAND (a trailing "
              "? = optional)")
    checks, check_problems = parse_checks(data.get("checks"))
    p.extend(check_problems)
    if "functional" in gates and "checks" not in data:
        p.lines.append("gates.functional: needs a [checks] table (suites = [...]) whose "
                       "results it reads; add one or remove the gate")
    if p.lines:
        raise CampaignError(p.lines, source=source)
    assert name is not None and scenario is not None and scenario_path is not None
    assert runs is not None and roles["candidate"] is not None
    return Campaign(
        name=name, source=source, scenario_path=scenario_path, scenario=scenario,
        runs_per_variant=runs, placements=placements, order=order,
        baseline=roles["baseline"], candidate=roles["candidate"], incumbent=roles["incumbent"],
        variants=tuple(variants), gates=dict(gates), facts=dict(facts),
        restoration_aliases=aliases, restoration_host=restoration_host, checks=checks,
        reset_prefix_cache=reset)


def load_campaign(path: str | Path) -> Campaign:
    """Read and validate a campaign TOML file; every problem is in the one error raised."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"campaign file {str(p)!r} does not exist; pass a .toml path, e.g. "
                         "scenarios/campaigns/fp8-vs-nvfp4.toml") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"campaign file {str(p)!r} cannot be read: {e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{p}: not valid TOML ({e}); see "
                         "scenarios/campaigns/fp8-vs-nvfp4.toml for the format") from None
    return campaign_from_dict(data, str(p), p.parent)
