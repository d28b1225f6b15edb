"""Every command the README shows names a command, flags and files that exist.

Why: a README example that no longer parses is the first thing a new user meets, and the
end-to-end tests run the commands with their own arguments, not the README's. So each
`anvil ...` and `locust -f ...` line of the README (code blocks and inline code alike) is
read here: its subcommand must be one `anvil` has, each `--flag` one that command (or
Locust with anvil's plugin, for a locustfile) accepts, each repository path it names a file
that is there. Placeholders (`URL`, `S.toml`, `…`) and optional brackets are read as the
README means them. The commands are not run (they need servers; tests/e2e run them).
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from anvil_metrics.cli.main import build_parser
from anvil_metrics.load.options import OPTIONS
from anvil_metrics.sim.options import build_parser as sim_parser

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
pytestmark = pytest.mark.e2e
_PROGRAMS = ("anvil", "locust")


def commands(text: str) -> list[list[str]]:
    """The README's `anvil`/`locust` command lines, as argument lists."""
    lines = []
    block = False
    for line in text.splitlines():
        if line.startswith("```"):
            block = not block
            continue
        if block:
            lines.append(line)
        else:
            lines += re.findall(r"`((?:\.venv/bin/)?(?:anvil|locust) [^`]*)`", line)
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        line = line.replace("\\|", "|")
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        words = [w.removeprefix(".venv/bin/") for w in words]
        while words and words[0] not in _PROGRAMS:
            words = words[1:]  # `docker run ... anvil demo`, `$ anvil ...`
        if words:
            out.append(words)
    return out


def flags(words: list[str]) -> list[str]:
    """`--flag` / `-x` words, optional brackets and `--a|--b` alternatives unwrapped."""
    found = []
    for w in words:
        for part in w.strip("[]").split("|"):
            part = part.strip("[]").split("=")[0]
            if re.fullmatch(r"--?[A-Za-z][\w-]*", part):
                found.append(part)
    return found


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


@cache
def locust_options() -> frozenset[str]:
    """Every option Locust lists in `locust --help`, and those anvil's plugin adds to its
    parser (`options.OPTIONS`; Locust's help leaves a locustfile's own options out)."""
    text = subprocess.run([sys.executable, "-m", "locust", "--help"],
                          cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    ours = {f for o in OPTIONS if o.locust for f in (o.flag, o.short) if f}
    return frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text)) | ours


def problems_of(words: list[str]) -> list[str]:
    shown = " ".join(words)
    problems = []
    for w in words:
        path = w.strip("[]")
        if re.match(r"(scenarios|locustfiles|benchmarks|tests|deploy)/\S+\.\w+$", path) \
                and not (REPO / path).exists():
            problems.append(f"{shown}: {path} is not in the repository")
    if words[0] == "locust":
        if "-f" not in words:
            return problems
        locustfile = words[words.index("-f") + 1]
        if locustfile.startswith("/app/"):  # inside the container image (Dockerfile)
            locustfile = locustfile.removeprefix("/app/")
        if not locustfile.startswith("$"):  # $PKG/...: tests/e2e/test_install.py runs it
            if not (REPO / locustfile).exists():
                problems.append(f"{shown}: {locustfile} is not in the repository")
        known = locust_options()
        return problems + [f"{shown}: locust has no {f}" for f in flags(words) if f not in known]
    rest = words[1:]
    if not rest or rest[0] in ("...", "…", "-h", "--help"):
        return problems
    if rest[0] == "sim":
        parser = sim_parser()
        rest = rest[1:]
    else:
        commands_ = subparsers(build_parser())
        if rest[0] not in commands_:
            return problems + [f"{shown}: anvil has no command {rest[0]!r}"]
        parser = commands_[rest[0]]
        nested = subparsers(parser)
        if nested and len(rest) > 1 and rest[1] in nested:
            parser = nested[rest[1]]
    known = option_strings(parser)
    return problems + [f"{shown}: {f} is not an option of it" for f in flags(rest)
                       if f not in known]


def test_the_reader_finds_commands_flags_and_alternatives() -> None:
    text = ("```sh\n.venv/bin/anvil run s.toml --host URL \\\n  --users 4  # a comment\n```\n"
            "| x | `anvil run S.toml --rate 20 [--arrival poisson\\|gamma]` |\n")
    assert commands(text) == [["anvil", "run", "s.toml", "--host", "URL", "--users", "4"],
                              ["anvil", "run", "S.toml", "--rate", "20", "[--arrival",
                               "poisson|gamma]"]]
    assert flags(commands(text)[1]) == ["--rate", "--arrival"]
    assert problems_of(["anvil", "run", "S.toml", "--no-such-flag"]) == [
        "anvil run S.toml --no-such-flag: --no-such-flag is not an option of it"]
    assert problems_of(["locust", "-f", "locustfiles/chat.py", "--scenario", "s.toml",
                        "--nosuch"]) == [
        "locust -f locustfiles/chat.py --scenario s.toml --nosuch: locust has no --nosuch"]
    assert problems_of(["anvil", "nosuch"]) == ["anvil nosuch: anvil has no command 'nosuch'"]
    assert problems_of(["anvil", "run", "scenarios/missing.toml"]) == [
        "anvil run scenarios/missing.toml: scenarios/missing.toml is not in the repository"]


def test_every_readme_command_parses() -> None:
    found = commands(README.read_text(encoding="utf-8"))
    assert len(found) >= 40, len(found)  # the reader still finds the README's commands
    problems = [p for words in found for p in problems_of(words)]
    assert problems == []


def fence_problems(text: str) -> list[str]:
    """Code fences that Markdown would not read as meant: a closing fence with text after
    it is no fence at all, and the block then runs on over the prose that follows."""
    problems = []
    block = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("```"):
            continue
        rest = line[3:].strip()
        if block and rest:  # Markdown reads it as a line of the block
            problems.append(f"line {number}: a closing fence with text after it: {line!r}")
            continue
        if not block and not re.fullmatch(r"[\w+-]*", rest):
            problems.append(f"line {number}: a fence's language is one word: {line!r}")
        block = not block
    if block:
        problems.append("the last code block is never closed")
    return problems


def test_every_code_block_of_the_readme_is_closed_by_a_bare_fence() -> None:
    assert fence_problems("```sh\nanvil demo\n``` Rows carry\n```\n") == [
        "line 3: a closing fence with text after it: '``` Rows carry'"]
    assert fence_problems("```sh\nanvil demo\n") == ["the last code block is never closed"]
    assert fence_problems(README.read_text(encoding="utf-8")) == []
