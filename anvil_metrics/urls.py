"""The endpoint URL, parsed once; credentials out of URLs for everything anvil shows or
stores; the API key's environment variables.

Its own module, without gevent or any HTTP library, so the benchmark builder (`base_url`),
the run set-up (`Endpoint`) and the HTTP client (`--host` messages) share one rule without
`verify` importing gevent, and every process of a run (the CLI, Locust's master and
workers) looks for a key the same way.

`Endpoint` parses the user's URL once: credentials are stripped from it (they are sent as a
header and never shown or stored), and `/v1` is appended unless the URL already ends in it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from anvil_metrics.errors import UsageError

API_KEY_ENV = ("ANVIL_API_KEY", "OPENAI_API_KEY")  # the first one set and not empty wins


def api_key_from_env() -> str | None:
    """The API key from `$ANVIL_API_KEY`, else `$OPENAI_API_KEY`; None when neither is set
    to a non-empty value."""
    return next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)


_NO_SCHEME_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/+)?[^/@\s]*@")


def strip_credentials(url: str) -> str:
    """The URL without any `user:password@` part, malformed URLs included (`alice:pw@host`,
    `http:/alice:pw@host`); an unencoded `@` inside the password is removed with it."""
    url = url.strip()
    head, sep, rest = url.partition("://")
    if not sep:
        return _NO_SCHEME_USERINFO.sub(r"\1", url, count=1)
    authority, slash, path = rest.partition("/")
    return head + sep + authority.rpartition("@")[2] + slash + path


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed endpoint. `base_url` is safe to show and store (no credentials)."""

    scheme: str
    host: str
    port: int
    api_path: str  # e.g. "/v1"
    userinfo_key: str | None = None  # a password given in the URL, used as the API key

    @property
    def base_url(self) -> str:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        netloc = f"{host}:{self.port}"
        return urlunsplit((self.scheme, netloc, self.api_path, "", ""))

    @property
    def root_url(self) -> str:
        """The server's own root (`base_url` without its `/v1`): where `/metrics`,
        `/version` and the engines' other endpoints live."""
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        try:
            parts = urlsplit(url.strip())
            port = parts.port or (443 if parts.scheme == "https" else 80)  # ValueError if bad
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"--host {strip_credentials(url)!r} is not a usable URL; expected "
                "http(s)://HOST[:PORT][/v1], e.g. http://127.0.0.1:8000")
        path = parts.path.rstrip("/")
        if not path.endswith("/v1"):
            path = path + "/v1"
        return cls(parts.scheme, parts.hostname, port, path, parts.password or None)


def parse_replicas(host: str) -> tuple[Endpoint, ...]:
    """`--host URL[,URL...]`: the replicas a run spreads its requests over, in the given
    order (one URL: the one server). Comma-separated in one value, because Locust's own
    `-H` takes one value and the plugin reads it unchanged; `anvil run` joins a repeated
    `--host` the same way. The first replica is the one discovery, hooks and the probe ask."""
    urls = [u for u in host.split(",")]
    if any(not u.strip() for u in urls):
        raise UsageError(f"--host {strip_credentials(host)!r} has an empty URL; expected "
                         "URL[,URL...], e.g. http://127.0.0.1:8000,http://127.0.0.1:8001")
    found = tuple(Endpoint.parse(u) for u in urls)
    if len({e.base_url for e in found}) < len(found):
        raise UsageError(f"--host {strip_credentials(host)!r} names a replica twice; "
                         "each replica once")
    return found
