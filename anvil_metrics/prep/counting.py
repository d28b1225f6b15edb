"""How the server under test counts a chat prompt's tokens, cheapest way first.

Prompt sizes are planned in the *server's* tokens, chat template included, so the count
must come from the server (or from its own tokenizer file). Servers expose it differently
(see ../shared/design/SERVERS.md); `server_counter` tries, in order:

1. vLLM: `POST /tokenize {"model", "messages", ...}` applies the chat template and returns
   `{"count", "tokens", "max_model_len"}`. No prefill.
2. llama.cpp `llama-server`: `POST /apply-template {"messages"}` returns the templated
   `{"prompt"}`; `POST /tokenize {"content", "add_special": true}` returns `{"tokens"}`
   (special tokens in the text are parsed, as the server does for a chat request).
3. SGLang (and servers with only a text tokenizer): `POST /v1/tokenize` or `/tokenize`
   `{"model", "prompt", "add_special_tokens": false}` returns `{"count"}` for plain text;
   the chat template's own tokens are measured once per message layout with one
   `max_tokens=1` probe (`usage.prompt_tokens` minus the contents' counts) and added.
4. A local `tokenizer.json` (`--tokenizer PATH`, the `tokenizers` package, optional extra
   `anvil-metrics[tokenizer]`): contents counted locally, template tokens from one probe as in 3.
5. Otherwise `max_tokens=1` chat requests, reading `usage.prompt_tokens`: exact, but each
   costs a prefill of the whole prompt.

Each counter is a plain function `messages -> tokens`; `Counter.method` is what the run
records as `prompt_calibration.method` ("tokenize", "local_tokenizer" or "probe") and
`Counter.source` says which of the above answered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anvil_metrics.errors import AnvilError, UsageError
from anvil_metrics.wire.client import ChatClient

CountTokens = Callable[[list[dict]], int]
CountText = Callable[[str], int]

_PROBE_DROP = ("stream", "stream_options", "ignore_eos", "min_tokens")
_HELLO = [{"role": "user", "content": "hello"}]


@dataclass(frozen=True, slots=True)
class Counter:
    """A way to count a chat prompt as the server will."""

    count: CountTokens
    method: str  # "tokenize" | "local_tokenizer" | "probe"
    source: str  # human-readable: which endpoint(s) answer
    max_model_len: int | None = None  # the server's context limit, where it says (vLLM)
    opening_tokens: int | None = None  # the template's tokens before a message's text,
    # where the server shows its tokens (vLLM); an agent replay puts them in its first block


def _root(client: ChatClient) -> str:
    return client.endpoint.api_path.removesuffix("/v1")


def probe_counter(client: ChatClient, fields: dict[str, Any]) -> CountTokens:
    """A function that sends a `max_tokens=1` request and returns `usage.prompt_tokens`.

    The probe carries the run's own body fields (thinking switch, extra body) but not its
    streaming or output-length ones, so the server applies the same chat template."""
    base = {k: v for k, v in fields.items() if k not in _PROBE_DROP}

    def count(messages: list[dict]) -> int:
        status, body = client.post_json(
            "/chat/completions", {**base, "messages": messages, "max_tokens": 1, "stream": False})
        if status != 200 or not isinstance(body, dict):
            raise AnvilError(f"calibration probe got HTTP {status}: {str(body)[:200]}")
        usage = body.get("usage") or {}
        n = usage.get("prompt_tokens")
        if not isinstance(n, int):
            raise AnvilError("calibration probe: the server's response has no usage.prompt_tokens")
        return n

    return count


def _works(count: Callable[[Any], Any], arg: Any) -> bool:
    try:
        count(arg)
    except Exception:  # no endpoint, or not this shape: try the next way
        return False
    return True


def vllm_counter(client: ChatClient, fields: dict[str, Any]
                 ) -> tuple[CountTokens, int | None, int | None] | None:
    """vLLM-style `POST /tokenize` with `messages` (chat template applied), the
    `max_model_len` it reports (None if absent or not a positive integer) and the template's
    opening tokens (where two one-word messages' token lists first differ; None without
    tokens)."""
    root = _root(client)
    base = {k: fields[k] for k in ("model", "chat_template_kwargs") if k in fields}
    seen: dict[str, Any] = {}

    def count(messages: list[dict]) -> int:
        status, body = client.post_json(root + "/tokenize", {**base, "messages": messages},
                                        absolute=True)
        n = body.get("count") if isinstance(body, dict) else None
        if status != 200 or not isinstance(n, int):
            raise AnvilError(f"/tokenize answered HTTP {status}: {str(body)[:200]}")
        seen["max_model_len"], seen["tokens"] = body.get("max_model_len"), body.get("tokens")
        return n

    if not _works(count, _HELLO):
        return None
    limit = seen.get("max_model_len")
    ok = isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
    return count, limit if ok else None, _opening(count, seen)


def _opening(count: CountTokens, seen: dict[str, Any]) -> int | None:
    """The template's tokens before a message's text: where the token lists of two
    one-word messages ("an", "by") first differ; None if the server lists no tokens."""
    lists = []
    for word in ("an", "by"):
        if not _works(count, [{"role": "user", "content": word}]):
            return None
        lists.append(seen.get("tokens"))
    a, b = lists
    if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


def llamacpp_counter(client: ChatClient, fields: dict[str, Any]) -> CountTokens | None:
    """llama.cpp: the server renders its template (`/apply-template`), then tokenizes the
    rendered text with special tokens added and parsed (`/tokenize`)."""
    root = _root(client)
    base = {k: fields[k] for k in ("chat_template_kwargs",) if k in fields}

    def count(messages: list[dict]) -> int:
        status, body = client.post_json(root + "/apply-template",
                                        {**base, "messages": messages}, absolute=True)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if status != 200 or not isinstance(prompt, str):
            raise AnvilError(f"/apply-template answered HTTP {status}: {str(body)[:200]}")
        status, body = client.post_json(root + "/tokenize",
                                        {"content": prompt, "add_special": True}, absolute=True)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if status != 200 or not isinstance(tokens, list):
            raise AnvilError(f"/tokenize answered HTTP {status}: {str(body)[:200]}")
        return len(tokens)

    return count if _works(count, _HELLO) else None


def text_tokenize_counter(client: ChatClient, fields: dict[str, Any]
                          ) -> tuple[CountText, str] | None:
    """SGLang-style `POST /v1/tokenize` (or `/tokenize`) of plain text, no template; and
    the path that answered. A server that answers this shape with no tokens (llama.cpp
    does, for a body without `content`) does not count."""
    root = _root(client)
    for path in (root + "/v1/tokenize", root + "/tokenize"):
        def count(text: str, path: str = path) -> int:
            status, body = client.post_json(
                path, {"model": fields.get("model"), "prompt": text,
                       "add_special_tokens": False}, absolute=True)
            n = body.get("count") if isinstance(body, dict) else None
            if n is None and isinstance(body, dict) and isinstance(body.get("tokens"), list):
                n = len(body["tokens"])
            if status != 200 or not isinstance(n, int):
                raise AnvilError(f"{path} answered HTTP {status}: {str(body)[:200]}")
            return n

        try:
            if count("hello") > 0:
                return count, path.removeprefix(root)
        except Exception:  # no endpoint, or not this shape: try the next way
            pass
    return None


def local_text_counter(tokenizer_path: str) -> CountText:
    """Counts plain text with a local `tokenizer.json` (the server model's own file)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageError(
            "--tokenizer needs the 'tokenizers' package: pip install 'anvil-metrics[tokenizer]'"
        ) from None
    try:
        tok = Tokenizer.from_file(tokenizer_path)
    except Exception as e:  # missing file, not a tokenizer.json: the user's input
        raise UsageError(f"--tokenizer {tokenizer_path!r}: cannot load it as a tokenizer.json "
                         f"({e}); pass the model's tokenizer.json") from None

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def _message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def templated_counter(count_text: CountText, probe: CountTokens) -> CountTokens:
    """Contents counted by `count_text`, plus the chat template's own tokens for this
    message layout (roles in order), measured once by one probe and remembered."""
    overhead: dict[tuple[str, ...], int] = {}

    def count(messages: list[dict]) -> int:
        layout = tuple(str(m.get("role")) for m in messages)
        if layout not in overhead:
            small = [{**m, "content": "hello"} if m.get("role") != "system" else m
                     for m in messages]
            overhead[layout] = probe(small) - sum(count_text(_message_text(m)) for m in small)
        return overhead[layout] + sum(count_text(_message_text(m)) for m in messages)

    return count


def _check_local_tokenizer(count: CountTokens, probe: CountTokens, path: str) -> None:
    """One probe of ~1,000 words: a tokenizer.json that is not the served model's counts
    visibly differently (1 % is far beyond what the template adds), and would size every
    prompt wrong."""
    words = ("The quick brown fox jumps over the lazy dog while a careful engineer measures "
             "every prompt twice, 42 times, before the benchmark runs. ") * 50
    msgs = [{"role": "user", "content": words}]
    local, server = count(msgs), probe(msgs)
    if abs(local - server) > max(2, server // 100):
        raise UsageError(
            f"--tokenizer {path!r} does not match the server: it counts {local} tokens where "
            f"the server counts {server} for the same prompt; pass the served model's "
            "tokenizer.json, or leave --tokenizer out to count with the server")


def text_counter(client: ChatClient, fields: dict[str, Any], endpoint: str = "completions",
                 tokenizer_path: str | None = None) -> Counter:
    """How the server counts a text prompt posted to `/v1/{endpoint}` ("completions" or
    "embeddings"): the last message's text, raw, with the special tokens the endpoint adds.
    With `tokenizer_path` (`--tokenizer`): the local count plus those special tokens,
    measured by one probe, and checked against the server as a chat prompt's is. Else
    vLLM's `/tokenize {"prompt"}` (which adds them too), when it agrees with one probe of
    the endpoint (a `max_tokens=1` completion; an embedding, which generates nothing);
    else such probes."""
    model = fields.get("model")
    seen: dict[str, Any] = {}
    key, more = ("prompt", {"max_tokens": 1}) if endpoint == "completions" else ("input", {})

    def probe(messages: list[dict]) -> int:
        status, body = client.post_json(f"/{endpoint}", {
            "model": model, key: messages[-1]["content"], **more})
        usage = body.get("usage") if isinstance(body, dict) else None
        n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if status != 200 or not isinstance(n, int):
            raise AnvilError(f"/v1/{endpoint} answered HTTP {status}: {str(body)[:200]}")
        return n

    def tokenize(messages: list[dict]) -> int:
        status, body = client.post_json(_root(client) + "/tokenize", {
            "model": model, "prompt": messages[-1]["content"]}, absolute=True)
        n = body.get("count") if isinstance(body, dict) else None
        if status != 200 or not isinstance(n, int):
            raise AnvilError(f"/tokenize answered HTTP {status}: {str(body)[:200]}")
        seen["max_model_len"] = body.get("max_model_len")
        return n

    if tokenizer_path:
        count_text = local_text_counter(tokenizer_path)
        added = probe(_HELLO) - count_text(_HELLO[-1]["content"])  # BOS and the like

        def local(messages: list[dict]) -> int:
            return added + count_text(messages[-1]["content"])

        _check_local_tokenizer(local, probe, tokenizer_path)
        return Counter(local, "local_tokenizer", f"{tokenizer_path} + one /v1/{endpoint} "
                       "probe for the special tokens")
    if _works(tokenize, _HELLO) and tokenize(_HELLO) == probe(_HELLO):
        limit = seen.get("max_model_len")
        ok = isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
        return Counter(tokenize, "tokenize", "/tokenize of the prompt (vLLM), as "
                       f"/v1/{endpoint} counts it", limit if ok else None)
    what = "max_tokens=1 /v1/completions" if endpoint == "completions" else "/v1/embeddings"
    return Counter(probe, "probe", f"{what} probes (usage.prompt_tokens)")


def token_ids_of(client: ChatClient, model: str | None) -> Callable[[str], list[int]]:
    """A function from a text to the server's token ids of it, without special tokens (as
    token-id prompts are sent, `--prompt-ids`): vLLM's `/tokenize {"prompt",
    "add_special_tokens": false}`, else llama.cpp's `/tokenize {"content"}`. Raises
    AnvilError when the server has neither."""
    path = _root(client) + "/tokenize"

    def asking(shape: Callable[[str], dict[str, Any]]) -> Callable[[str], list[int]]:
        def ids_of(text: str) -> list[int]:
            status, body = client.post_json(path, shape(text), absolute=True)
            ids = body.get("tokens") if isinstance(body, dict) and status == 200 else None
            if not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids):
                raise AnvilError(f"/tokenize answered HTTP {status}: {str(body)[:200]}")
            return ids
        return ids_of

    for way in (asking(lambda text: {"model": model, "prompt": text,  # vLLM's
                                     "add_special_tokens": False}),
                asking(lambda text: {"content": text})):  # llama.cpp's
        if _works(way, "hello world"):
            return way
    raise AnvilError("--prompt-ids needs the server's token ids, and it has no /tokenize "
                     "that gives them (vLLM's, llama.cpp's or anvil sim's do); send text "
                     "prompts instead")


def server_counter(client: ChatClient, fields: dict[str, Any],
                   tokenizer_path: str | None = None) -> Counter:
    """The cheapest exact way to count this server's chat prompts (see the module doc)."""
    probe = probe_counter(client, fields)
    if tokenizer_path:
        count = templated_counter(local_text_counter(tokenizer_path), probe)
        _check_local_tokenizer(count, probe, tokenizer_path)
        return Counter(count, "local_tokenizer", f"{tokenizer_path} + one probe for the template")
    vllm = vllm_counter(client, fields)
    if vllm is not None:
        return Counter(vllm[0], "tokenize", "/tokenize with messages (vLLM)", *vllm[1:])
    count = llamacpp_counter(client, fields)
    if count is not None:
        return Counter(count, "tokenize", "/apply-template + /tokenize (llama.cpp)")
    found = text_tokenize_counter(client, fields)
    if found is not None:
        text, path = found
        return Counter(templated_counter(text, probe), "tokenize",
                       f"{path} of text (SGLang) + one probe for the template")
    return Counter(probe, "probe", "max_tokens=1 probes (usage.prompt_tokens)")
