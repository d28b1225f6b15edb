"""Multi-turn conversations: the scenario's `[conversation]` table, checked, and each
conversation's draws.

Why: production chat traffic is conversations whose history grows turn by turn, so a
server's prefix cache serves most of each prompt; single-turn prompts never exercise it.
vLLM's multi-turn benchmark and AIPerf describe a conversation by the same quantities, and
this table takes them under anvil's names:

    [conversation]
    turns = 4                   # user turns per conversation, or a distribution
                                # (with a `max`: the longest history must fit):
                                # {dist = "uniform", min = 2, max = 6}
                                # {dist = "lognormal", mean = 4.0, sigma = 0.5, max = 12}
                                # {dist = "zipf", alpha = 2.0, max = 8}
    turn_tokens = 256           # new user tokens each turn (planned, sized exactly)
    system_prompt_tokens = 0    # one system prompt every conversation shares
    prefix_tokens = 0           # each conversation's own text before its first question
    think_time = 0              # seconds between an answer and the next turn, or
                                # {dist = "exponential", mean = 2.0}
                                # {dist = "lognormal", mean = 2.0, sigma = 0.6, max = 30}
    history = "server"          # "server": earlier answers as the server gave them;
                                # "fixed": answers of exactly max_tokens (ignore_eos)
    session_header = "X-Session-ID"  # sent with each turn, one value per conversation;
                                # "" sends none
    previous_response_id = false  # --endpoint responses only: true sends each later turn
                                # as its new message and the last answer's response id,
                                # the server keeping the history (vLLM: with
                                # VLLM_ENABLE_RESPONSES_API_STORE=1); false resends it
    seed = 0                    # the draws' seed
    conversations = 8           # optional: the run's budget is this many conversations,
                                # each with all its turns (instead of `requests`, which
                                # counts turns)

A drawn value's definition: `uniform` is every whole number from min to max equally
likely; `lognormal`'s `mean` is the mean of the values (not of their logarithm), so the
logarithm is normal with mean ln(mean) - sigma²/2; `zipf` is numpy's (P(k) ∝ k^-alpha,
k >= 1); `exponential`'s `mean` is its mean; `max` caps a draw (a turn count is also at
least 1, a think time at least 0).

Draws are per conversation from its own generator (`PCG64([seed, conversation index])`),
so conversation 17 has the same turns and think times whichever user, worker or order
runs it, and a run is reproducible from its seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.optionvalues import pairs

if TYPE_CHECKING:  # numpy once a conversation is drawn: the option table needs this module
    import numpy as np

HISTORY_MODES = ("server", "fixed")
DEFAULT_SESSION_HEADER = "X-Session-ID"
# each distribution's parameters: required, then optional (`max` caps a draw)
_DISTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "constant": (("value",), ()),
    "uniform": (("min", "max"), ()),
    "lognormal": (("mean", "sigma"), ("max",)),
    "zipf": (("alpha",), ("max",)),
    "exponential": (("mean",), ("max",)),
}
_WHOLE_DISTS = ("constant", "uniform", "lognormal", "zipf")  # for a count of turns
_SECONDS_DISTS = ("constant", "uniform", "lognormal", "exponential")  # for a think time
_KEYS = ("turns", "turn_tokens", "system_prompt_tokens", "prefix_tokens", "think_time",
         "history", "session_header", "seed", "conversations", "previous_response_id")


def _err(key: str, value: Any, allowed: str, src: str | None) -> ScenarioError:
    return ScenarioError(f"conversation.{key}", value, allowed, source=src)


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)



def dist_from_text(text: str) -> dict[str, Any] | str:
    """A distribution as a flag writes it, `name:p1:p2[:max]` (its parameters in the table's
    order: `uniform:2:6`, `lognormal:4:0.5:12`, `exponential:2`), as the table the file
    would hold; text that names no distribution is returned as it is (the table's own check
    then names it)."""
    name, _, rest = text.partition(":")
    if name not in _DISTS or not rest:
        return text
    required, optional = _DISTS[name]
    values: list[Any] = []
    for raw in rest.split(":"):
        try:
            values.append(int(raw))
        except ValueError:
            try:
                values.append(float(raw))
            except ValueError:
                values.append(raw)
    if not len(required) <= len(values) <= len(required) + len(optional):
        return text
    return {"dist": name, **dict(zip(required + optional, values, strict=False))}


def table_flag(flag: str, text: str) -> dict[str, Any]:
    """`--conversation key=value,...`: the `[conversation]` keys it sets over the file's,
    a value `name:p1:p2` a distribution's table (`dist_from_text`)."""
    return {k: dist_from_text(v) if isinstance(v, str) else v
            for k, v in pairs(flag, text).items()}


@dataclass(frozen=True, slots=True)
class Draw:
    """One quantity of a conversation: a constant, or a distribution with its parameters
    (see the module docstring for each one's definition)."""

    dist: str
    params: tuple[tuple[str, float], ...]  # (name, value), in `_DISTS` order

    def get(self, name: str) -> float | None:
        return dict(self.params).get(name)

    def sample(self, rng: np.random.Generator, whole: bool) -> float:
        """One draw: a whole number >= 1 (`whole`: a count of turns) or seconds >= 0."""
        p = dict(self.params)
        if self.dist == "constant":
            x = p["value"]
        elif self.dist == "uniform":
            x = (float(rng.integers(int(p["min"]), int(p["max"]) + 1)) if whole
                 else float(rng.uniform(p["min"], p["max"])))
        elif self.dist == "lognormal":
            sigma = p["sigma"]
            x = float(rng.lognormal(math.log(p["mean"]) - sigma * sigma / 2, sigma))
        elif self.dist == "zipf":
            x = float(rng.zipf(p["alpha"]))
        else:  # exponential
            x = float(rng.exponential(p["mean"]))
        if "max" in p and self.dist != "uniform":
            x = min(x, p["max"])
        return float(max(1, round(x))) if whole else max(0.0, x)

    def to_json(self) -> Any:
        """As the scenario writes it: a number for a constant, else the table (whole
        numbers as integers, so a turn count reads back as one)."""
        def plain(x: float) -> float | int:
            return int(x) if x.is_integer() else x

        if self.dist == "constant":
            return plain(self.params[0][1])
        return {"dist": self.dist, **{k: plain(x) for k, x in self.params}}


def parse_draw(key: str, v: Any, whole: bool, src: str | None) -> Draw:
    """`v` as the scenario gives it (a number, or a table with `dist`), checked."""
    allowed_dists = _WHOLE_DISTS if whole else _SECONDS_DISTS
    if _number(v):
        if (whole and (not isinstance(v, int) or v < 1)) or v < 0:
            raise _err(key, v, "a whole number >= 1 or a distribution table" if whole
                       else "seconds >= 0 or a distribution table", src)
        return Draw("constant", (("value", float(v)),))
    if not isinstance(v, dict):
        first = "a whole number >= 1" if whole else "seconds >= 0"
        raise _err(key, v, f"{first} or a distribution table such as "
                   f"{{dist = \"{allowed_dists[1]}\", ...}}", src)
    dist = v.get("dist")
    if dist not in allowed_dists:
        raise _err(f"{key}.dist", dist, f"one of {list(allowed_dists)}", src)
    required, optional = _DISTS[dist]
    if whole and "max" in optional:  # a count of turns is bounded: its history must fit
        required, optional = (*required, "max"), ()
    for k in v:
        if k != "dist" and k not in required + optional:
            raise _err(f"{key}.{k}", v[k], f"one of the keys {['dist', *required, *optional]} "
                       f"for dist = {dist!r}", src)
    params = []
    for k in required + optional:
        if k not in v:
            if k in required:
                raise _err(f"{key}.{k}", None, f"a number (required for dist = {dist!r})", src)
            continue
        x = v[k]
        positive = k in ("mean", "alpha", "max") or (k == "value" and whole)
        if not _number(x) or x < 0 or (positive and x <= 0) or (k == "alpha" and x <= 1):
            need = ("a number > 1" if k == "alpha" else "a number > 0" if positive
                    else "a number >= 0")
            raise _err(f"{key}.{k}", x, need, src)
        if whole and k in ("min", "max", "value") and (not isinstance(x, int) or x < 1):
            # (a count of turns' `max` is required where a draw is unbounded: the context
            # must hold the longest conversation's history)
            raise _err(f"{key}.{k}", x, "a whole number >= 1", src)
        params.append((k, float(x)))
    got = dict(params)
    if dist == "uniform" and got["min"] > got["max"]:
        raise _err(f"{key}.min", v["min"], f"at most max ({v['max']})", src)
    return Draw(dist, tuple(params))


@dataclass(frozen=True, slots=True)
class ConversationDraws:
    """What conversation `index` will do: its user turns, and the think time before each
    turn after the first (`think_s[k - 2]` precedes turn k)."""

    index: int
    turns: int
    think_s: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ConversationPlan:
    """The checked `[conversation]` table (the module docstring says what each field is)."""

    turns: Draw
    turn_tokens: int
    system_prompt_tokens: int = 0
    prefix_tokens: int = 0
    think_time: Draw = Draw("constant", (("value", 0.0),))
    history: str = "server"
    session_header: str | None = DEFAULT_SESSION_HEADER
    seed: int = 0
    conversations: int | None = None  # a budget of conversations (None: of requests)
    previous_response_id: bool = False  # later turns continue the server's stored response

    def draws(self, index: int, turns: int | None = None) -> ConversationDraws:
        """Conversation `index`'s turns (`turns` when its source fixes them: a dataset's
        conversation) and think times, from its own generator."""
        import numpy as np

        rng = np.random.Generator(np.random.PCG64([self.seed, index]))
        drawn = int(self.turns.sample(rng, whole=True))
        turns = drawn if turns is None else turns
        think = tuple(self.think_time.sample(rng, whole=False) for _ in range(turns - 1))
        return ConversationDraws(index, turns, think)

    @property
    def max_turns(self) -> int:
        """The most turns a conversation can have (a turn count's draw is always bounded)."""
        t = self.turns
        return int(t.get("value") if t.dist == "constant" else t.get("max") or 1)

    def longest_tokens(self, max_tokens: int) -> int:
        """The planned tokens of the longest conversation's last turn, answers included,
        before the chat template: what `max_context_tokens` must hold."""
        return (self.system_prompt_tokens + self.prefix_tokens
                + self.max_turns * (self.turn_tokens + max_tokens))

    def to_table(self) -> dict[str, Any]:
        """The `[conversation]` table `parse_conversation` reads back into an equal plan:
        also the raw header's `params.conversation` and the benchmark block's `plan`."""
        return {"turns": self.turns.to_json(), "turn_tokens": self.turn_tokens,
                "system_prompt_tokens": self.system_prompt_tokens,
                "prefix_tokens": self.prefix_tokens, "think_time": self.think_time.to_json(),
                "history": self.history, "session_header": self.session_header or "",
                "seed": self.seed,
                **({} if self.conversations is None else {"conversations": self.conversations}),
                **({"previous_response_id": True} if self.previous_response_id else {})}


_DEFAULT = {f.name: f.default for f in fields(ConversationPlan)}  # a key left out: the plan's


def _whole(key: str, v: Any, least: int, src: str | None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise _err(key, v, f"a whole number >= {least}", src)
    return v


def parse_conversation(table: Any, src: str | None) -> ConversationPlan | None:
    """The scenario's `[conversation]` table (None or empty: single-turn requests)."""
    if table is None or table == {}:
        return None
    if not isinstance(table, dict):
        raise ScenarioError("conversation", table, "a table", source=src)
    for k in table:
        if k not in _KEYS:
            raise _err(k, table[k], f"one of the keys {sorted(_KEYS)}", src)
    if "turns" not in table:
        raise _err("turns", None, "a whole number >= 1 or a distribution table (required)",
                   src)
    if "turn_tokens" not in table:
        raise _err("turn_tokens", None, "a token count >= 1 (required)", src)
    history = table.get("history", _DEFAULT["history"])
    if history not in HISTORY_MODES:
        raise _err("history", history, f"one of {list(HISTORY_MODES)}", src)
    header = table.get("session_header", _DEFAULT["session_header"])
    if not isinstance(header, str) or any(c in header for c in ":\r\n ") or (
            header and not header.isascii()):
        raise _err("session_header", header, "an HTTP header name (ASCII, no spaces or "
                   "colons), or \"\" for none", src)
    by_id = table.get("previous_response_id", _DEFAULT["previous_response_id"])
    if not isinstance(by_id, bool):
        raise _err("previous_response_id", by_id, "true or false", src)
    return ConversationPlan(
        turns=parse_draw("turns", table["turns"], True, src),
        turn_tokens=_whole("turn_tokens", table["turn_tokens"], 1, src),
        system_prompt_tokens=_whole("system_prompt_tokens", table.get(
            "system_prompt_tokens", _DEFAULT["system_prompt_tokens"]), 0, src),
        prefix_tokens=_whole("prefix_tokens", table.get(
            "prefix_tokens", _DEFAULT["prefix_tokens"]), 0, src),
        think_time=parse_draw("think_time", table.get(
            "think_time", _DEFAULT["think_time"].to_json()), False, src),
        history=history, session_header=header or None,
        seed=_whole("seed", table.get("seed", _DEFAULT["seed"]), 0, src),
        conversations=(None if table.get("conversations") is None
                       else _whole("conversations", table["conversations"], 1, src)),
        previous_response_id=by_id)
