"""The simulator's tokenizers: deterministic rules that are deliberately *not* one token a word.

anvil sizes prompts in tokens, and a sizing bug hides easily behind a tokenizer that counts
words. These rules make a word's cost depend on its length, so a client that guesses instead of
asking the server (`/tokenize`, or a `max_tokens=1` probe) is caught out. Two different rules
exist so that a calibration learnt against one server is visibly wrong against the other.

Rules (pieces are found with the regex ``\\w+|[^\\w\\s]``; whitespace is free except as noted):

- ``words4``: a word piece of length L costs ceil(L / 4) tokens; each punctuation char costs 1.
- ``syllable3``: a word piece costs 1 + L // 3 tokens; each punctuation char costs 1; each
  newline costs 1.

Chat template (ChatML-like, ``<|im_start|>role\\ncontent<|im_end|>\\n``): each message costs
``MESSAGE_OVERHEAD`` (4) tokens + its role name's tokens under the same rule + its content's
tokens; the assistant generation prompt adds ``GENERATION_PROMPT_TOKENS`` (3).

The same template as text (`render_chat`, what llama.cpp's ``/apply-template`` returns) is
``<|im_start|>role\ncontent<|im_end|>\n`` per message and ``<|im_start|>assistant\n`` for the
generation prompt. Tokenizing that text with its special tokens parsed (`template_token_ids`,
llama.cpp's ``/tokenize``) parses it back into its turns, so it gives exactly the chat ids; the
template's newlines and the generation prompt's ``assistant`` are single special tokens, which
a plain text count of the rendered string would not give (a newline is free under ``words4``).

Token ids are fake but deterministic, and ``len(ids) == count`` always holds.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

RULES = ("words4", "syllable3")
MESSAGE_OVERHEAD = 4
GENERATION_PROMPT_TOKENS = 3

_PIECE = re.compile(r"(?P<word>\w+)|(?P<newline>\n)|(?P<punct>[^\w\s])")
_SPLIT = re.compile(r"\w+|\n|[^\w\s]")  # `_PIECE` without its groups: the same pieces
_VOCAB = 150_000  # fake ids live in [0, _VOCAB); specials sit above it
_IM_START, _IM_END, _NEWLINE = 151_644, 151_645, 198
_ASSISTANT = zlib.crc32(b"assistant") % _VOCAB  # the generation prompt's role: one token
_EMPTY = np.zeros(0, dtype=np.int64)

IM_START_TEXT, IM_END_TEXT = "<|im_start|>", "<|im_end|>"
GENERATION_PROMPT_TEXT = f"{IM_START_TEXT}assistant\n"
_TURN = re.compile(r"<\|im_start\|>([^\n]*)\n(.*?)<\|im_end\|>\n", re.DOTALL)
_SPECIAL = re.compile(r"(<\|im_start\|>|<\|im_end\|>)")
_SPECIAL_IDS = {IM_START_TEXT: _IM_START, IM_END_TEXT: _IM_END}


class TokenizeError(ValueError):
    """A message or content part the template cannot render (bad shape, non-text part)."""


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown tokenizer rule {rule!r}; expected one of {RULES}")


def _piece_cost(kind: str, piece: str, rule: str) -> int:
    """Tokens one regex piece of `kind` (word, newline, punct) costs under `rule`."""
    if kind == "word":
        return -(-len(piece) // 4) if rule == "words4" else 1 + len(piece) // 3
    if kind == "newline":
        return 1 if rule == "syllable3" else 0
    return 1


def _pieces(text: str) -> Iterator[tuple[str, str]]:
    for match in _PIECE.finditer(text):
        yield match.lastgroup or "punct", match.group()


def _count_pieces(text: str, rule: str) -> int:
    """Reference count, one regex piece at a time (the definition; slow on long texts)."""
    return sum(_piece_cost(kind, piece, rule) for kind, piece in _pieces(text))


def _char_class(char: str) -> int:
    """0 whitespace, 1 word character (``\\w``), 2 other: the classes behind `_PIECE`.

    Python's ``\\w`` is exactly ``str.isalnum()`` or ``_``, and ``\\s`` is ``str.isspace()``.
    """
    if char.isalnum() or char == "_":
        return 1
    return 0 if char.isspace() else 2


_ASCII_CLASSES = np.array([_char_class(chr(code)) for code in range(128)], dtype=np.uint8)
_VECTOR_FROM = 256  # characters: below about this, counting piece by piece is faster


def _classes(text: str) -> np.ndarray:
    """The `_char_class` of every character of `text`, looked up in bulk."""
    if text.isascii():
        return _ASCII_CLASSES[np.frombuffer(text.encode("ascii"), dtype=np.uint8)]
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    wide = codes >= 128
    classes = _ASCII_CLASSES[np.where(wide, 0, codes)]
    others, inverse = np.unique(codes[wide], return_inverse=True)
    table = np.array([_char_class(chr(code)) for code in others.tolist()], dtype=np.uint8)
    classes[wide] = table[inverse]
    return classes


def _count_vectorised(text: str, rule: str) -> int:
    """`_count_pieces` for long texts: word runs found from class transitions in numpy."""
    classes = _classes(text)
    word = np.zeros(classes.size + 2, dtype=np.int8)
    word[1:-1] = classes == 1
    edges = word[1:] - word[:-1]
    lengths = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    punct = int(np.count_nonzero(classes == 2))
    if rule == "words4":
        return int(((lengths + 3) // 4).sum()) + punct
    return int(lengths.size + (lengths // 3).sum()) + punct + text.count("\n")


def count_text_tokens(text: str, rule: str = "words4") -> int:
    """Number of tokens `text` costs under `rule` (``words4`` or ``syllable3``), no template.

    Long texts are counted vectorised because the simulator counts every prompt on its event
    loop, where a slow count (~5 ms for 40 kB piece by piece) would delay every other stream.
    """
    _check_rule(rule)
    if len(text) < _VECTOR_FROM:
        return _count_pieces(text, rule)
    return _count_vectorised(text, rule)


def text_token_ids(text: str, rule: str = "words4") -> list[int]:
    """Fake, deterministic token ids for `text`; exactly `count_text_tokens(text, rule)` long."""
    _check_rule(rule)
    ids: list[int] = []
    for kind, piece in _pieces(text):
        base = zlib.crc32(piece.encode())
        ids.extend((base + k) % _VOCAB for k in range(_piece_cost(kind, piece, rule)))
    return ids


def message_text(message: Mapping[str, Any]) -> str:
    """The text a message contributes: a string, or the joined ``text`` of its text parts.

    ``None`` content (an assistant turn with only tool calls) contributes nothing. Non-text
    parts (images, audio) raise `TokenizeError`: the simulator is a text-only model.
    """
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise TokenizeError("only text content parts are supported")
            text = part.get("text")
            if not isinstance(text, str):
                raise TokenizeError("a text content part needs a string 'text'")
            texts.append(text)
        return "".join(texts)
    raise TokenizeError("message content must be a string, a list of parts, or null")


def _role(message: Any) -> str:
    if not isinstance(message, Mapping):
        raise TokenizeError("each message must be an object")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise TokenizeError("each message needs a string 'role'")
    return role


def count_chat_tokens(
    messages: Iterable[Mapping[str, Any]],
    rule: str = "words4",
    add_generation_prompt: bool = True,
) -> int:
    """Prompt tokens of `messages` after the ChatML-like template (see module docstring).

    This is the figure the simulator reports as ``usage.prompt_tokens`` and as ``count`` from
    ``POST /tokenize`` with ``messages``. Raises `TokenizeError` on a malformed message.
    """
    _check_rule(rule)
    total = GENERATION_PROMPT_TOKENS if add_generation_prompt else 0
    for message in messages:
        role = _role(message)
        total += MESSAGE_OVERHEAD + count_text_tokens(role, rule)
        total += count_text_tokens(message_text(message), rule)
    return total


def chat_token_ids(
    messages: Iterable[Mapping[str, Any]],
    rule: str = "words4",
    add_generation_prompt: bool = True,
) -> list[int]:
    """Fake ids of the templated chat; exactly `count_chat_tokens(...)` long."""
    _check_rule(rule)
    ids: list[int] = []
    for message in messages:
        role = _role(message)
        ids.append(_IM_START)
        ids.extend(text_token_ids(role, rule))
        ids.append(_NEWLINE)
        ids.extend(text_token_ids(message_text(message), rule))
        ids.extend((_IM_END, _NEWLINE))
    if add_generation_prompt:
        ids.extend((_IM_START, zlib.crc32(b"assistant") % _VOCAB, _NEWLINE))
    return ids


# -- fast ids: numpy arrays, for the prefix cache and /tokenize --------------------------------


def _text_ids(text: str, rule: str) -> np.ndarray:
    """`text_token_ids` as an array, with one crc32 per *distinct* piece.

    Real prompts repeat their words, so this is several times faster on long texts than going
    piece by piece; the tests check it against `text_token_ids`.
    """
    pieces = _SPLIT.findall(text)
    if not pieces:
        return _EMPTY
    index = {piece: k for k, piece in enumerate(dict.fromkeys(pieces))}
    distinct = list(index)
    base = np.fromiter(
        (zlib.crc32(p.encode()) for p in distinct), dtype=np.int64, count=len(distinct)
    )
    cost = np.fromiter(
        (_piece_cost(_PIECE.fullmatch(p).lastgroup or "punct", p, rule) for p in distinct),
        dtype=np.int64,
        count=len(distinct),
    )
    which = np.fromiter(map(index.__getitem__, pieces), dtype=np.intp, count=len(pieces))
    counts = cost[which]
    starts = np.cumsum(counts) - counts
    offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)
    return (np.repeat(base[which], counts) + offsets) % _VOCAB


def text_ids(text: str, rule: str = "words4") -> np.ndarray:
    """The ids of `text_token_ids` (no template), as a uint32 array."""
    _check_rule(rule)
    return _text_ids(text, rule).astype(np.uint32)


def _turn_ids(role: str, text: str, rule: str) -> list[np.ndarray]:
    """One templated message: ``<|im_start|>`` role ``\\n`` content ``<|im_end|>\\n``."""
    return [
        np.array([_IM_START], dtype=np.int64),
        _text_ids(role, rule),
        np.array([_NEWLINE], dtype=np.int64),
        _text_ids(text, rule),
        np.array([_IM_END, _NEWLINE], dtype=np.int64),
    ]


_GENERATION_IDS = np.array([_IM_START, _ASSISTANT, _NEWLINE], dtype=np.int64)


def prompt_token_ids(
    messages: Iterable[Mapping[str, Any]],
    rule: str = "words4",
    add_generation_prompt: bool = True,
) -> np.ndarray:
    """The ids of `chat_token_ids`, as a uint32 array (~4x faster on long prompts).

    The prefix cache needs every id of every prompt and ``/tokenize`` returns them; the list
    builder costs about 1.5 us a token (~0.6 s for a 400k-token prompt, on the event loop that
    times every stream). Raises `TokenizeError` on a malformed message.
    """
    _check_rule(rule)
    parts: list[np.ndarray] = [_EMPTY]
    for message in messages:
        parts += _turn_ids(_role(message), message_text(message), rule)
    if add_generation_prompt:
        parts.append(_GENERATION_IDS)
    return np.concatenate(parts).astype(np.uint32)


# -- the template as text (llama.cpp's /apply-template and /tokenize) ---------------------------


def render_chat(
    messages: Iterable[Mapping[str, Any]], add_generation_prompt: bool = True
) -> str:
    """The templated prompt as text; `template_token_ids` of it is `prompt_token_ids`.

    Raises `TokenizeError` on a malformed message, as the chat path does.
    """
    turns = [
        f"{IM_START_TEXT}{_role(m)}\n{message_text(m)}{IM_END_TEXT}\n" for m in messages
    ]
    if add_generation_prompt:
        turns.append(GENERATION_PROMPT_TEXT)
    return "".join(turns)


def _special_text_ids(text: str, rule: str) -> list[np.ndarray]:
    """Text outside the template's turns: each marker is its one special id, the rest by rule."""
    return [
        np.array([_SPECIAL_IDS[part]], dtype=np.int64) if part in _SPECIAL_IDS
        else _text_ids(part, rule)
        for part in _SPECIAL.split(text) if part
    ]


def template_token_ids(text: str, rule: str = "words4") -> np.ndarray:
    """Ids of `text` with the template's special tokens parsed, as llama.cpp tokenizes.

    The text is parsed back into what `render_chat` writes: each turn
    ``<|im_start|>ROLE\\nCONTENT<|im_end|>\\n`` gets exactly its chat ids, and a final
    ``<|im_start|>assistant\\n`` the generation prompt's ids, so ``template_token_ids(
    render_chat(m)) == prompt_token_ids(m)``. Any other text (before, between or after turns)
    is counted by the rule with each marker as its one special id. A content that itself
    contains ``<|im_end|>\\n``, or a role with a newline, does not parse back into the same
    turn (a real server would parse those markers as special tokens too).
    """
    _check_rule(rule)
    parts: list[np.ndarray] = [_EMPTY]
    pos = 0
    for turn in _TURN.finditer(text):
        parts += _special_text_ids(text[pos : turn.start()], rule)
        parts += _turn_ids(turn[1], turn[2], rule)
        pos = turn.end()
    tail = text[pos:]
    if tail == GENERATION_PROMPT_TEXT:
        parts.append(_GENERATION_IDS)
    else:
        parts += _special_text_ids(tail, rule)
    return np.concatenate(parts).astype(np.uint32)
