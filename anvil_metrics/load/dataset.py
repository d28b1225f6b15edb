"""Prompts from a dataset file (`--dataset FILE`): real questions instead of synthetic text.

Why: synthetic prompts are exact in size but not in content, and content moves some
servers' figures (speculative decoding's acceptance, reasoning length, cache behaviour).
vLLM's and SGLang's bench tools sample ShareGPT; AIPerf and GuideLLM take JSONL files. No
file is downloaded at run time; the README says where the common sets are.

Formats (`--dataset-format`, else told by the file):

- `sharegpt`: a JSON array of `{"conversations": [{"from": "human" | "gpt" | "system",
  "value": "..."}, ...]}` (ShareGPT_V3_unfiltered_cleaned_split.json). Every human message
  is a turn: multi-turn runs (`[conversation]`) send them all, in order, with the server's
  own answers between; single-turn runs send each conversation's first.
- `jsonl`: one object a line, `{"prompt": "..."}` or `{"messages": [{"role": ..., "content":
  ...}, ...]}` (its user messages are the turns, a system message opens the conversation).
- `text`: a plain text file; each paragraph (lines up to a blank line) is one prompt.

Entries without any user turn (ShareGPT holds some) are skipped; a malformed one is one
`DatasetError` naming the file, the line (or the array's index) and the field. Request k
(or conversation k) takes entry k mod n of the file's order. A dataset prompt has no
planned size: its `planned_context_tokens` is null and its size is the server's count
(`usage.prompt_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.errors import InputEntryError, UsageError
from anvil_metrics.jsonio import object_lines

FORMATS = ("sharegpt", "jsonl", "text")


class DatasetError(InputEntryError):
    """A dataset entry that cannot be sent: where, which field, what it must be."""


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    """One conversation of the dataset: its system prompt (None: none) and user turns."""

    system: str | None
    turns: tuple[str, ...]


def detect_format(path: Path) -> str:
    """`sharegpt` for a file that opens a JSON array, `jsonl` for one that opens an
    object, else `text`."""
    with path.open("rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        return "sharegpt"
    return "jsonl" if head.startswith(b"{") else "text"


def _text(path: str, where: str, field: str, v: Any) -> str:
    if not isinstance(v, str):
        raise DatasetError(path, where, field, v, "a string")
    return v


def _sharegpt(path: Path) -> list[DatasetEntry]:
    p = str(path)
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise DatasetError(p, "1", "file", path.name, f"one JSON array ({e})") from None
    if not isinstance(doc, list):
        raise DatasetError(p, "1", "file", type(doc).__name__, "a JSON array of entries")
    out = []
    for i, entry in enumerate(doc):
        where = f"[{i}]"
        msgs = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(msgs, list):
            raise DatasetError(p, where, "conversations", msgs, "a list of messages")
        system, turns = None, []
        for j, m in enumerate(msgs):
            if not isinstance(m, dict):
                raise DatasetError(p, f"{where}[{j}]", "message", m, "an object")
            who = m.get("from")
            value = _text(p, f"{where}[{j}]", "value", m.get("value"))
            if who == "human":
                turns.append(value)
            elif who == "system" and not turns:
                system = value
            elif who not in ("gpt", "system", "chatgpt", "bing", "bard"):
                raise DatasetError(p, f"{where}[{j}]", "from", who, "human, gpt or system")
        if turns:
            out.append(DatasetEntry(system, tuple(turns)))
    return out


def _jsonl(path: Path) -> list[DatasetEntry]:
    p = str(path)
    out = []
    for n, obj in object_lines(path, DatasetError):
        if ("prompt" in obj) == ("messages" in obj):
            raise DatasetError(p, str(n), "line", obj,
                               'an object with "prompt" or "messages"')
        if "prompt" in obj:
            out.append(DatasetEntry(None, (_text(p, str(n), "prompt", obj["prompt"]),)))
            continue
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
            raise DatasetError(p, str(n), "messages", msgs, "a list of message objects")
        system = None
        turns = []
        for j, m in enumerate(msgs):
            content = _text(p, str(n), f"messages[{j}].content", m.get("content"))
            if m.get("role") == "user":
                turns.append(content)
            elif m.get("role") == "system" and not turns:
                system = content
        if turns:
            out.append(DatasetEntry(system, tuple(turns)))
    return out


def _paragraphs(path: Path) -> list[DatasetEntry]:
    text = path.read_text(encoding="utf-8", errors="replace")
    parts = [" ".join(line.strip() for line in block.splitlines() if line.strip())
             for block in text.split("\n\n")]
    return [DatasetEntry(None, (t,)) for t in parts if t]


def read_dataset(path: str | Path, fmt: str | None = None) -> list[DatasetEntry]:
    """Every usable entry of the dataset, in file order, checked."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--dataset {str(p)!r}: no such file; pass a dataset file")
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"--dataset-format {fmt!r}: use one of {', '.join(FORMATS)}")
    fmt = fmt or detect_format(p)
    entries = (_sharegpt(p) if fmt == "sharegpt" else _jsonl(p) if fmt == "jsonl"
               else _paragraphs(p))
    if not entries:
        raise UsageError(f"{p}: the dataset holds no prompt to send")
    return entries


@dataclass(frozen=True, slots=True)
class DatasetPlan:
    """What `--dataset` and `--dataset-format` ask."""

    path: str
    fmt: str | None = None

    def read(self) -> list[DatasetEntry]:
        return read_dataset(self.path, self.fmt)

    def to_params(self, entries: list[DatasetEntry]) -> dict[str, Any]:
        """The raw header's `params.dataset` (the benchmark's `dataset`): the file's name, its
        format as given (null: told by the file) and how many entries it holds (`entries`,
        as read once by the run)."""
        return {"file": Path(self.path).name, "format": self.fmt, "entries": len(entries)}


class DatasetTurns:
    """A multi-turn run's messages from a dataset: conversation k is entry k mod n, its
    system prompt first, each of its user turns in order (the plan's turn count gives way
    to the entry's own); the same interface as `prep.turns.ConversationPrompts`."""

    def __init__(self, entries: list[DatasetEntry], run_nonce: str) -> None:
        self._entries = entries
        self.run_nonce = run_nonce

    def _entry(self, conversation: int) -> DatasetEntry:
        return self._entries[conversation % len(self._entries)]

    def turns(self, conversation: int) -> int:
        return len(self._entry(conversation).turns)

    def opening(self, conversation: int = 0) -> list[dict[str, str]]:
        system = self._entry(conversation).system
        return [] if system is None else [{"role": "system", "content": system}]

    def user_message(self, conversation: int, turn: int) -> dict[str, str]:
        return {"role": "user", "content": self._entry(conversation).turns[turn - 1]}
