"""Extra HTTP headers sent with every request: parsed once, checked, and shown redacted.

Why: gateways in front of inference servers route, meter or authorise by headers (a tenant,
a routing key, an API version). vLLM's, SGLang's and GuideLLM's benchmark tools take
`--header KEY=VALUE`; anvil does too (repeatable, over a scenario's `[headers]` table: a
flag wins over the table's header of the same name, names compared without case).

A header whose name looks like a credential (`is_credential`: a name holding "auth",
"key", "token", "secret", "passw", "cookie" or "credential") is sent as given and never
shown: the raw file, `benchmark.json`, logs and the web UI keep its name with its value
`REDACTED`, as the API key is kept out. Its value reaches Locust by the environment, never
on a command line (`ENV_VAR`).

Refused, in one line naming the header: a name that is not an HTTP token (RFC 9110 5.6.2), a
value with a control character (CR or LF would end the header line and start another), a
header anvil writes itself (`RESERVED`), and Authorization beside an API key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from anvil_metrics.errors import UsageError

REDACTED = "[redacted]"
ENV_VAR = "ANVIL_HEADERS"  # `anvil run` → its Locust process: a JSON object, name → value
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a tab is allowed inside a value
_CREDENTIAL = re.compile(r"auth|key|token|secret|passw|cookie|credential", re.IGNORECASE)
# written by anvil on every request (or by HTTP itself): a second copy would contradict it
RESERVED = frozenset({"host", "content-length", "content-type", "accept", "user-agent",
                      "transfer-encoding", "connection", "expect", "te", "upgrade",
                      "keep-alive", "trailer"})

# an agent job's request says which job, session and turn it is (`live/agentrun.py`), so a
# server's log can tell them apart; the simulator's request log reads the same names
AGENT_JOB = "X-Anvil-Job"  # the trace's job id
AGENT_SESSION = "X-Anvil-Session"  # the session's id within its job
AGENT_TURN = "X-Anvil-Turn"  # the turn's 0-based index in its session


def is_credential(name: str) -> bool:
    """True when `name` looks like it carries a secret: its value is never shown."""
    return bool(_CREDENTIAL.search(name))


def problem(name: object, value: object) -> str | None:
    """What is wrong with the header `name: value`, as "use …" words; None: nothing."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        return "a header name of letters, digits and !#$%&'*+.^_`|~- only, e.g. X-Tenant"
    if name.lower() in RESERVED:
        return f"no header anvil writes itself ({', '.join(sorted(RESERVED))})"
    if not isinstance(value, str) or _CONTROL.search(value):
        return "text without line breaks or control characters"
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return "text in Latin-1 (HTTP header values are bytes; ASCII is safest)"
    return None


def checked(where: str, name: str, value: str) -> tuple[str, str]:
    """(`name`, `value`) as sent, or UsageError naming `where` (a flag), the header (its
    value redacted when a credential's) and what is allowed."""
    wrong = problem(name, value)
    if wrong is not None:
        secret = isinstance(name, str) and is_credential(name)
        given = f"{name}={REDACTED if secret else value}"
        raise UsageError(f"{where} {given!r} is not allowed; use {wrong}")
    return name, value.strip()


def parse_flag(flag: str, text: str) -> tuple[str, str]:
    """One `--header KEY=VALUE` (the first `=` splits them; a value may be empty)."""
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        # never the value: `--header "Authorization: Bearer sk-…"` (curl's form) is a secret
        given = f"{name.strip()}=…" if eq else (
            f"{text.partition(':')[0].strip()}: …" if ":" in text else text)
        raise UsageError(f"{flag} {given!r} is not allowed; use KEY=VALUE, e.g. "
                         f"{flag} X-Tenant=team-a")
    return checked(flag, name.strip(), value)


def merged(table: Mapping[str, str], flags: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The scenario's `[headers]` table with the flags over it (a name given twice among the
    flags: the last wins, as with any repeated flag); names compared without case, each kept
    as last spelled."""
    out: dict[str, tuple[str, str]] = {}
    for name, value in [*table.items(), *flags]:
        out[name.lower()] = (name, value)
    return dict(out.values())


def shown(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` as anything anvil writes or shows may carry them: credentials redacted."""
    return {k: REDACTED if is_credential(k) else v for k, v in headers.items()}


def head_lines(headers: Mapping[str, str]) -> bytes:
    """The header lines of a hand-written HTTP request, `Name: value\\r\\n` each."""
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")


def with_api_key(headers: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    """`headers`, refused when one is Authorization and an API key is given too (the key is
    sent as `Authorization: Bearer …`: two would contradict each other)."""
    if api_key and any(k.lower() == "authorization" for k in headers):
        raise UsageError("--header Authorization=… and an API key (--api-key, "
                         "$ANVIL_API_KEY or $OPENAI_API_KEY) are both given; use one")
    return dict(headers)
