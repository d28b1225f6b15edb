"""Credentials: out of URLs for everything anvil shows or stores, and the API key from the
environment.

Its own module, with no dependencies, so the benchmark builder (`base_url`) and the HTTP
client (`--host` messages) share one rule without `verify` importing gevent, and `anvil`,
the Locust plugin and a distributed worker read the key from the same variables.
"""

from __future__ import annotations

import os
import re

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
