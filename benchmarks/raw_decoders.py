"""Decoding a raw request line, per line: orjson against msgspec (anvil's typed definition)
and pydantic v2, on the same lines, in this process.

What it answers: which library the raw record's one typed definition is written in
(issue 46: "measure both on the raw reader before you choose"). The lines are those of
`postprocess_scale.py`'s synthetic `requests.jsonl` (~20 reasoning and ~50 content chunks
each, usage, ~3 % failures; or `--raw FILE`), held in memory, each decoded and dropped:

- `orjson.loads`: the floor (a parse into dicts, nothing checked);
- msgspec into `records.RequestLine`, as the reader decodes a line (every type and bound
  checked as it parses; the chunk gaps kept as their JSON text), then with
  `records.line_problem` (the rules a type cannot say), then with `ColumnBuilder.add` (the
  row): what `anvil postprocess` spends on a line;
- msgspec into the same definition with the gaps decoded as integers (what keeping them
  as text saves);
- pydantic v2's `model_validate_json` into an equivalent strict model (its gaps as
  integers, then untyped), when pydantic is importable (it is not one of anvil's
  dependencies: run this file with an interpreter that has it, e.g. a venv with msgspec,
  orjson, numpy and pydantic, `PYTHONPATH=.`).

It prints µs per line (the best of `--repeat` passes) and each against orjson.

    .venv/bin/python benchmarks/raw_decoders.py [--lines 100000] [--repeat 3] [--raw FILE]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import Meta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anvil_metrics import records  # noqa: E402
from anvil_metrics.fieldtypes import COUNT_LIMIT, STAMP_LIMIT  # noqa: E402
from anvil_metrics.post.rawcolumns import ColumnBuilder  # noqa: E402


def _lines(a: argparse.Namespace) -> list[bytes]:
    """The request lines to decode: `--raw`'s, or a synthetic file's."""
    if a.raw is not None:
        path = a.raw
    else:
        from postprocess_scale import synthesize  # beside this file

        path = Path(tempfile.mkdtemp(prefix="anvil-decoders-")) / "requests.jsonl"
        synthesize(path, a.lines, 64, 0)
    lines = [x for x in path.read_bytes().splitlines(keepends=True)
             if x.startswith(b'{"type":"request"')]
    if a.raw is None:
        path.unlink()
    return lines[:a.lines]


def _typed_gaps() -> Any:
    """`records.RequestLine` with the gaps decoded as integers."""
    fields = [(f.name, list[Annotated[int, Meta(ge=0)]] | None
               if f.name == "chunk_deltas_ns" else f.type, f.default
               if f.default is not msgspec.NODEFAULT else msgspec.NODEFAULT)
              for f in msgspec.structs.fields(records.RequestLine)]
    return msgspec.defstruct("TypedGaps", [(n, t) if d is msgspec.NODEFAULT else (n, t, d)
                                           for n, t, d in fields],
                             kw_only=True, gc=False, tag_field="type", tag="request")


def _pydantic(gaps: Any) -> Any | None:
    """A pydantic v2 model holding what `RequestLine` does (None without pydantic)."""
    try:
        from pydantic import BaseModel, ConfigDict, Field
    except ImportError:
        return None
    stamp = Annotated[int, Field(gt=-STAMP_LIMIT, lt=STAMP_LIMIT)]
    count = Annotated[int, Field(ge=0, lt=COUNT_LIMIT)]

    class Failure(BaseModel):
        model_config = ConfigDict(strict=True)
        kind: Literal[records.FAILURE_KINDS]  # type: ignore[valid-type]
        message: str = ""
        http_status: int | None = None
        phase: Literal[records.PHASES] | None = None  # type: ignore[valid-type]

    class Extra(BaseModel):
        model_config = ConfigDict(strict=True)
        start_delay_ns: Annotated[int, Field(ge=0, lt=STAMP_LIMIT)] | None = None
        first_chunk_ns: stamp | None = None
        waited_for_user: bool = False
        conversation: count | None = None
        turn: Annotated[int, Field(ge=1, lt=COUNT_LIMIT)] | None = None
        history_tokens: count | None = None
        class_index: count | None = None
        model_index: count | None = None

    class Line(BaseModel):
        model_config = ConfigDict(strict=True)
        type: Literal["request"]
        request_index: count
        start_ns: stamp
        end_ns: stamp | None = None
        first_output_ns: stamp | None = None
        first_content_ns: stamp | None = None
        warmup: bool = False
        planned_context_tokens: count | None = None
        reasoning_chunks: count | None = 0
        content_chunks: count | None = 0
        chunk_deltas_ns: gaps = None
        chunk_channels: str | None = ""
        usage: dict[str, Any] | None = None
        finish_reason: str | None = None
        http_status: int | None = None
        failure: Failure | None = None
        worker: str | None = None
        extra: Extra | None = None

    return Line


def _ways(lines: list[bytes]) -> list[tuple[str, Callable[[], None]]]:
    decode, problem, loads = records.decode_line, records.line_problem, orjson.loads
    typed = msgspec.json.Decoder(_typed_gaps()).decode

    def floor() -> None:
        for x in lines:
            loads(x)

    def anvil() -> None:
        for x in lines:
            decode(x)

    def rules() -> None:
        for x in lines:
            problem(decode(x))

    def rows() -> None:
        cols = ColumnBuilder()
        for n, x in enumerate(lines):
            line = decode(x)
            if problem(line) is None:
                cols.add(n, line)

    def gaps_typed() -> None:
        for x in lines:
            typed(x)

    ways = [("orjson.loads (the floor)", floor),
            ("msgspec: records.RequestLine", anvil),
            ("  + records.line_problem", rules),
            ("  + ColumnBuilder.add (the reader's line)", rows),
            ("msgspec, the gaps as integers", gaps_typed)]
    integers = list[Annotated[int, Meta(ge=0)]] | None
    for label, gaps in (("pydantic v2, the gaps as integers", integers),
                        ("pydantic v2, the gaps untyped", Any)):
        model = _pydantic(gaps)
        if model is not None:
            def validate(model: Any = model) -> None:
                for x in lines:
                    model.model_validate_json(x)
            ways.append((label, validate))
    return ways


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--raw", type=Path, default=None, help="a requests.jsonl to read instead")
    a = ap.parse_args(argv)
    lines = _lines(a)
    gc.disable()  # as the reader runs
    print(f"{len(lines):,} request lines, {sum(map(len, lines)) / len(lines):,.0f} bytes each")
    floor = None
    for label, run in _ways(lines):
        best = min(_timed(run) for _ in range(a.repeat))
        per = best * 1e6 / len(lines)
        floor = floor or per
        print(f"{label:45s} {per:6.2f} µs/line {per / floor:6.2f}x")
    if _pydantic(Any) is None:
        print("(pydantic is not importable here: run this file with an interpreter that has "
              "it to compare)")
    return 0


def _timed(run: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
