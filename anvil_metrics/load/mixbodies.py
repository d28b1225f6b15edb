"""Single-turn bodies of a request mix (`mix.py`): each request's class and model choose
its body.

Why its own module: a class's prompts come from one of three sources — planned sizes (the
class's `context_tokens`, else the scenario's distribution), a dataset's entries, a trace's
shapes — and each source already has its bodies (`body.BodyBuilder`, `DatasetBodies`,
`TraceBodies`). A mix (itself a `body.RequestBodies`) only routes request k to one of them:
the (class, model) pair its draw gives, each pair's bodies made once with the class's fields
(model, max_tokens, reasoning switches). A dataset class sends entry k mod n (its first user
turn), a trace class entry k mod n's prompt and output length (its times are not a schedule
here: the run's load is).
Their planned sizes: a trace entry's `input_tokens`; a dataset entry's none (the server's
count is the row's `prompt_tokens`). A planned class's images and audio clips
(`load/media.py`) are drawn in `prepare`, before the load, and follow its text as parts;
every request's record carries its body's bytes (`request_bytes`) and a media class's its
counts (`images`, `audio_clips`).
A check class (`check = SUITE`) sends its suite's case k mod n (`CheckBodies`), planned size
none, and its answer is judged after its record's stamps are taken (`judge`).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import orjson

from anvil_metrics.checks import underload
from anvil_metrics.checks.haystack import SizingError
from anvil_metrics.errors import AnvilError, UsageError
from anvil_metrics.load.body import (
    BodyBuilder,
    DatasetBodies,
    Judge,
    RequestBodies,
    TraceBodies,
    output_cap,
)
from anvil_metrics.load.dataset import DatasetEntry, DatasetError, read_dataset
from anvil_metrics.load.media import MediaPool
from anvil_metrics.load.mix import uniform
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.load.trace import MOONCAKE_BLOCK_TOKENS, TraceError, TraceRequest, read_trace
from anvil_metrics.prep.prompts import CountTokens, PromptFactory
from anvil_metrics.prep.traceprompts import TracePrompts
from anvil_metrics.wire.observe import KeptAnswer


def request_nonce(run_nonce: str, index: int, warmup: bool) -> str:
    """Request `index`'s nonce in a retrieval prompt's head: 8 hex digits of the run's nonce
    and the index (a warm-up's its own), so no prefix cache serves one from another."""
    key = f"{run_nonce}:{'w' if warmup else 'r'}{index}".encode()
    return hashlib.blake2b(key, digest_size=4).hexdigest()


class CheckBodies(RequestBodies):
    """A check class's bodies: request k asks its suite's case k mod n, as the suite asks it
    (`checks.underload.case_body`), streamed like every request; the class's own
    `max_tokens`, `reasoning_effort` and `thinking_mode` over the suite's when it sets them
    (the scenario's are not applied: the suite's body is the question)."""

    def __init__(self, sc: Scenario, model: str, suite: str, max_tokens: int | None,
                 reasoning_effort: str | None, thinking_mode: str | None,
                 haystacks: underload.Haystacks | None = None, run_nonce: str = "") -> None:
        self.suite = suite
        self.haystacks = haystacks  # a sized suite's prompts (retrieval), made before
        self._nonce = run_nonce
        own: dict[str, Any] = {"model": model, "stream": True}
        if sc.include_usage:
            own["stream_options"] = {"include_usage": True}
        if max_tokens is not None:
            own["max_tokens"] = max_tokens
        if reasoning_effort is not None:
            own["reasoning_effort"] = reasoning_effort
        if thinking_mode in ("on", "off"):
            own["chat_template_kwargs"] = {"enable_thinking": thinking_mode == "on"}
        self._own = own

        # a sized suite's bodies, serialised once per case: the bytes around its nonce
        self._split = [] if haystacks is None else [
            orjson.dumps({**haystacks.body(k), **own}).split(
                orjson.dumps(underload.NONCE)[1:-1], 1) for k in range(len(haystacks.cases))]

    def body(self, index: int) -> dict[str, Any]:
        if self.haystacks is not None:
            return orjson.loads(b"".join(self.build_parts(0, index)))
        return {**underload.case_body(self.suite, index), **self._own}

    def planned(self, index: int, size: int) -> int | None:
        return None if self.haystacks is None else self.haystacks.planned_tokens

    def output_cap(self, index: int) -> int | None:
        if self.haystacks is not None:
            return output_cap({**self.haystacks.body(index), **self._own})
        return output_cap(self.body(index))

    def build_parts(self, size: int, index: int, warmup: bool = False) -> tuple[bytes, ...]:
        if self.haystacks is None:
            return (orjson.dumps(self.body(index)),)
        head, tail = self._split[underload.case_of(self.suite, index)]
        return head, request_nonce(self._nonce, index, warmup).encode(), tail

    def judge(self, index: int, answer: KeptAnswer) -> dict[str, Any]:
        """What request `index`'s record carries in `extra` from its answer's verdict."""
        passed, reason = underload.verdict(self.suite, index, answer, None if self.haystacks
                                           is None else self.haystacks.judge)
        return {"check_passed": passed} if passed else {"check_passed": False,
                                                       "check_reason": reason}


class MixBodies(RequestBodies):
    """Request k's body by its class and model (the module doc says how)."""

    def __init__(self, sc: Scenario, model: str, prompts: PromptFactory,
                 sizes: list[int], template_tokens: int = 0) -> None:
        """`template_tokens`: the chat template's tokens around a message, which a trace
        class's blocks are sized around (`prep/traceprompts.py`; the master counts them)."""
        assert sc.mix is not None
        self.template_tokens = template_tokens
        self.mix = sc.mix
        self._sc, self._model, self.prompts, self._sizes = sc, model, prompts, sizes
        self._builders: dict[tuple[int | None, int | None], RequestBodies] = {}
        self._traces: dict[int, list[TraceRequest]] = {}  # a trace class's entries
        self._datasets: dict[int, list[DatasetEntry]] = {}  # a dataset class's entries
        self._entries: dict[int, int] = {}  # a source class's number of entries
        self.pools: dict[int, MediaPool] = {}  # a media class's images and clips
        self._haystacks: dict[int, underload.Haystacks] = {}  # a retrieval class's prompts
        self._built = (-1, 0)  # the last body built: its request index and bytes

    def draw(self, index: int) -> tuple[int | None, int | None]:
        """Request `index`'s (class, model) positions (`Mix.class_of`, `model_of`)."""
        klass = self.mix.class_of(index)
        return klass, self.mix.model_of(index, klass)

    def planned(self, index: int, size: int) -> int | None:
        """Request `index`'s class's planned size (`size`, the budget's, is not used)."""
        return self._size(self.mix.class_of(index), index)

    def _size(self, klass: int | None, index: int) -> int | None:
        if klass in self._traces:
            reqs = self._traces[klass]
            return reqs[index % len(reqs)].input_tokens
        if klass in self._datasets:
            return None
        if self._check(klass) is not None:  # a sized suite's (retrieval) is the class's own
            return self.mix.classes[klass].context_tokens  # type: ignore[index]
        own = None if klass is None else self.mix.classes[klass].context_tokens
        return own if own is not None else self._sizes[index % len(self._sizes)]

    def all_sizes(self) -> list[int]:
        """Every planned size a request of a planned class may have."""
        return sorted({*self._sizes, *self.mix.class_sizes()})

    def _builder(self, klass: int | None, model: int | None) -> RequestBodies:
        b = self._builders.get((klass, model))
        if b is None:
            sc = self._sc
            if klass is not None:
                c = self.mix.classes[klass]
                sc = replace(sc, max_tokens=c.max_tokens or sc.max_tokens,
                             reasoning_effort=c.reasoning_effort or sc.reasoning_effort,
                             thinking_mode=c.thinking_mode or sc.thinking_mode)
            name = self._model if model is None else self.mix.model_names[model]
            check = self._check(klass)
            if check is not None:
                b = CheckBodies(sc, name, check, c.max_tokens, c.reasoning_effort,
                                c.thinking_mode, self._haystacks.get(klass),  # type: ignore[arg-type]
                                self.prompts.run_nonce)
            elif klass in self._traces:
                b = TraceBodies(sc, name, self._traces[klass], TracePrompts(
                    self.prompts.run_nonce, MOONCAKE_BLOCK_TOKENS, self.template_tokens),
                    self.prompts.run_nonce)
            elif klass in self._datasets:
                b = DatasetBodies(sc, name, self._datasets[klass])
            else:
                b = BodyBuilder(sc, name, self.prompts, media=self.pools.get(klass))  # type: ignore[arg-type]
            self._builders[(klass, model)] = b
        return b

    def prepare(self, count: CountTokens | None = None) -> None:
        """Read the classes' datasets and traces, size every planned prompt and a retrieval
        class's (by `count`, the server's count; None: the calibration's estimate) and
        serialise each pair's templates before the load. A source that cannot be read or
        a prompt that cannot be sized is a `UsageError` naming the class's key."""
        self._read_sources()
        self._size_checks(count)
        for k, c in enumerate(self.mix.classes):
            if c.media is not None:
                if self._sc.endpoint != "chat":
                    raise UsageError(f"request_class[{k}] ({c.name!r}): images and audio "
                                     f"clips go only to --endpoint chat, not "
                                     f"{self._sc.endpoint!r}")
                self.pools[k] = MediaPool(c.media, self.mix.seed, k, self._sc.requests,
                                          uniform)
        self.prompts.prepare(self.all_sizes())
        pairs = [(k, m) for k in (range(len(self.mix.classes)) if self.mix.classes else [None])
                 for m in self._models_of(k)]
        for suite in {c.check for c in self.mix.classes if c.check is not None}:
            underload.prepare(suite)
        for k, m in pairs:
            b = self._builder(k, m)
            if isinstance(b, BodyBuilder):
                own = None if k is None else self.mix.classes[k].context_tokens
                for size in ([own] if own is not None else set(self._sizes)):
                    b.prepare([size])

    def _size_checks(self, count: CountTokens | None) -> None:
        for k, c in enumerate(self.mix.classes):
            if c.check is None or not underload.SUITES[c.check].sized:
                continue
            assert c.context_tokens is not None  # required beside a sized suite (mix.py)
            try:
                self._haystacks[k] = underload.Haystacks(
                    c.context_tokens, self._sc.context_seed, count, self.prompts.calibration)
            except (SizingError, AnvilError) as e:
                raise UsageError(f"request_class[{k}].context_tokens ({c.name!r}): "
                                 f"{c.context_tokens}: {e}") from e

    def _read_sources(self) -> None:
        for k, c in enumerate(self.mix.classes):
            try:
                if c.dataset is not None:
                    self._datasets[k] = read_dataset(c.dataset)
                elif c.trace is not None:
                    self._traces[k] = read_trace(c.trace, None)
            except (DatasetError, TraceError, UsageError, OSError) as e:
                key = "dataset" if c.dataset is not None else "trace"
                raise UsageError(f"request_class[{k}].{key} ({c.name!r}): {e}") from e
        self._entries = {k: len(v) for k, v in (*self._datasets.items(),
                                                 *self._traces.items())}

    def _check(self, klass: int | None) -> str | None:
        return None if klass is None else self.mix.classes[klass].check

    def judge(self, index: int) -> Judge | None:
        """Request `index`'s judge of its (content, reasoning), giving what its record
        carries in `extra` (`check_passed`, a failure's `check_reason`); None: its class
        is not a check."""
        klass, model = self.draw(index)
        b = self._builder(klass, model)
        if not isinstance(b, CheckBodies):
            return None
        return lambda answer: b.judge(index, answer)

    def _models_of(self, klass: int | None) -> list[int | None]:
        own = None if klass is None else self.mix.classes[klass].model
        if own is not None:
            return [self.mix.model_names.index(own)]
        return list(range(len(self.mix.models.names))) if self.mix.models else [None]

    def build_parts(self, size: int, index: int, warmup: bool = False) -> tuple[bytes, ...]:
        """Request `index`'s body (its class's size or source: `size`, the budget's, is not
        used)."""
        klass, model = self.draw(index)
        b = self._builder(klass, model)
        if isinstance(b, BodyBuilder):
            own = self._size(klass, index)
            assert own is not None  # a planned class's
            parts = b.build_parts(own, index, warmup)
        elif isinstance(b, CheckBodies):
            parts = b.build_parts(0, index, warmup)
        else:
            assert klass is not None  # a dataset's or a trace's class
            parts = b.build_parts(0, index % self._entries[klass], warmup)
        self._built = (index, sum(map(len, parts)))
        return parts

    def output_cap(self, index: int) -> int | None:
        """Request `index`'s class's cap (its entry's, a trace class's)."""
        klass, model = self.draw(index)
        b = self._builder(klass, model)
        return b.output_cap(index if klass is None or isinstance(b, BodyBuilder | CheckBodies)
                            else index % self._entries[klass])

    def extra(self, index: int) -> dict[str, int]:
        """What request `index`'s record carries in `extra`: its class and model, its body's
        bytes (when it was the last built) and a media class's counts."""
        klass, model = self.draw(index)
        pool = self.pools.get(klass) if klass is not None else None
        return {k: v for k, v in (
            ("class_index", klass), ("model_index", model),
            ("request_bytes", self._built[1] if self._built[0] == index else None),
            ("images", None if pool is None else pool.plan.images),
            ("audio_clips", None if pool is None else pool.plan.audio_clips)) if v is not None}
