"""blocks: each block's typed definition names exactly the fields its writer writes, and a
new block is one module and one registry entry.

Why: the JSON Schema, `docs/fields.md`, `anvil verify`'s type checks and the CLI's lines all
come from `BLOCKS`; a field added to a writer without a definition (or a definition left
for a field no longer written) would be refused by verify or missing from the docs. The
writers are held to the definitions by `anvil postprocess`'s own build of a run with every
block (`fullbench.py`); the dummy block shows that registering one entry is enough for the
schema, the docs, the build, verify and the summary to have it.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest
from fullbench import full_benchmark
from msgspec import Struct
from rawbuild import HEADER, completed, write_raw

from anvil_metrics.fieldtypes import Count, described
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.blockkit import ABSENT, Block, BuildInputs
from anvil_metrics.post.blocks import BLOCKS, registered
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.schema import FIELDS, RunFields
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.launch import summary_lines
from anvil_metrics.schemas.build import benchmark_schema, fields_page


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return full_benchmark(tmp_path_factory.mktemp("full"))


def _fields(model: Any) -> set[str]:
    info = msgspec.inspect.type_info(model)
    while isinstance(info, msgspec.inspect.UnionType):  # X | None: its X
        info = next(t for t in info.types if not isinstance(t, msgspec.inspect.NoneType))
    if isinstance(info, msgspec.inspect.ListType):
        info = info.item_type
    return {f.name for f in info.fields} if isinstance(info, msgspec.inspect.StructType) else set()


def test_the_document_is_the_run_fields_and_the_blocks(doc: dict[str, Any]) -> None:
    names = {f.name for f in FIELDS} | {b.name for b in BLOCKS}
    assert set(doc) <= names
    assert set(doc) == names, "the full benchmark holds every field and block"
    assert not {f.name for f in FIELDS} & {b.name for b in BLOCKS}


@pytest.mark.parametrize("block", [b for b in BLOCKS if _fields(b.model)], ids=lambda b: b.name)
def test_a_blocks_definition_is_what_its_writer_writes(doc: dict[str, Any], block: Block
                                                       ) -> None:
    value = doc[block.name]
    msgspec.convert(value, block.model)  # raises if the writer wrote what it does not say
    if value is None:  # null in this run (the steady state of a stepped run)
        return
    first = value[0] if isinstance(value, list) else value
    assert set(first) <= _fields(block.model)


def test_the_run_fields_nested_definitions_are_their_writers(doc: dict[str, Any]) -> None:
    run = msgspec.convert({k: v for k, v in doc.items() if k in RunFields.__struct_fields__},
                          RunFields)
    assert run.schema == doc["schema"]
    assert set(doc["failures"][0]) == {"request_index", "kind", "http_status", "message",
                                       "phase", "step", "job_id", "replica"}


class Dummy(Struct, forbid_unknown_fields=True):
    """a block added in a test"""

    requests_seen: Annotated[Count, described("", "the rows the dummy block counted")]


def _build(inputs: BuildInputs) -> Any:
    return {"requests_seen": len(inputs.rows)} if inputs.rows is not None else ABSENT


def _verify(doc: dict[str, Any], rows: Any, problems: list[str]) -> None:
    block = doc.get("dummy")
    if block is not None and rows is not None and block["requests_seen"] != len(rows):
        problems.append(f"dummy.requests_seen: file has {block['requests_seen']}, recomputed "
                        f"{len(rows)} from the rows")


def _summary(doc: dict[str, Any]) -> list[str]:
    return [f"dummy: {doc['dummy']['requests_seen']} rows"] if "dummy" in doc else []


DUMMY = Block("dummy", Dummy | None, "a block added in a test", _build, _verify, _summary)


def test_a_new_block_is_one_entry_in_the_schema_the_docs_the_build_verify_and_the_lines(
        tmp_path) -> None:
    blocks = registered([DUMMY])
    schema = benchmark_schema(blocks)
    assert schema["properties"]["dummy"]["description"] == "a block added in a test"
    assert schema["properties"]["dummy"]["properties"]["requests_seen"]["minimum"] == 0
    assert "dummy" not in benchmark_schema()["properties"]
    page = fields_page(blocks)
    assert "| `dummy.requests_seen` | integer | no |  | the rows the dummy block counted |" in page
    write_raw(tmp_path / "requests.jsonl", HEADER, [completed(i) for i in range(3)],
              {"ended_by": "requests"})
    raw = read_raw(tmp_path / "requests.jsonl")
    doc = build_benchmark(raw, blocks=blocks)
    assert doc["dummy"] == {"requests_seen": 3}
    assert verify_benchmark(doc, blocks) == []
    assert "dummy: 3 rows" in summary_lines(doc, blocks)
    assert "dummy: 3 rows" not in summary_lines(doc)
    doc["dummy"]["requests_seen"] = 2
    assert verify_benchmark(doc, blocks) == [
        "dummy.requests_seen: file has 2, recomputed 3 from the rows"]
    doc["dummy"] = {"requests_seen": -1}
    assert verify_benchmark(doc, blocks) == [
        "dummy.requests_seen: expected a non-negative integer below 2**53, file has -1"]
    with pytest.raises(ValueError, match="two blocks of one name"):
        registered([DUMMY, DUMMY])


def test_the_cli_lines_are_each_blocks_in_the_registrys_order(doc: dict[str, Any]) -> None:
    lines = summary_lines(doc)
    firsts = {b.name: b.summary(doc)[0] for b in BLOCKS if b.summary and b.summary(doc)}
    at = [lines.index(first) for first in firsts.values()]
    assert at == sorted(at) and len(firsts) >= 5
