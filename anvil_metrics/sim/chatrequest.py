"""A chat completion request checked, and what the simulated model will answer to it.

Why apart from `chat.py`: this is the answer's content, decided from the body and the config
alone (prompt tokens, the token cap, the context check, how many reasoning and content tokens,
why the answer stops, the usage it reports), with no clock, connection or encoding; `chat.py`
times and writes it. The refusals are vLLM's: the status, message and OpenAI error fields a
client sees from the real server (`RequestError`), shared by every endpoint that reads JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import error_body
from anvil_metrics.sim.media import MediaCount, MediaError, split_media
from anvil_metrics.sim.tokenizer import TokenizeError, count_chat_tokens


class RequestError(Exception):
    """A request the simulator refuses, with the HTTP status and OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        err_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(message, status, err_type, param, code)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """The fields of a chat completion request that shape the answer."""

    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool
    min_tokens: int
    thinking: bool
    cached_tokens: int | None = None  # None: no prefix cache (--prefix-cache off)
    media: MediaCount | None = None  # its images and clips (--media), in prompt_tokens

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens the prefill has to compute: those the prefix cache does not hold."""
        return self.prompt_tokens - (self.cached_tokens or 0)


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """How many reasoning then content tokens are generated, and the finish_reason."""

    reasoning: int
    content: int
    finish_reason: str

    @property
    def total(self) -> int:
        return self.reasoning + self.content


def load_json_object(body: bytes) -> dict[str, Any]:
    """Parse a request body that must be a JSON object (400 otherwise)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(400, f"malformed JSON body: {exc}") from exc
    if not isinstance(data, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return data


def _opt_int(data: dict[str, Any], name: str, minimum: int) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RequestError(400, f"{name} must be an integer >= {minimum}", param=name)
    return value


def _opt_bool(data: dict[str, Any], name: str, default: bool) -> bool:
    value = data.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(400, f"{name} must be a boolean", param=name)
    return value


def _opt_object(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(400, f"{name} must be an object", param=name)
    return value


def count_prompt(data: dict[str, Any], cfg: SimConfig) -> int:
    """Prompt tokens of the request's `messages` under the configured tokenizer (400 if bad)."""
    return count_prompt_media(data, cfg)[0]


def count_prompt_media(data: dict[str, Any], cfg: SimConfig) -> tuple[int, MediaCount | None]:
    """Prompt tokens of the request's `messages` under the configured tokenizer, its media's
    included (`sim/media.py`, with --media), and the media (400 if bad)."""
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list", param="messages")
    media = None
    try:
        if cfg.media:
            messages, media = split_media(messages)
        text = count_chat_tokens(messages, cfg.tokenizer)
    except (TokenizeError, MediaError) as exc:
        raise RequestError(400, str(exc), param="messages") from exc
    return text + (0 if media is None else media.image_tokens + media.audio_tokens), media


def check_model(data: dict[str, Any], cfg: SimConfig) -> None:
    """A request naming another model (not `--model`, not an `--alias`) gets vLLM's 404."""
    model = data.get("model")
    if model is not None and model != cfg.model and model not in cfg.aliases:
        raise RequestError(
            404, f"The model `{model}` does not exist.", param="model", code="model_not_found"
        )


def parse_chat_request(data: dict[str, Any], cfg: SimConfig) -> ChatRequest:
    """Validate a chat completion body and count its prompt; raises `RequestError`."""
    check_model(data, cfg)
    prompt_tokens, media = count_prompt_media(data, cfg)
    max_tokens = _opt_int(data, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _opt_int(data, "max_tokens", 1)
    min_tokens = _opt_int(data, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise RequestError(400, "min_tokens must be <= max_tokens", param="min_tokens")
    stream_options = _opt_object(data, "stream_options")
    template_kwargs = _opt_object(data, "chat_template_kwargs")
    request = ChatRequest(
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=_opt_bool(data, "stream", False),
        include_usage=_opt_bool(stream_options, "include_usage", False),
        ignore_eos=_opt_bool(data, "ignore_eos", False),
        min_tokens=min_tokens,
        thinking=_opt_bool(template_kwargs, "enable_thinking", True),
        media=media,
    )
    check_context(request, cfg)
    return request


def check_context(request: ChatRequest, cfg: SimConfig) -> None:
    """vLLM's 400 when prompt + requested completion exceed the context window.

    Without ``max_tokens`` the completion may use whatever the prompt leaves, so only a
    prompt that leaves no room at all is refused.
    """
    prompt, limit = request.prompt_tokens, cfg.max_context
    if request.max_tokens is not None and prompt + request.max_tokens > limit:
        message = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt + request.max_tokens} tokens ({prompt} in the messages, "
            f"{request.max_tokens} in the completion). Please reduce the length of the "
            "messages or completion."
        )
    elif request.max_tokens is None and prompt >= limit:
        message = (
            f"This model's maximum context length is {limit} tokens. However, your request "
            f"has {prompt} input tokens. Please reduce the length of the input messages."
        )
    else:
        return
    raise RequestError(400, message, param="messages", code="context_length_exceeded")


def plan_output(request: ChatRequest, cfg: SimConfig) -> OutputPlan:
    """Reasoning then content tokens, capped by max_tokens (or the context left).

    ``ignore_eos`` generates until the cap (the fixed-output-length path); ``min_tokens``
    lengthens a shorter natural answer with content; thinking off means no reasoning.
    """
    cap = request.max_tokens
    if cap is None:
        cap = cfg.max_context - request.prompt_tokens
    natural_reasoning = cfg.reasoning_tokens if request.thinking else 0
    wanted = max(natural_reasoning + cfg.content_tokens, request.min_tokens)
    total = cap if request.ignore_eos else min(wanted, cap)
    reasoning = min(natural_reasoning, total)
    finish = "length" if request.ignore_eos or wanted > cap else "stop"
    return OutputPlan(reasoning, total - reasoning, finish)


def usage_of(request: ChatRequest, plan: OutputPlan) -> dict[str, Any]:
    """vLLM-style usage, with reasoning tokens counted inside completion_tokens.

    With the prefix cache on, ``prompt_tokens_details.cached_tokens`` too (0 on a miss).
    """
    usage: dict[str, Any] = {
        "prompt_tokens": request.prompt_tokens,
        "total_tokens": request.prompt_tokens + plan.total,
        "completion_tokens": plan.total,
        "completion_tokens_details": {"reasoning_tokens": plan.reasoning},
    }
    if request.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": request.cached_tokens}
    if request.media is not None:  # OpenAI's names for them
        usage["prompt_tokens_details"] = {**usage.get("prompt_tokens_details", {}),
                                          "image_tokens": request.media.image_tokens,
                                          "audio_tokens": request.media.audio_tokens}
    return usage
