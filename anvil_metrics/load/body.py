"""Request bodies: the scenario's switches turned into chat-completion JSON, cheaply.

Every source of a run's single-turn bodies (planned sizes: `BodyBuilder`; a dataset:
`DatasetBodies`; a trace: `TraceBodies`; a request mix: `mixbodies.MixBodies`) is a
`RequestBodies`: the one interface the users, the session and the plugin read, whatever the
source. A source says only where it differs from the defaults (its own planned sizes, header
lines, record extras); a new source subclasses it and works wherever a run's bodies do.

A body differs between requests of one planned size only by two short strings of the user
message: its head (unique per request, or per group in shared-prefix mode) and, in
shared-prefix mode, the tag where a request leaves its group's prefix (see `prompts.py`).
So each size's body is serialised once, split at two markers, and each request's bytes are
`a + escaped(head) + b + escaped(tag) + c`: concatenations instead of re-serialising up to
1.5 MB of prompt per request on the gevent hub (~0.3 ms for 1.5 MB against ~2 ms).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from anvil_metrics.errors import AnvilError
from anvil_metrics.load.conversation import DEFAULT_SESSION_HEADER, ConversationDraws
from anvil_metrics.load.dataset import DatasetEntry, DatasetTurns
from anvil_metrics.load.media import MediaPool
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.load.scenariofields import TEXT_ENDPOINTS
from anvil_metrics.load.trace import TraceRequest
from anvil_metrics.prep.prompts import PromptFactory
from anvil_metrics.prep.traceprompts import TracePrompts
from anvil_metrics.prep.turns import ConversationPrompts
from anvil_metrics.wire.observe import KeptAnswer

# invisible separators; never produced by the text generator
SAFE_SESSION = re.compile(r"(?!h-)[A-Za-z0-9._:-]{1,64}")  # a session id sent as it is
_MARK_HEAD = "\u2063anvil-head\u2063"
_MARK_TAG = "\u2063anvil-tag\u2063"
_MARK_MEDIA = "\u2063anvil-media\u2063"  # where a media part's data goes (`load/media.py`)
HEAD_IDS = 6  # a token-id prompt's ids that number its request (`BodyBuilder._head_ids`)
# the key of the prompt in each endpoint's body: the messages, or (a text endpoint's) the
# user message's text
PROMPT_KEYS = {"chat": "messages", "completions": "prompt", "responses": "input",
               "embeddings": "input", "messages": "messages"}


def body_fields(sc: Scenario, model: str) -> dict[str, Any]:
    """Everything but the prompt (`PROMPT_KEYS`), per the scenario and its endpoint (see
    SERVERS.md for the switches; a text endpoint's scenario has no chat-template ones)."""
    if sc.endpoint == "embeddings":  # one answer, nothing generated
        return _with_extra({"model": model, "encoding_format": "float"}, sc.extra_body)
    body: dict[str, Any] = {"model": model, "max_tokens": sc.max_tokens, "stream": True}
    if sc.include_usage:
        body["stream_options"] = {"include_usage": True}
    if sc.reasoning_effort:
        body["reasoning_effort"] = sc.reasoning_effort
    if sc.thinking_mode in ("on", "off"):
        body["chat_template_kwargs"] = {"enable_thinking": sc.thinking_mode == "on"}
    fixed_history = sc.conversation is not None and sc.conversation.history == "fixed"
    if sc.fixed_output_tokens or fixed_history:
        body["ignore_eos"] = True
        body["min_tokens"] = sc.max_tokens
    if sc.endpoint == "responses":
        body = _as_responses(body)
    elif sc.endpoint == "messages":
        body = _as_messages(body, sc.thinking_mode)
    return _with_extra(body, sc.extra_body)


def _as_responses(body: dict[str, Any]) -> dict[str, Any]:
    """Chat fields in the Responses API's names: `max_output_tokens`, `reasoning.effort`;
    no `stream_options` (its usage always comes, in `response.completed`) nor `min_tokens`
    (vLLM's ResponsesRequest has none: `ignore_eos` alone fixes the length)."""
    out = {k: v for k, v in body.items()
           if k not in ("max_tokens", "stream_options", "min_tokens", "reasoning_effort")}
    out["max_output_tokens"] = body["max_tokens"]
    if "reasoning_effort" in body:
        out["reasoning"] = {"effort": body["reasoning_effort"]}
    return out


def _as_messages(body: dict[str, Any], thinking_mode: str) -> dict[str, Any]:
    """Chat fields in the Anthropic Messages API's names: `max_tokens` (required there),
    `output_config.effort` for a reasoning effort (Anthropic's and vLLM's), `thinking`
    beside vLLM's `chat_template_kwargs` for a thinking switch (`budget_tokens`: all but one
    of `max_tokens`, as the chat path lets reasoning take the whole cap); no `stream_options`
    (its usage always comes, in `message_start` and `message_delta`). `ignore_eos` is
    refused before (`scenariorules.endpoint`): vLLM's Messages API has none."""
    out = {k: v for k, v in body.items() if k not in ("stream_options", "reasoning_effort")}
    if "reasoning_effort" in body:
        out["output_config"] = {"effort": body["reasoning_effort"]}
    if thinking_mode in ("on", "off"):
        out["thinking"] = ({"type": "enabled", "budget_tokens": max(body["max_tokens"] - 1, 1)}
                           if thinking_mode == "on" else {"type": "disabled"})
    return out


def prompt_fields(endpoint: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A body's prompt fields from its chat `messages`: the last one's text for a text
    endpoint; the Messages API's system prompt as its top-level `system`, the rest as its
    `messages`; the messages as they are for the others."""
    key = PROMPT_KEYS[endpoint]
    if endpoint in TEXT_ENDPOINTS:
        return {key: messages[-1]["content"]}
    if endpoint == "messages" and messages and messages[0]["role"] == "system":
        return {"system": messages[0]["content"], key: messages[1:]}
    return {key: messages}


def output_cap(fields: dict[str, Any]) -> int | None:
    """The output cap a body's `fields` send: `max_tokens`, or the Responses API's
    `max_output_tokens` (None: none, an embedding's). The observer ends a stream that
    overruns it (`wire.observe.overrun_limit`)."""
    cap = fields.get("max_tokens", fields.get("max_output_tokens"))
    return cap if type(cap) is int else None


def _with_extra(body: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`body` with the scenario's `extra_body` merged in (a table into a table)."""
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(body.get(k), dict):
            body[k] = {**body[k], **v}
        else:
            body[k] = v
    return body


# a check class's judge of one answer (as kept by its observer): what its record's `extra` gets
Judge = Callable[[KeptAnswer], dict[str, Any]]


class RequestBodies(Protocol):
    """A run's single-turn request bodies, whatever their source (the module docstring).
    `build_parts` is each source's own; the others' defaults suit a source of planned
    sizes, and a source that differs overrides them."""

    def build_parts(self, size: int, index: int, warmup: bool = False) -> tuple[bytes, ...]:
        """Request `index`'s body as pieces to send one after another (their concatenation
        is the JSON body); `size`: its planned prompt size by the budget (the ticket's)."""
        ...

    def planned(self, index: int, size: int) -> int | None:
        """Request `index`'s planned prompt size: the budget's (`size`), unless the source
        plans its own; None: nothing planned (its size is the server's count)."""
        return size

    def header_for(self, index: int) -> bytes:
        """Request `index`'s own header lines, each ending in CRLF (b"": none)."""
        return b""

    def extra(self, index: int) -> dict[str, int] | None:
        """What request `index`'s record carries in `extra` (None: nothing)."""
        return None

    def output_cap(self, index: int) -> int | None:
        """Request `index`'s output cap as its body sends it (`max_tokens`; None: none)."""
        return None

    def judge(self, index: int) -> Judge | None:
        """Request `index`'s judge of its answer's (content, reasoning), giving what its
        record carries in `extra`; None: not judged (only a mix's check class is)."""
        return None


class BodyBuilder(RequestBodies):
    """Serialised request bodies for (planned size, request index)."""

    def __init__(self, sc: Scenario, model: str, prompts: PromptFactory,
                 ids_of: Callable[[str], list[int]] | None = None,
                 media: MediaPool | None = None) -> None:
        """`ids_of`: the server's token ids of a text (`--prompt-ids`; `token_ids`);
        `media`: a request class's images and clips, parts after the user message's text."""
        self._fields = body_fields(sc, model)
        self._cap = output_cap(self._fields)
        self._key = PROMPT_KEYS[sc.endpoint]
        self._endpoint = sc.endpoint
        self.prompts = prompts
        self._split: dict[int, tuple[bytes, bytes, bytes]] = {}
        self._ids_of = ids_of
        self._digits: list[bytes] = []  # token ids of a request's head (`token_ids`)
        self._media = media
        self._tails: dict[int, list[bytes]] = {}

    def prepare(self, sizes: list[int]) -> None:
        self.prompts.prepare(sizes)
        for size in set(sizes):
            self._template(size)

    def _template(self, size: int) -> tuple[bytes, bytes, bytes]:
        t = self._split.get(size)
        if t is None and self._ids_of is not None:
            t = self._split[size] = self._ids_template(size)
        elif t is None:
            parts = self.prompts.parts(size, 0)
            msgs = self.prompts.messages(size, 0)
            msgs[-1]["content"] = _MARK_HEAD + parts.prefix + _MARK_TAG + parts.body
            if self._media is not None:
                msgs[-1]["content"] = [{"type": "text", "text": msgs[-1]["content"]},
                                       *self._media.content_parts(_MARK_MEDIA)]
            raw = orjson.dumps({**self._fields, **prompt_fields(self._endpoint, msgs)})
            a, rest = raw.split(orjson.dumps(_MARK_HEAD)[1:-1], 1)
            b, c = rest.split(orjson.dumps(_MARK_TAG)[1:-1], 1)
            t = self._split[size] = (a, b, c)
        return t

    def _ids_template(self, size: int) -> tuple[bytes, bytes, bytes]:
        """A size's body around token ids (`--prompt-ids`): the server's ids of its first
        request's text (repeated if short) cut to `size - HEAD_IDS`, after a head of
        `HEAD_IDS` ids that spells the request's number in digits drawn from those ids:
        exactly `size` ids, each one the server's, no two requests alike."""
        ids = self._ids_of(self.prompts.messages(size, 0)[-1]["content"])  # type: ignore[misc]
        if not self._digits:
            self._digits = [b"%d," % t for t in sorted(set(ids))[:64]]
            if len(self._digits) < 2:
                raise AnvilError("--prompt-ids: the server's token ids of a prompt are all "
                                 "one id; send text prompts instead")
        body = (ids * (1 + size // len(ids)))[:max(size - HEAD_IDS, 0)]
        a, c = orjson.dumps({**self._fields, self._key: []}).rsplit(
            b'"%s":[]' % self._key.encode(), 1)
        return (a + b'"%s":[' % self._key.encode(), ",".join(map(str, body)).encode(),
                b"]" + c)

    def _head_ids(self, request_index: int, warmup: bool) -> bytes:
        """`HEAD_IDS` ids spelling (request index, warm-up) in base len(digits), least
        significant first."""
        n, base, out = 2 * request_index + warmup, len(self._digits), []
        for _ in range(HEAD_IDS):
            n, d = divmod(n, base)
            out.append(self._digits[d])
        return b"".join(out)

    def build_parts(self, size: int, request_index: int, warmup: bool = False
                    ) -> tuple[bytes, ...]:
        """The request body as pieces to send one after another (their concatenation is
        the JSON body): no per-request copy of the prompt."""
        if self._ids_of is not None:
            a, body, c = self._template(size)
            head = self._head_ids(request_index, warmup)
            return (a, head if body else head[:-1], body, c)
        a, b, c = self._template(size)
        parts = self.prompts.parts(size, request_index, warmup)
        text = (a, orjson.dumps(parts.head)[1:-1], b, orjson.dumps(parts.tag)[1:-1])
        if self._media is None:
            return (*text, c)
        pieces = self._tails.get(size)
        if pieces is None:  # the tail around the media parts, split once per size
            pieces = self._tails[size] = c.split(orjson.dumps(_MARK_MEDIA)[1:-1])
        media = self._media.parts(request_index)
        return (*text, *(x for pair in zip(pieces, media, strict=False) for x in pair),
                pieces[-1])

    def build(self, size: int, request_index: int, warmup: bool = False) -> bytes:
        """The request body as one bytes object."""
        return b"".join(self.build_parts(size, request_index, warmup))

    def output_cap(self, index: int) -> int | None:
        return self._cap


class ConversationBodies:
    """Request bodies of conversations: the scenario's fields around a conversation's
    messages so far. Each message is serialised once, when it joins the conversation, so
    turn k's body is k joins of bytes, not the whole history re-serialised."""

    def __init__(self, sc: Scenario, model: str,
                 prompts: ConversationPrompts | DatasetTurns) -> None:
        assert sc.conversation is not None
        self.plan = sc.conversation
        self.mix = sc.mix if sc.mix is not None and sc.mix.models is not None else None
        names = [model] if self.mix is None else list(self.mix.model_names)
        # each model's body around the messages; the last occurrence: the key is added
        # last (extra_body may nest a "messages")
        key = PROMPT_KEYS[sc.endpoint].encode()
        self._key = b'"%s":[' % key
        self._ends = [tuple(orjson.dumps({**body_fields(sc, name), key.decode(): []}).rsplit(
            b'"%s":[]' % key, 1)) for name in names]
        self.by_id = self.plan.previous_response_id  # later turns: the new message, an id
        # where the system prompt goes when it is no message: a conversation continued by
        # id sends it as `instructions`, the Messages API as its top-level `system`
        self._system = (b"instructions" if self.by_id else
                        b"system" if sc.endpoint == "messages" else None)
        self.prompts = prompts
        self.output_cap = output_cap(body_fields(sc, names[0]))  # every turn's cap

    def start(self, conversation: int) -> Conversation:
        """Conversation `conversation`'s history (the shared opening only), its draws and
        its session header line (`{header}: {run nonce}-{conversation}`)."""
        name = self.plan.session_header
        header = (b"" if name is None else
                  f"{name}: {self.prompts.run_nonce}-{conversation}\r\n".encode("ascii"))
        p = self.prompts
        messages = p.opening(conversation)
        instructions = b""
        if self._system is not None and messages and messages[0]["role"] == "system":
            # a stored response's system message does not carry over (OpenAI's rule, and
            # vLLM's): each turn sends it as its `instructions`, first in the prompt again
            instructions = b'"%s":%s,' % (self._system, orjson.dumps(
                messages.pop(0)["content"]))
        opening = [orjson.dumps(m) for m in messages]
        fixed = p.turns(conversation)  # a dataset's conversation: its own, at most the plan's
        fixed = None if fixed is None else min(fixed, self.plan.max_turns)
        # a conversation keeps one model: its number's draw (`mix.py`)
        model = None if self.mix is None else self.mix.model_of(conversation, None)
        return Conversation(self, conversation, opening, self.plan.draws(conversation, fixed),
                            header, model, instructions)


class Conversation:
    """One conversation's messages as serialised, its next turn, and what its records
    carry (`extra`: conversation, turn, turns, history_tokens)."""

    __slots__ = ("_bodies", "index", "turn", "_messages", "draws", "header",
                 "history_tokens", "model", "_ends", "response_id")

    def __init__(self, bodies: ConversationBodies, index: int, messages: list[bytes],
                 draws: ConversationDraws, header: bytes = b"",
                 model: int | None = None, instructions: bytes = b"") -> None:
        self._bodies = bodies
        self.model = model  # its model's position in the mix's `model_names` (None: the run's)
        head, tail = bodies._ends[model or 0]
        self._ends = (head + instructions, tail)  # `"instructions":…,` with previous ids
        self.index = index
        self.turn = 0  # user turns sent so far
        self._messages = messages
        self.draws = draws
        self.header = header  # this conversation's session header line(s), CRLF-ended
        # the server's count of the previous turn's prompt (usage.prompt_tokens): the
        # tokens this turn's prompt begins with by construction; None before turn 2 or
        # when the server did not say
        self.history_tokens: int | None = None
        # the last answer's response id (`conversation.previous_response_id`), else None
        self.response_id: str | None = None

    @property
    def output_cap(self) -> int | None:
        """Each turn's output cap as its body sends it (`max_tokens`)."""
        return self._bodies.output_cap

    @property
    def over(self) -> bool:
        """Every drawn turn has been sent."""
        return self.turn >= self.draws.turns

    def next_body(self) -> tuple[bytes, ...]:
        """The body of the next turn (its new user message joins the history), as pieces
        to send one after another; with `previous_response_id`, a later turn's is its new
        message after the last answer's id (the server holds the history)."""
        self.turn += 1
        b = self._bodies
        self._messages.append(orjson.dumps(b.prompts.user_message(self.index, self.turn)))
        head, tail = self._ends
        if self.response_id is not None:
            return (head, b'"previous_response_id":', orjson.dumps(self.response_id),
                    b"," + b._key, self._messages[-1], b"]", tail)
        return (head, b._key, b",".join(self._messages), b"]", tail)

    def extra(self) -> dict[str, int | None]:
        """What the current turn's record carries in `extra` (`model_index` with a mix's
        models)."""
        out = {"conversation": self.index, "turn": self.turn, "turns": self.draws.turns,
               "history_tokens": self.history_tokens}
        if self.model is not None:
            out["model_index"] = self.model
        return out

    def answered(self, content: str, prompt_tokens: int | None,
                 response_id: str | None = None) -> None:
        """The server's answer to the last turn (its `content`; reasoning is not history),
        its count of that turn's prompt and (Responses API) the answer's id."""
        self._messages.append(orjson.dumps({"role": "assistant", "content": content}))
        self.history_tokens = prompt_tokens
        if self._bodies.by_id:
            self.response_id = response_id

    def end(self) -> None:
        """Over now: its later turns are never sent (a turn failed, or was stopped)."""
        self.turn = self.draws.turns

    def think_s(self) -> float:
        """The think time before the next turn (0 when the conversation is over)."""
        return 0.0 if self.over else self.draws.think_s[self.turn - 1]


class TraceBodies(RequestBodies):
    """Request bodies of a trace replay (`load/replay.py`): request k's blocks
    (`prep/traceprompts.py`) and exactly its `output_tokens` out (`size`, the budget's, is
    the trace's own `input_tokens`); a request of a session sends its session header."""

    def __init__(self, sc: Scenario, model: str, reqs: list[TraceRequest],
                 prompts: TracePrompts, run_nonce: str = "") -> None:
        self._fields = {k: v for k, v in body_fields(sc, model).items()
                        if k not in ("max_tokens", "ignore_eos", "min_tokens")}
        self._reqs = reqs
        self.prompts = prompts
        self._nonce = run_nonce
        # each session's requests in order, each request's place in its session, and the
        # words of the last one built (requests are mostly built in order)
        self._sessions: dict[str, list[int]] = {}
        self._place: dict[int, int] = {}
        for k, r in enumerate(reqs):
            if r.session_id is not None and not r.hash_ids:
                turns = self._sessions.setdefault(r.session_id, [])
                self._place[k] = len(turns)
                turns.append(k)
        self._last: dict[str, tuple[int, list[str]]] = {}

    def messages(self, index: int) -> list[dict[str, str]]:
        r = self._reqs[index]
        if index not in self._place:
            return [{"role": "user", "content": self.prompts.text(
                r.input_tokens, r.hash_ids, r.line, r.prefix_id, r.prefix_tokens)}]
        assert r.session_id is not None
        turns, place = self._sessions[r.session_id], self._place[index]
        at, words = self._last.get(r.session_id, (-1, None))
        if at > place:  # built out of order: from the session's start
            at, words = -1, None
        for k in turns[at + 1:place + 1]:
            q = self._reqs[k]
            words = self.prompts.session_words(words, q.input_tokens, q.line, q.prefix_id,
                                               q.prefix_tokens)
        assert words is not None
        self._last[r.session_id] = (place, words)
        return [{"role": "user", "content": " ".join(words)}]

    def header_for(self, index: int) -> bytes:
        """The session header of a request of a trace's session (`X-Session-ID:
        {run nonce}-{session}`, the session's id when it is plain, else its CRC-32), for
        KV-aware routers as a conversation's; b"" for the others."""
        session = self._reqs[index].session_id
        if session is None:
            return b""
        name = (session if SAFE_SESSION.fullmatch(session)
                else f"h-{zlib.crc32(session.encode()):08x}")  # "h-": never a plain id
        return f"{DEFAULT_SESSION_HEADER}: {self._nonce}-{name}\r\n".encode()

    def output_cap(self, index: int) -> int | None:
        """Request `index`'s `output_tokens`, its `max_tokens`."""
        return self._reqs[index].output_tokens

    def build_parts(self, size: int, index: int, warmup: bool = False) -> tuple[bytes, ...]:
        """Request `index` of the trace (a replay has no warm-ups)."""
        out = self._reqs[index].output_tokens
        return (orjson.dumps({**self._fields, "max_tokens": out, "ignore_eos": True,
                              "min_tokens": out, "messages": self.messages(index)}),)


class DatasetBodies(RequestBodies):
    """Single-turn request bodies from a dataset (`load/dataset.py`): request k sends entry
    k mod n's first user turn (after its system prompt, if any). Its planned size
    (`planned`) is its count by the local tokenizer (`--tokenizer`) where one counted the
    entries before the load (`counted[j]`: entry j's, templated), else none: its count is
    the server's."""

    def __init__(self, sc: Scenario, model: str, entries: list[DatasetEntry],
                 counted: list[int] | None = None) -> None:
        self._fields = body_fields(sc, model)
        self._cap = output_cap(self._fields)
        self._entries = entries
        self._counted = counted or []

    def messages(self, index: int) -> list[dict[str, str]]:
        e = self._entries[index % len(self._entries)]
        messages = ([] if e.system is None else [{"role": "system", "content": e.system}])
        messages.append({"role": "user", "content": e.turns[0]})
        return messages

    @property
    def counted(self) -> list[int] | None:
        """The entries' counts by the local tokenizer (None: not counted)."""
        return list(self._counted) if self._counted else None

    def planned(self, index: int, size: int) -> int | None:
        """Entry k mod n's count by the local tokenizer, else None (`size` is not used)."""
        j = index % len(self._entries)
        return self._counted[j] if j < len(self._counted) else None

    def output_cap(self, index: int) -> int | None:
        return self._cap

    def build_parts(self, size: int, index: int, warmup: bool = False) -> tuple[bytes, ...]:
        return (orjson.dumps({**self._fields, "messages": self.messages(index)}),)
