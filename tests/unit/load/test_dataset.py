"""dataset: the three formats read into conversations of user turns (ShareGPT's every human
message, a JSONL's prompt or user messages, a text's paragraphs), entries without a user
turn skipped, and a malformed entry one line naming the file, where and the field."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.load.dataset import (
    DatasetEntry,
    DatasetError,
    DatasetPlan,
    DatasetTurns,
    detect_format,
    read_dataset,
)

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "system", "value": "Be brief."},
                                  {"from": "human", "value": "Hi?"},
                                  {"from": "gpt", "value": "Hello."},
                                  {"from": "human", "value": "And then?"}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "nothing asked"}]},
    {"id": "c", "conversations": [{"from": "human", "value": "One question."}]},
]


def test_sharegpt_keeps_every_human_turn_in_order(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_bytes(orjson.dumps(SHAREGPT))
    assert detect_format(path) == "sharegpt"
    assert read_dataset(path) == [DatasetEntry("Be brief.", ("Hi?", "And then?")),
                                  DatasetEntry(None, ("One question.",))]
    turns = DatasetTurns(read_dataset(path), "n")
    assert (turns.turns(0), turns.turns(1), turns.turns(2)) == (2, 1, 2)  # k mod n
    assert turns.opening(0) == [{"role": "system", "content": "Be brief."}]
    assert turns.user_message(2, 2) == {"role": "user", "content": "And then?"}
    plan = DatasetPlan(str(path))
    assert plan.to_params(plan.read()) == {"file": "sg.json", "format": None,
                                                  "entries": 2}


def test_jsonl_prompts_and_messages_and_text_paragraphs(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "Why?"}\n\n{"messages": [{"role": "system", "content": "S"}, '
                    '{"role": "user", "content": "Q1"}, {"role": "assistant", "content": '
                    '"A1"}, {"role": "user", "content": "Q2"}]}\n')
    assert read_dataset(path) == [DatasetEntry(None, ("Why?",)), DatasetEntry("S", ("Q1", "Q2"))]
    text = tmp_path / "sonnet.txt"
    text.write_text("Shall I compare thee\n  to a summer's day?\n\n\nThou art more lovely\n")
    assert read_dataset(text) == [DatasetEntry(None, ("Shall I compare thee to a summer's day?",)),
                                  DatasetEntry(None, ("Thou art more lovely",))]


@pytest.mark.parametrize("name,content,where", [
    ("a.jsonl", '{"prompt": "ok"}\n{"prompt": 3}\n', "a.jsonl:2: prompt = 3"),
    ("b.jsonl", '{"prompt": "ok"}\nnot json\n', "b.jsonl:2: line = 'not json'"),
    ("c.jsonl", '{"prompt": "x", "messages": []}\n', "c.jsonl:1: line = "),
    ("d.json", '[{"conversations": [{"from": "human", "value": "q"}]}, {"x": 1}]',
     "d.json:[1]: conversations = None"),
    ("e.json", '[{"conversations": [{"from": "robot", "value": "q"}]}]',
     "e.json:[0][0]: from = 'robot'"),
])  # fmt: skip
def test_a_malformed_entry_is_one_line_naming_it(tmp_path: Path, name: str, content: str,
                                                 where: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DatasetError) as e:
        read_dataset(path)
    text = str(e.value)
    assert where in text and "is not allowed; use " in text and "\n" not in text
    assert e.value.exit_code == 2


def test_no_file_no_prompt_or_an_unknown_format_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        read_dataset(tmp_path / "missing.json")
    empty = tmp_path / "empty.json"
    empty.write_text('[{"conversations": [{"from": "gpt", "value": "x"}]}]')
    with pytest.raises(UsageError, match="holds no prompt"):
        read_dataset(empty)
    with pytest.raises(UsageError, match="--dataset-format 'csv': use one of"):
        read_dataset(empty, "csv")
