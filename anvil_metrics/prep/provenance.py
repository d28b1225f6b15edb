"""Who the server under test is: engine, version, context limit and served model, asked of
the server itself, each with where it came from or why it is unknown.

Why: a benchmark's figures mean little without the engine and version that produced them, and
those fields were null in every real run unless a user typed them. Each engine says who it is
in its own place (``../shared/design/SERVERS.md``), so `discover` asks, in order:

1. vLLM: ``GET /version`` -> ``{"version"}``.
2. SGLang: ``GET /get_server_info`` (``/server_info`` on builds without the old name): an
   object with ``version`` (and its context limit in ``context_length`` when the operator set
   one); then ``GET /get_model_info`` (``/model_info``) -> ``{model_path, is_generation}``,
   which also identifies SGLang when the server info is missing.
3. llama.cpp: ``GET /props`` -> ``build_info`` (the version) and
   ``default_generation_settings.n_ctx`` (the context of one slot: the real per-request limit).

and ``GET /v1/models`` for every engine: the served model (the entry whose ``id`` is the
run's model, else the first) and its ``max_model_len`` (vLLM and SGLang report it there).
The first source of a value wins: llama.cpp's ``n_ctx`` and SGLang's ``context_length`` (null
unless the operator set it, and then equal to what ``/v1/models`` says) come before
``/v1/models``, whose llama.cpp entries carry no serving limit.

Rules: nothing here raises for anything the server does. Each probe is bounded by
`timeout_s` per socket wait and by a total time check between body reads (a server that
trickles its status line and headers a byte at a time is bounded per wait only), and the whole
discovery by `BUDGET_PROBES` x `timeout_s`; once the server fails to answer at the transport level
(refused, reset, timeout, not HTTP), no further probe is sent. What failed becomes a one-line
``null_reasons`` entry per field (what was tried and what came back). Responses are read as
JSON only (at most `MAX_BODY_BYTES`), never anything else; ``sources`` and ``null_reasons``
name endpoint paths only, never the host, a header or a response body, so no credential
(an API key sent as a header, ``user:pw@`` in the URL, SGLang's echoed ``api_key``) can leak.
Redirects are not followed (they would carry the Authorization header to another host) and
proxies from the environment are not used: the benchmark talks to the endpoint directly.

Blocking stdlib ``urllib.request``: under Locust, gevent has patched the socket module, so a
probe yields to the other greenlets while it waits.
"""

from __future__ import annotations

import dataclasses
import http.client
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from anvil_metrics.errors import UsageError
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.plainhttp import OPENER, BodyError, read_body

DEFAULT_TIMEOUT_S = 2.0
BUDGET_PROBES = 4  # the whole discovery takes at most this many timeouts
FIELDS = ("engine", "version", "max_model_len", "served_model")
ENGINES = ("vllm", "sglang", "llamacpp")
GIVEN = "given"  # the source of a value the user gave (flag or scenario [meta])


@dataclass(frozen=True, slots=True)
class Discovery:
    """What the server said about itself. `sources` maps each known field to the endpoint
    that gave it (``"GET /version"``) or ``"given"``; `null_reasons` each unknown one to why.
    Treat both dicts as read-only."""

    engine: str | None = None  # "vllm" | "sglang" | "llamacpp" | None
    version: str | None = None
    max_model_len: int | None = None
    served_model: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    null_reasons: dict[str, str] = field(default_factory=dict)
    # why nothing at `base_url` answered as an HTTP server (refused, reset, no answer in
    # time, not HTTP): the first probe's reason; None once any probe got an HTTP answer
    unreachable: str | None = None


class _ProbeError(Exception):
    """One probe failed; `fatal` when the server did not answer as an HTTP server at all;
    `status` the HTTP status of an error answer."""

    def __init__(self, message: str, fatal: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.fatal = fatal
        self.status = status


class _Prober:
    """GETs JSON from one server within a time budget; stops after a transport failure."""

    def __init__(self, root: str, headers: Mapping[str, str], timeout_s: float) -> None:
        self.root = root  # scheme://host:port[/prefix], no credentials
        self.headers = {"Accept": "application/json", "User-Agent": "anvil", **headers}
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + BUDGET_PROBES * timeout_s
        self.dead: str | None = None  # why no further probe is sent
        self.fatal: str | None = None  # the reason of the probe that made it dead
        self.answered = False  # some probe got an HTTP answer (an error status counts)

    def get(self, path: str) -> Any:
        """The JSON value at `path`; `_ProbeError` with a one-line reason otherwise."""
        if self.dead is not None:
            raise _ProbeError(f"not tried ({self.dead})")
        left = self.deadline - time.monotonic()
        if left <= 0:
            budget = BUDGET_PROBES * self.timeout_s
            raise _ProbeError(f"not tried (discovery used its {budget:g} s)")
        wait = min(self.timeout_s, left)
        try:
            body = self._read(path, wait)
        except _ProbeError as exc:
            if exc.fatal:
                self.dead = f"the server did not answer GET {path}"
                self.fatal = str(exc)
            else:
                self.answered = True
            raise
        self.answered = True
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise _ProbeError(f"GET {path}: not JSON ({len(body)} bytes)") from None

    def _read(self, path: str, wait_s: float) -> bytes:
        request = urllib.request.Request(self.root + path, headers=self.headers, method="GET")
        try:
            with OPENER.open(request, timeout=wait_s) as response:
                return read_body(response, f"GET {path}", wait_s)
        except BodyError as exc:
            raise _ProbeError(str(exc), fatal=exc.fatal) from None
        except urllib.error.HTTPError as exc:
            raise _ProbeError(f"GET {path}: HTTP {exc.code}", status=exc.code) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise _ProbeError(f"GET {path}: no answer within {wait_s:g} s",
                                  fatal=True) from None
            raise _ProbeError(f"GET {path}: {_short(exc.reason)}", fatal=True) from None
        except TimeoutError:
            raise _ProbeError(f"GET {path}: no answer within {wait_s:g} s", fatal=True) from None
        except (http.client.HTTPException, OSError) as exc:
            raise _ProbeError(f"GET {path}: {_short(exc)}", fatal=True) from None
        except _ProbeError:
            raise
        except Exception as exc:  # e.g. a header value urllib refuses: its text may hold a key
            raise _ProbeError(f"GET {path}: {type(exc).__name__}", fatal=True) from None


def _short(reason: object) -> str:
    """An exception or reason as one short line, its type first."""
    text = " ".join(str(reason).split())[:160]
    kind = type(reason).__name__ if isinstance(reason, BaseException) else ""
    return f"{kind}: {text}" if kind and text else kind or text or "failed"


def _text(value: Any) -> str | None:
    """A non-empty string of at most 200 characters, else None."""
    if isinstance(value, str) and value.strip():
        return value.strip()[:200]
    return None


def _positive_int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


@dataclass(slots=True)
class _Found:
    """Values as they are found, with their sources and the reasons for what is missing."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    tried: dict[str, list[str]] = field(default_factory=dict)  # field -> what failed

    def set(self, name: str, value: Any, source: str) -> None:
        if value is not None and name not in self.values:
            self.values[name] = value
            self.sources[name] = source

    def miss(self, name: str, reason: str) -> None:
        self.tried.setdefault(name, []).append(reason)

    def result(self) -> Discovery:
        reasons = {name: "; ".join(dict.fromkeys(self.tried.get(name) or ["not reported"]))
                   for name in FIELDS if name not in self.values}
        return Discovery(**{n: self.values.get(n) for n in FIELDS},
                         sources=dict(self.sources), null_reasons=reasons)


def _first_answer(probe: _Prober, paths: tuple[str, ...], found: _Found, name: str
                  ) -> tuple[str, Any] | None:
    """GET the first of `paths` that answers a JSON object (a later one only after a 404)."""
    for path in paths:
        try:
            value = probe.get(path)
        except _ProbeError as exc:
            found.miss(name, str(exc))
            if exc.status != 404:
                return None
            continue
        if isinstance(value, dict):
            return path, value
        found.miss(name, f"GET {path}: not a JSON object")
        return None
    return None


def _vllm(probe: _Prober, found: _Found) -> bool:
    answer = _first_answer(probe, ("/version",), found, "engine")
    version = _text(answer[1].get("version")) if answer else None
    if answer is None or version is None:
        if answer is not None:
            found.miss("engine", "GET /version: no version string")
        return False
    found.set("engine", "vllm", "GET /version")
    found.set("version", version, "GET /version")
    return True


def _sglang(probe: _Prober, found: _Found) -> bool:
    info = _first_answer(probe, ("/get_server_info", "/server_info"), found, "engine")
    if info is not None:
        path, body = info
        version = _text(body.get("version"))
        if version is not None and ("model_path" in body or "internal_states" in body):
            found.set("engine", "sglang", f"GET {path}")
            found.set("version", version, f"GET {path}")
            limit = _positive_int(body.get("context_length"))
            if limit is None:
                found.miss("max_model_len", f"GET {path}: context_length not set")
            found.set("max_model_len", limit, f"GET {path}")
            return True
        found.miss("engine", f"GET {path}: not SGLang's server info")
    if probe.dead is not None:
        return False
    model = _first_answer(probe, ("/get_model_info", "/model_info"), found, "engine")
    if model is not None and "model_path" in model[1] and "is_generation" in model[1]:
        found.set("engine", "sglang", f"GET {model[0]}")
        found.miss("version", f"no SGLang server info (see engine); GET {model[0]} has none")
        return True
    return False


def _llamacpp(probe: _Prober, found: _Found) -> bool:
    answer = _first_answer(probe, ("/props",), found, "engine")
    if answer is None:
        return False
    props = answer[1]
    settings = props.get("default_generation_settings")
    if "build_info" not in props and not isinstance(settings, dict):
        found.miss("engine", "GET /props: not llama.cpp's props")
        return False
    found.set("engine", "llamacpp", "GET /props")
    version = _text(props.get("build_info"))
    if version is None:
        found.miss("version", "GET /props: no build_info")
    found.set("version", version, "GET /props")
    n_ctx = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if n_ctx is None:
        found.miss("max_model_len", "GET /props: no default_generation_settings.n_ctx")
    found.set("max_model_len", n_ctx, "GET /props")
    return True


def _models(probe: _Prober, api_path: str, model: str | None, found: _Found) -> None:
    path = api_path + "/models"
    try:
        body = probe.get(path)
    except _ProbeError as exc:
        found.miss("served_model", str(exc))
        found.miss("max_model_len", str(exc))
        return
    data = body.get("data") if isinstance(body, dict) else None
    cards = [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []
    if not cards:
        found.miss("served_model", f"GET {path}: no models listed")
        found.miss("max_model_len", f"GET {path}: no models listed")
        return
    card = next((c for c in cards if model is not None and c.get("id") == model), cards[0])
    found.set("served_model", _text(card.get("id")), f"GET {path}")
    limit = _positive_int(card.get("max_model_len"))
    if limit is None:
        found.miss("max_model_len", f"GET {path}: no max_model_len")
    found.set("max_model_len", limit, f"GET {path}")


def discover(base_url: str, *, headers: Mapping[str, str] | None = None,
             timeout_s: float = DEFAULT_TIMEOUT_S, model: str | None = None) -> Discovery:
    """Ask the server at `base_url` (``http(s)://HOST:PORT[/prefix][/v1]``) who it is.

    `headers` go with every probe (e.g. ``Authorization``; credentials in the URL itself are
    dropped, pass them here); `model` picks the ``/v1/models`` entry. Never raises for the
    server's doing; a URL that cannot be parsed gives an all-null `Discovery` with reasons.
    """
    try:
        endpoint = Endpoint.parse(base_url)
    except UsageError as exc:
        return Discovery(null_reasons={name: str(exc) for name in FIELDS})
    host = endpoint.host if ":" not in endpoint.host else f"[{endpoint.host}]"
    prefix = endpoint.api_path.removesuffix("/v1")
    probe = _Prober(f"{endpoint.scheme}://{host}:{endpoint.port}{prefix}", dict(headers or {}),
                    max(timeout_s, 0.001))
    found = _Found()
    for step in (_vllm, _sglang, _llamacpp):
        if probe.dead is not None or step(probe, found):
            break
    if "engine" not in found.values:
        if probe.dead is None:
            found.miss("engine", "not vLLM, SGLang or llama.cpp")
        found.miss("version", "no engine identified (see engine)")
    _models(probe, "/v1", model, found)
    unreachable = None if probe.answered else probe.fatal
    return dataclasses.replace(found.result(), unreachable=unreachable)


def merge(discovered: Discovery, given: Mapping[str, Any]) -> Discovery:
    """`discovered`, with every non-None value of `given` (flags, the scenario's ``[meta]``)
    in its place, sourced ``"given"``. Keys must be `FIELDS`."""
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown provenance fields {unknown}; allowed: {list(FIELDS)}")
    chosen = {k: v for k, v in given.items() if v is not None}
    sources = {**discovered.sources, **dict.fromkeys(chosen, GIVEN)}
    reasons = {k: v for k, v in discovered.null_reasons.items() if k not in chosen}
    return dataclasses.replace(discovered, **chosen, sources=sources, null_reasons=reasons)
