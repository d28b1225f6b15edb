"""urls: the endpoint parsed once, credentials never shown, the key's variables in order.

Why: the base URL is stored in every benchmark; a password left in it would be published
with the results, and a `/v1` added twice would send every request to a 404.
"""

from __future__ import annotations

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.urls import Endpoint, api_key_from_env, parse_replicas, strip_credentials


@pytest.mark.parametrize(("url", "base", "root"), [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("http://h:9/v1/", "http://h:9/v1", "http://h:9"),
    ("https://h/api", "https://h:443/api/v1", "https://h:443/api"),
    ("http://h", "http://h:80/v1", "http://h:80"),
    ("http://[::1]:8000", "http://[::1]:8000/v1", "http://[::1]:8000"),
])
def test_parse_base_and_root(url: str, base: str, root: str) -> None:
    ep = Endpoint.parse(url)
    assert (ep.base_url, ep.root_url) == (base, root)


def test_a_password_in_the_url_is_the_key_and_leaves_the_url() -> None:
    ep = Endpoint.parse("http://alice:s3cret@h:8000")
    assert ep.userinfo_key == "s3cret"
    assert "s3cret" not in ep.base_url and "alice" not in ep.base_url


@pytest.mark.parametrize("url", ["ftp://h", "h:8000", "http://h:99999", "http://"])
def test_an_unusable_url_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(UsageError, match="is not a usable URL; expected http"):
        Endpoint.parse(url)
    with pytest.raises(UsageError) as e:
        Endpoint.parse(url.replace("//", "//u:pw@", 1) if "//" in url else "u:pw@" + url)
    assert "pw" not in str(e.value)


@pytest.mark.parametrize(("url", "want"), [
    ("http://a:b@h/x", "http://h/x"),
    ("http://a:b@c@h:1", "http://h:1"),
    ("alice:pw@host", "host"),
    ("http:/alice:pw@host", "http:/host"),
    (" http://h/ ", "http://h/"),
])
def test_strip_credentials(url: str, want: str) -> None:
    assert strip_credentials(url) == want


def test_the_first_non_empty_key_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANVIL_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert api_key_from_env() is None
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    monkeypatch.setenv("ANVIL_API_KEY", "")
    assert api_key_from_env() == "o"
    monkeypatch.setenv("ANVIL_API_KEY", "a")
    assert api_key_from_env() == "a"


def test_replicas_are_comma_separated_urls_each_once() -> None:
    one, two = parse_replicas("http://u:secret@a:1,http://b:2/v1")
    assert (one.base_url, two.base_url) == ("http://a:1/v1", "http://b:2/v1")
    assert one.userinfo_key == "secret"
    assert parse_replicas("http://a:1") == (Endpoint.parse("http://a:1"),)
    for bad, says in (("http://a:1,", "an empty URL"), ("http://a:1,http://a:1/v1", "twice"),
                      ("http://a:1,ftp://b", "not a usable URL")):
        with pytest.raises(UsageError, match=says) as e:
            parse_replicas(bad)
        assert "secret" not in str(e.value)
