"""The simulator's tokenize endpoints, in the request and response shapes of real servers.

anvil plans prompt sizes in the server's own tokens and asks the server for them
(`anvil_metrics.prep.counting`), trying vLLM's, llama.cpp's and SGLang's endpoints in turn. Each way
has to be tested against a process whose counts are known, and each must fall through cleanly
on a server of another family, so ``--tokenize-api`` picks the family the simulator imitates.
Every answer uses the simulator's tokenizer (`tokenizer.py`): a templated count equals
``usage.prompt_tokens`` of the same messages.

``vllm`` (the default)
    ``POST /tokenize {"messages", "add_generation_prompt"?}`` -> ``{"count", "max_model_len",
    "tokens"}`` with the chat template; ``{"prompt": str}`` counts the text alone. Anything else
    is a 400 OpenAI error.
``llamacpp`` (``llama-server``)
    ``POST /apply-template {"messages", "add_generation_prompt"?}`` -> ``{"prompt": str}``, the
    rendered template; ``POST /tokenize {"content": str, "add_special"?}`` -> ``{"tokens":
    [ids]}`` with the template's special tokens parsed, so the rendered prompt gets exactly the
    chat count and ids (`tokenizer.template_token_ids`). The simulated model has no BOS token
    (as Qwen's ChatML models), so ``add_special`` adds nothing. As ``llama-server`` does, a body
    without ``content`` gets 200 ``{"tokens": []}``: a vLLM-style request finds no ``count``.
    No ``/v1/tokenize``. Errors are llama.cpp's ``{"error": {"code", "message", "type"}}``.
``sglang`` (SGLang before its ``/tokenize`` took ``messages``)
    ``POST /v1/tokenize`` or ``/tokenize`` ``{"prompt": str | [str], "add_special_tokens"?}``
    -> ``{"tokens", "count", "max_model_len"}`` for the text alone, no template (a list of
    prompts gives lists). A body without ``prompt`` gets SGLang's validation error, 400
    ``{"object": "error", "message", "type": "Bad Request", "param": null, "code": 400}``.
    No ``/apply-template``.
``none``
    No tokenize endpoint at all (404): counting needs ``max_tokens=1`` probes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import numpy as np
import orjson

from anvil_metrics.sim.chatrequest import RequestError, load_json_object
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import error_body
from anvil_metrics.sim.tokenizer import (
    TokenizeError,
    prompt_token_ids,
    render_chat,
    template_token_ids,
    text_ids,
)

Handler = Callable[[dict[str, Any], SimConfig], dict[str, Any]]


class ApiError(Exception):
    """A tokenize request refused with `status`; each API shapes the error body its own way."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class TokenizeApi:
    """One server family's tokenize endpoints: POST path -> handler, and its error shape."""

    routes: Mapping[str, Handler]
    error: Callable[[ApiError], dict[str, Any]]


# -- request fields ----------------------------------------------------------------------------


def _load(body: bytes) -> dict[str, Any]:
    try:
        return load_json_object(body)
    except RequestError as exc:
        raise ApiError(exc.status, str(exc)) from exc


def _flag(data: dict[str, Any], name: str, default: bool) -> bool:
    value = data.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be a boolean", name)
    return value


def _chat_ids(messages: list[Any], data: dict[str, Any], cfg: SimConfig) -> np.ndarray:
    generation = _flag(data, "add_generation_prompt", True)
    try:
        return prompt_token_ids(messages, cfg.tokenizer, generation)
    except TokenizeError as exc:
        raise ApiError(400, str(exc), "messages") from exc


# -- vLLM --------------------------------------------------------------------------------------


def vllm_tokenize(data: dict[str, Any], cfg: SimConfig) -> dict[str, Any]:
    """vLLM's ``/tokenize``: `messages` get the chat template, `prompt` is counted raw."""
    messages, prompt = data.get("messages"), data.get("prompt")
    if isinstance(messages, list):
        ids = _chat_ids(messages, data, cfg)
    elif isinstance(prompt, str):
        ids = text_ids(prompt, cfg.tokenizer)
    else:
        raise ApiError(400, "send either 'messages' (a list) or 'prompt' (a string)")
    return {"count": int(ids.size), "max_model_len": cfg.max_context, "tokens": ids}


def _vllm_error(exc: ApiError) -> dict[str, Any]:
    return error_body(exc.message, exc.status, param=exc.param)


# -- llama.cpp ---------------------------------------------------------------------------------


def llamacpp_apply_template(data: dict[str, Any], cfg: SimConfig) -> dict[str, Any]:
    """llama.cpp's ``/apply-template``: the chat template rendered as text."""
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise ApiError(400, "'messages' is required and must be an array")
    generation = _flag(data, "add_generation_prompt", True)
    try:
        return {"prompt": render_chat(messages, generation)}
    except TokenizeError as exc:
        raise ApiError(400, str(exc)) from exc


def llamacpp_tokenize(data: dict[str, Any], cfg: SimConfig) -> dict[str, Any]:
    """llama.cpp's ``/tokenize``: text with special tokens parsed; no `content`, no tokens."""
    if "content" not in data:
        return {"tokens": []}
    _flag(data, "add_special", False)  # checked, but the model has no BOS to add
    if _flag(data, "with_pieces", False):
        raise ApiError(400, "with_pieces is not simulated")
    content = data["content"]
    if not isinstance(content, str):
        raise ApiError(400, "content must be a string (token-id arrays are not simulated)")
    return {"tokens": template_token_ids(content, cfg.tokenizer)}


def _llamacpp_error(exc: ApiError) -> dict[str, Any]:
    kind = "invalid_request_error" if exc.status < 500 else "server_error"
    return {"error": {"code": exc.status, "message": exc.message, "type": kind}}


# -- SGLang ------------------------------------------------------------------------------------


def sglang_tokenize(data: dict[str, Any], cfg: SimConfig) -> dict[str, Any]:
    """SGLang's ``/v1/tokenize``: plain text (or a list of texts), never a chat template."""
    _flag(data, "add_special_tokens", True)  # checked, but the model has no BOS to add
    prompt, rule = data.get("prompt"), cfg.tokenizer
    if isinstance(prompt, str):
        ids = text_ids(prompt, rule)
        return {"tokens": ids, "count": int(ids.size), "max_model_len": cfg.max_context}
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        each = [text_ids(p, rule) for p in prompt]
        counts = [int(ids.size) for ids in each]
        return {"tokens": each, "count": counts, "max_model_len": cfg.max_context}
    if prompt is None:
        raise ApiError(400, "1 validation error for TokenizeRequest\nprompt\n  Field required")
    raise ApiError(400, "prompt must be a string or a list of strings", "prompt")


def _sglang_error(exc: ApiError) -> dict[str, Any]:
    return {"object": "error", "message": exc.message, "type": HTTPStatus(exc.status).phrase,
            "param": exc.param, "code": exc.status}


# -- dispatch ----------------------------------------------------------------------------------

APIS: Mapping[str, TokenizeApi] = {
    "vllm": TokenizeApi({"/tokenize": vllm_tokenize}, _vllm_error),
    "llamacpp": TokenizeApi(
        {"/apply-template": llamacpp_apply_template, "/tokenize": llamacpp_tokenize},
        _llamacpp_error,
    ),
    "sglang": TokenizeApi(
        {"/v1/tokenize": sglang_tokenize, "/tokenize": sglang_tokenize}, _sglang_error
    ),
    "none": TokenizeApi({}, _vllm_error),
}


def answer(api: TokenizeApi, path: str, body: bytes, cfg: SimConfig) -> tuple[int, bytes]:
    """Status and JSON body for ``POST path`` (a path in ``api.routes``)."""
    try:
        result = api.routes[path](_load(body), cfg)
    except ApiError as exc:
        return exc.status, orjson.dumps(api.error(exc))
    return 200, orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY)
