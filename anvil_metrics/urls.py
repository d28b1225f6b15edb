"""Credentials out of URLs, for everything anvil shows or stores.

Its own module, with no dependencies, so the benchmark builder (`base_url`) and the HTTP
client (`--host` messages) share one rule without `verify` importing gevent.
"""

from __future__ import annotations

import re

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
