"""A request mix: weighted request classes and the models (LoRA adapters) requests name.

Why: a production endpoint serves a mix, not one request shape. Short chat turns and long
summaries share the batch; one base model serves several LoRA adapters, some much hotter
than others. vLLM's bench assigns adapters `random`ly or `round-robin`, SGLang draws them
from a zipf law; AIPerf and GuideLLM weight request shapes. A scenario says it so:

    [[request_class]]           # one table per class, each drawn with its weight
    name = "chat"               # unique; rows and the `mix` block name it
    weight = 3                  # > 0; shares are weight / Σ weights
    context_tokens = 1024       # optional: its planned prompt size (else the scenario's)
    max_tokens = 128            # optional: else the scenario's
    reasoning_effort = "low"    # optional: "low" | "medium" | "high" (else the scenario's)
    thinking_mode = "off"       # optional: "default" | "on" | "off" (else the scenario's)
    model = "lora-a"            # optional: every request of the class names this model
    dataset = "prompts.jsonl"   # optional: its prompts from a dataset (a path, as --dataset
                                # reads it): request k sends entry k mod n's first turn
    trace = "trace.jsonl"       # optional: its shapes from a trace (as --trace reads it, its
                                # times ignored): request k has entry k mod n's prompt
                                # (blocks) and output length
    images = 2                  # optional: images and audio clips in each request, drawn
                                # before the load (load/media.py has every media key)
    check = "json"              # optional: the class asks a check suite's cases (request k:
                                # case k mod n, the suite's own body), each streamed answer
                                # judged by the suite's own judge (checks/underload.py);
                                # no context_tokens, dataset or trace beside it

    [models]                    # the models requests name, each the server must serve
    names = ["base", "lora-a", "lora-b"]
    assignment = "round-robin"  # "round-robin" (default) | "random" | "zipf"
    zipf_alpha = 1.0            # zipf only, > 0: P(model i) ∝ (i + 1)^-alpha, i from 0

A class that names a model keeps it; the others take the `[models]` assignment, or the
run's model (`meta.model`, or the server's first) without one. A class with a `dataset` or
a `trace` has no `context_tokens` (its source sizes its prompts); a trace's also sets each
request's output length.

Definitions. Request k (its request index; a conversation's turns take their
conversation's number, its first request index, so a conversation keeps one model) draws
its class and model from `u(seed, stream, k)`, a uniform in [0, 1) made by SplitMix64 from
the scenario's `context_seed`, k and a stream number (1: the class, 2: the model), so a
request's draw is the same in whichever user, worker or order it is sent, and a run is
reproducible from its seed. A class is the first whose cumulative weight share exceeds u.
`round-robin` gives request k model k mod n; `random` model floor(u × n); `zipf` the first
whose cumulative share exceeds u. `expected_shares` are these probabilities (a class's
model counted in its class's share).

Not combined (refused with one line): classes beside `[conversation]`, `--trace` or
`--dataset` (those fix each request's shape themselves); `[models]` beside a trace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.media import MEDIA_KEYS, MediaPlan, parse_media

ASSIGNMENTS = ("round-robin", "random", "zipf")
CLASS_KEYS = ("name", "weight", "context_tokens", "max_tokens", "reasoning_effort",
              "thinking_mode", "model", "dataset", "trace", "check", *MEDIA_KEYS)
SOURCE_KEYS = ("dataset", "trace")  # where a class takes its prompts from, if not planned
MODEL_KEYS = ("names", "assignment", "zipf_alpha")
REASONING_EFFORTS = ("low", "medium", "high")
THINKING_MODES = ("default", "on", "off")
CLASS_STREAM, MODEL_STREAM = 1, 2
_MASK = (1 << 64) - 1


def uniform(seed: int, stream: int, index: int) -> float:
    """A uniform draw in [0, 1) for (seed, stream, index): SplitMix64's output of their mix,
    its top 53 bits (a double's mantissa)."""
    z = (seed * 0x9E3779B97F4A7C15 + stream * 0xD1B54A32D192ED03 + index
         * 0xBF58476D1CE4E5B9 + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


def _pick(cumulative: tuple[float, ...], u: float) -> int:
    """The first position whose cumulative share exceeds u (the last for rounding)."""
    for i, c in enumerate(cumulative):
        if u < c:
            return i
    return len(cumulative) - 1


def _cumulative(weights: list[float]) -> tuple[float, ...]:
    total = math.fsum(weights)
    out, acc = [], 0.0
    for w in weights:
        acc += w
        out.append(acc / total)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RequestClass:
    """One `[[request_class]]` table, checked; None: the scenario's own value."""

    name: str
    weight: float
    context_tokens: int | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    thinking_mode: str | None = None
    model: str | None = None
    dataset: str | None = None  # a dataset file's path: the class's prompts
    trace: str | None = None  # a trace file's path: the class's prompts and output lengths
    media: MediaPlan | None = None  # its images and audio clips (`load/media.py`)
    check: str | None = None  # a check suite: the class asks its cases, each answer judged

    def to_table(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in CLASS_KEYS
                   if k not in MEDIA_KEYS and getattr(self, k) is not None},
                **({} if self.media is None else self.media.to_table())}


@dataclass(frozen=True, slots=True)
class ModelPlan:
    """The `[models]` table, checked."""

    names: tuple[str, ...]
    assignment: str = "round-robin"
    zipf_alpha: float | None = None

    def shares(self) -> tuple[float, ...]:
        """Each model's probability for a request that takes the assignment."""
        n = len(self.names)
        if self.assignment == "zipf":
            assert self.zipf_alpha is not None
            w = [(i + 1) ** -self.zipf_alpha for i in range(n)]
            total = math.fsum(w)
            return tuple(x / total for x in w)
        return tuple(1.0 / n for _ in range(n))

    def to_table(self) -> dict[str, Any]:
        return {"names": list(self.names), "assignment": self.assignment,
                **({} if self.zipf_alpha is None else {"zipf_alpha": self.zipf_alpha})}


@dataclass(frozen=True)
class Mix:
    """A scenario's classes and models (either may be empty) and the seed of their draws."""

    classes: tuple[RequestClass, ...] = ()
    models: ModelPlan | None = None
    seed: int = 0
    # the cumulative shares `_pick` reads, made once
    _class_cum: tuple[float, ...] = field(init=False, repr=False, compare=False, default=())
    _model_cum: tuple[float, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "_class_cum", _cumulative([c.weight for c in self.classes])
                           if self.classes else ())
        object.__setattr__(self, "_model_cum", _cumulative(list(self.models.shares()))
                           if self.models is not None else ())

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every model a request of the mix may name: `[models]`' names, then the classes'
        own, once each. A row's `model_index` is a position here."""
        listed = list(self.models.names) if self.models is not None else []
        return tuple(dict.fromkeys([*listed, *(c.model for c in self.classes if c.model)]))

    def class_of(self, index: int) -> int | None:
        """Request `index`'s class (a position in `classes`), None without classes."""
        if not self.classes:
            return None
        return _pick(self._class_cum, uniform(self.seed, CLASS_STREAM, index))

    def model_of(self, index: int, klass: int | None) -> int | None:
        """Request `index`'s model (a position in `model_names`) given its class; None: the
        run's own model (no class model, no `[models]`)."""
        own = None if klass is None else self.classes[klass].model
        if own is not None:
            return self.model_names.index(own)
        m = self.models
        if m is None:
            return None
        if m.assignment == "round-robin":
            return index % len(m.names)
        u = uniform(self.seed, MODEL_STREAM, index)
        if m.assignment == "random":
            return min(int(u * len(m.names)), len(m.names) - 1)
        return _pick(self._model_cum, u)

    def class_sizes(self) -> list[int]:
        """The classes' own planned sizes."""
        return [c.context_tokens for c in self.classes if c.context_tokens is not None]

    def class_shares(self) -> tuple[float, ...]:
        total = math.fsum(c.weight for c in self.classes)
        return tuple(c.weight / total for c in self.classes)

    def model_shares(self) -> tuple[float, ...]:
        """Each of `model_names`' probability for one request (see the module docstring);
        with classes that name none and no `[models]`, the rest is the run's own model."""
        names = self.model_names
        out = [0.0] * len(names)
        assigned = self.models.shares() if self.models is not None else ()
        plans = (zip(self.class_shares(), self.classes, strict=True) if self.classes
                 else [(1.0, None)])
        for share, klass in plans:
            if klass is not None and klass.model is not None:
                out[names.index(klass.model)] += share
            else:
                for i, p in enumerate(assigned):
                    out[i] += share * p
        return tuple(out)

    def to_table(self) -> dict[str, Any]:
        """The tables `parse_mix` reads back into an equal mix (`seed` apart: the
        scenario's `context_seed`); also the raw header's `params.mix`."""
        return {"request_class": [c.to_table() for c in self.classes],
                **({} if self.models is None else {"models": self.models.to_table()}),
                "seed": self.seed}


def _err(key: str, value: Any, allowed: str, src: str | None) -> ScenarioError:
    return ScenarioError(key, value, allowed, source=src)


def _whole(key: str, v: Any, src: str | None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise _err(key, v, "a whole number >= 1", src)
    return v


def _name(key: str, v: Any, src: str | None) -> str:
    if not isinstance(v, str) or not v.strip() or v != v.strip():
        raise _err(key, v, "a non-empty string without surrounding spaces", src)
    return v


def parse_class(i: int, t: Any, src: str | None) -> RequestClass:
    """One `[[request_class]]` table (the i-th, from 0)."""
    where = f"request_class[{i}]"
    if not isinstance(t, dict):
        raise _err(where, t, "a table", src)
    for k in t:
        if k not in CLASS_KEYS:
            raise _err(f"{where}.{k}", t[k], f"one of the keys {list(CLASS_KEYS)}", src)
    weight = t.get("weight")
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not (
            math.isfinite(weight) and weight > 0):
        raise _err(f"{where}.weight", weight, "a finite number > 0 (required)", src)
    effort, mode = t.get("reasoning_effort"), t.get("thinking_mode")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise _err(f"{where}.reasoning_effort", effort, f"one of {REASONING_EFFORTS}", src)
    if mode is not None and mode not in THINKING_MODES:
        raise _err(f"{where}.thinking_mode", mode, f"one of {THINKING_MODES}", src)
    _check_suite(where, t, src)
    sources = [k for k in SOURCE_KEYS if t.get(k) is not None]
    for k in sources:
        if not isinstance(t[k], str) or not t[k].strip():
            raise _err(f"{where}.{k}", t[k], "a file's path", src)
    if len(sources) > 1 or (sources and t.get("context_tokens") is not None):
        k = sources[-1]
        raise _err(f"{where}.{k}", t[k], "none beside the class's "
                   f"{'dataset' if len(sources) > 1 else 'context_tokens'} (one source of "
                   "prompts per class)", src)
    media = parse_media(where, t, src)
    if media is not None and sources:
        raise _err(f"{where}.{sources[0]}", t[sources[0]], "none beside images or audio "
                   "clips (media go with planned prompts)", src)
    return RequestClass(
        name=_name(f"{where}.name", t.get("name"), src), weight=float(weight),
        dataset=t.get("dataset"), trace=t.get("trace"), check=t.get("check"),
        context_tokens=(None if t.get("context_tokens") is None
                        else _whole(f"{where}.context_tokens", t["context_tokens"], src)),
        max_tokens=(None if t.get("max_tokens") is None
                    else _whole(f"{where}.max_tokens", t["max_tokens"], src)),
        reasoning_effort=effort, thinking_mode=mode, media=media,
        model=None if t.get("model") is None else _name(f"{where}.model", t["model"], src))


def _check_suite(where: str, t: dict[str, Any], src: str | None) -> None:
    """A check class's suite is one judged an answer at a time (`checks.underload`), and
    the suite's cases are its prompts: no other source beside it."""
    suite = t.get("check")
    if suite is None:
        return
    from anvil_metrics.checks.underload import SUITES  # here: the suites' tables, only if asked

    if suite not in SUITES:
        raise _err(f"{where}.check", suite, f"one of the suites judged under load "
                   f"{list(SUITES)}", src)
    sized = SUITES[suite].sized  # its prompts are of the class's context_tokens
    if sized and t.get("context_tokens") is None:
        raise _err(f"{where}.context_tokens", None, f"a whole number of tokens (required "
                   f"beside check = {suite!r}: its prompts' size)", src)
    for k in (*(() if sized else ("context_tokens",)), *SOURCE_KEYS):
        if t.get(k) is not None:
            raise _err(f"{where}.{k}", t[k], "none beside check (the suite's cases are the "
                       "class's prompts)", src)


def parse_models(t: Any, src: str | None) -> ModelPlan | None:
    """The `[models]` table (None or empty: none)."""
    if t is None or t == {}:
        return None
    if not isinstance(t, dict):
        raise _err("models", t, "a table", src)
    for k in t:
        if k not in MODEL_KEYS:
            raise _err(f"models.{k}", t[k], f"one of the keys {list(MODEL_KEYS)}", src)
    names = t.get("names")
    if not isinstance(names, list) or not names:
        raise _err("models.names", names, "a non-empty list of model names (required)", src)
    for j, n in enumerate(names):
        _name(f"models.names[{j}]", n, src)
    if len(set(names)) != len(names):
        raise _err("models.names", names, "each name once", src)
    assignment = t.get("assignment", ModelPlan.__dataclass_fields__["assignment"].default)
    if assignment not in ASSIGNMENTS:
        raise _err("models.assignment", assignment, f"one of {list(ASSIGNMENTS)}", src)
    alpha = t.get("zipf_alpha")
    if assignment == "zipf":
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not (
                math.isfinite(alpha) and alpha > 0):
            raise _err("models.zipf_alpha", alpha, "a finite number > 0 (required with "
                       "assignment = \"zipf\")", src)
        alpha = float(alpha)
    elif alpha is not None:
        raise _err("models.zipf_alpha", alpha, f"no zipf_alpha with assignment = "
                   f"{assignment!r}", src)
    return ModelPlan(tuple(names), assignment, alpha)


def parse_mix(classes: Any, models: Any, seed: int, src: str | None) -> Mix | None:
    """The scenario's `[[request_class]]` list and `[models]` table (None: neither)."""
    if classes is None or classes == []:
        parsed: tuple[RequestClass, ...] = ()
    elif not isinstance(classes, list):
        raise _err("request_class", classes, "an array of tables ([[request_class]])", src)
    else:
        parsed = tuple(parse_class(i, t, src) for i, t in enumerate(classes))
        names = [c.name for c in parsed]
        for i, n in enumerate(names):
            if n in names[:i]:
                raise _err(f"request_class[{i}].name", n, "a name no other class has", src)
    plan = parse_models(models, src)
    if not parsed and plan is None:
        return None
    return Mix(parsed, plan, seed)


def mix_from_table(table: Mapping[str, Any], src: str | None = None) -> Mix:
    """A mix back from `Mix.to_table` (the raw header's `params.mix`, the block's plan)."""
    if not isinstance(table, Mapping) or set(table) - {"request_class", "models", "seed"}:
        raise _err("mix", table, "the tables a scenario's mix writes", src)
    seed = table.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise _err("mix.seed", seed, "a whole number >= 0", src)
    mix = parse_mix(table.get("request_class"), table.get("models"), seed, src)
    if mix is None:
        raise _err("mix", table, "classes or models", src)
    return mix


def assignment_flag(_flag: str, text: str) -> dict[str, Any]:
    """`--model-assignment round-robin|random|zipf:ALPHA` as the `[models]` keys it sets
    (`zipf_alpha` none without an ALPHA); `parse_models` checks them."""
    kind, _, alpha = text.strip().partition(":")
    try:
        zipf_alpha: float | str | None = float(alpha) if alpha else None
    except ValueError:
        zipf_alpha = alpha
    return {"assignment": kind, "zipf_alpha": zipf_alpha}
