"""The `coding` suite: can the model still write a small, correct Python function?

Why: a quantization or a serving change that breaks code generation shows up first as code
that no longer runs or gives wrong results, and only running it tells. Each case asks for
one function in a ```python block; the judge takes the first block that defines it, appends
hidden tests (`CodingCase.tests`) and a line that prints a fresh random token, and runs the
program in the sandbox (`sandbox.py`). A case passes when the program exits 0 within its
limits having printed the token (so `sys.exit(0)` before the tests is no pass).

The answer key lives here too (`CodingCase.solution`, and `wrong`, a plausible bug), so
the scripted simulator (`sim/script_coding.py`) answers from the same table.

What a failure says (`error`): no code block, assert failed (which call, what it returned),
syntax error, killed by the CPU time limit, timeout, memory limit, or the exit status and
the last line of stderr. The sandbox's isolation (uid, namespaces, limits) is in the
suite's `sandbox` figure: `network_isolated: false` says the code could reach the network.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from anvil_metrics.checks.client import CheckError
from anvil_metrics.checks.results import SuiteResult
from anvil_metrics.checks.sandbox import SandboxError, SandboxLimits, describe, run_python
from anvil_metrics.checks.suite import CheckContext, Judgement, run_case, suite_result

SUITE = "coding"
DEFAULT_LIMITS = SandboxLimits(cpu_s=10, wall_s=20.0)
MAX_TOKENS = 4096  # room for a thinking model's reasoning and a short function

INSTRUCTIONS = ("Answer with the complete function in a single ```python fenced code block. "
                "Use only the standard library. Do not read input, do not print, do not "
                "include tests or examples.")


@dataclass(frozen=True, slots=True)
class CodingCase:
    id: str
    signature: str  # e.g. "is_prime(n: int) -> bool"
    task: str  # what the function does, completing "that ..."
    tests: tuple[tuple[tuple[Any, ...], Any], ...]  # (arguments, expected result)
    solution: str  # a right answer (the scripted simulator's)
    wrong: str  # a plausible wrong answer (the simulator's `coding:wrong`)

    @property
    def function(self) -> str:
        return self.signature.split("(", 1)[0]

    @property
    def prompt(self) -> str:
        return f"Write a Python function `{self.signature}` that {self.task}\n\n{INSTRUCTIONS}"

    def calls(self) -> list[tuple[str, Any]]:
        """("f(1, 2)", expected) for each hidden test."""
        return [(f"{self.function}({', '.join(map(repr, args))})", want)
                for args, want in self.tests]


CASES: tuple[CodingCase, ...] = (
    CodingCase(
        "reverse_words", "reverse_words(text: str) -> str",
        "returns the words of `text` in reverse order, joined by single spaces. Words are "
        "separated by any run of whitespace; leading and trailing whitespace is ignored.",
        ((("the quick brown fox",), "fox brown quick the"), (("  hello   world  ",),
         "world hello"), (("",), ""), (("one",), "one"), (("a\tb\nc",), "c b a")),
        "def reverse_words(text: str) -> str:\n    return \" \".join(reversed(text.split()))",
        "def reverse_words(text: str) -> str:\n"
        "    return \" \".join(reversed(text.split(\" \")))"),
    CodingCase(
        "is_prime", "is_prime(n: int) -> bool",
        "returns True when the integer `n` is a prime number and False otherwise (also for "
        "0, 1 and negative numbers).",
        (((0,), False), ((1,), False), ((2,), True), ((4,), False), ((9,), False),
         ((97,), True), ((-7,), False), ((7917,), False), ((1_000_003,), True)),
        "def is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n"
        "    d = 2\n    while d * d <= n:\n        if n % d == 0:\n            return False\n"
        "        d += 1\n    return True",
        "def is_prime(n: int) -> bool:\n"
        "    return n > 1 and all(n % d for d in range(2, int(n ** 0.5)))"),
    CodingCase(
        "merge_intervals", "merge_intervals(intervals: list[list[int]]) -> list[list[int]]",
        "merges overlapping closed intervals given as [start, end] pairs (intervals that "
        "touch, like [1, 4] and [4, 5], merge too) and returns the merged intervals as "
        "[start, end] lists sorted by start. The input may be unsorted or empty.",
        ((([[1, 3], [2, 6], [8, 10], [15, 18]],), [[1, 6], [8, 10], [15, 18]]),
         (([[1, 4], [4, 5]],), [[1, 5]]), (([[5, 7], [1, 2]],), [[1, 2], [5, 7]]),
         (([],), []), (([[1, 10], [2, 3]],), [[1, 10]])),
        "def merge_intervals(intervals: list[list[int]]) -> list[list[int]]:\n"
        "    merged: list[list[int]] = []\n"
        "    for start, end in sorted(intervals):\n"
        "        if merged and start <= merged[-1][1]:\n"
        "            merged[-1][1] = max(merged[-1][1], end)\n"
        "        else:\n            merged.append([start, end])\n    return merged",
        "def merge_intervals(intervals: list[list[int]]) -> list[list[int]]:\n"
        "    merged: list[list[int]] = []\n"
        "    for start, end in sorted(intervals):\n"
        "        if merged and start <= merged[-1][1]:\n            merged[-1][1] = end\n"
        "        else:\n            merged.append([start, end])\n    return merged"),
    CodingCase(
        "run_length", "rle_encode(text: str) -> str",
        "run-length encodes `text`: each run of one repeated character becomes that "
        "character followed by the run's length in decimal, so \"aaabcc\" becomes "
        "\"a3b1c2\" and \"\" stays \"\".",
        ((("aaabcc",), "a3b1c2"), (("",), ""), (("abc",), "a1b1c1"),
         (("zzzzzzzzzzzz",), "z12"), (("aabbaa",), "a2b2a2")),
        "def rle_encode(text: str) -> str:\n    out = []\n    i = 0\n"
        "    while i < len(text):\n        j = i\n"
        "        while j < len(text) and text[j] == text[i]:\n            j += 1\n"
        "        out.append(f\"{text[i]}{j - i}\")\n        i = j\n    return \"\".join(out)",
        "def rle_encode(text: str) -> str:\n    from collections import Counter\n"
        "    return \"\".join(f\"{c}{n}\" for c, n in Counter(text).items())"),
    CodingCase(
        "balanced", "is_balanced(text: str) -> bool",
        "returns True when the brackets (), [] and {} in `text` are balanced and properly "
        "nested, and False otherwise. Other characters are ignored.",
        ((("([]{})",), True), (("([)]",), False), (("((",), False), (("",), True),
         (("a(b)c[d]{e}",), True), (("}{",), False)),
        "def is_balanced(text: str) -> bool:\n    pairs = {')': '(', ']': '[', '}': '{'}\n"
        "    stack = []\n    for ch in text:\n        if ch in '([{':\n"
        "            stack.append(ch)\n        elif ch in pairs:\n"
        "            if not stack or stack.pop() != pairs[ch]:\n                return False\n"
        "    return not stack",
        "def is_balanced(text: str) -> bool:\n"
        "    return all(text.count(o) == text.count(c) for o, c in ('()', '[]', '{}'))"),
    CodingCase(
        "roman", "to_roman(number: int) -> str",
        "returns `number` (1 to 3999) as a Roman numeral in standard subtractive notation, "
        "e.g. 4 is \"IV\" and 1994 is \"MCMXCIV\".",
        (((1,), "I"), ((4,), "IV"), ((9,), "IX"), ((14,), "XIV"), ((40,), "XL"),
         ((1994,), "MCMXCIV"), ((2024,), "MMXXIV"), ((3999,), "MMMCMXCIX")),
        "def to_roman(number: int) -> str:\n"
        "    values = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'),\n"
        "              (90, 'XC'), (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'),\n"
        "              (4, 'IV'), (1, 'I')]\n    out = ''\n    for value, letters in values:\n"
        "        while number >= value:\n            out += letters\n"
        "            number -= value\n    return out",
        "def to_roman(number: int) -> str:\n"
        "    values = [(1000, 'M'), (500, 'D'), (100, 'C'), (50, 'L'), (10, 'X'), (5, 'V'),\n"
        "              (1, 'I')]\n    out = ''\n    for value, letters in values:\n"
        "        while number >= value:\n            out += letters\n"
        "            number -= value\n    return out"),
)
BY_PROMPT = {c.prompt: c for c in CASES}

_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = ("python", "python3", "py", "")


def extract_code(content: str, function: str) -> str | None:
    """The code of the first ```python (or untagged) block that defines `function`, else
    of the first such block; None when the answer has none. An unclosed last block counts
    (an answer cut by max_tokens is then judged on what it has)."""
    blocks = [body for tag, body in _FENCE.findall(content)
              if tag.lower() in _PYTHON_TAGS]
    for body in blocks:
        if re.search(rf"^\s*(async\s+)?def\s+{re.escape(function)}\s*\(", body, re.MULTILINE):
            return body.rstrip()
    return blocks[0].rstrip() if blocks else None


def program_with_tests(code: str, case: CodingCase, token: str) -> str:
    """`code`, then the hidden tests, then a line printing `token` (reached only when all
    passed). Tuples compare as lists: the tests judge values, not container types."""
    lines = [code, "", "",
             "def _anvil_norm(value):",
             "    if isinstance(value, (list, tuple)):",
             "        return [_anvil_norm(v) for v in value]",
             "    return value",
             "",
             "def _anvil_check(call, got, expected):",
             "    assert _anvil_norm(got) == expected, "
             "f'{call} returned {got!r}, expected {expected!r}'",
             ""]
    for call, want in case.calls():
        lines.append(f"_anvil_check({call!r}, {call}, {want!r})")
    lines.append(f"print({token!r})")
    return "\n".join(lines) + "\n"


def expected_of(case: CodingCase) -> str:
    return "the hidden tests pass: " + "; ".join(f"{call} == {want!r}"
                                                 for call, want in case.calls())


def judge_answer(content: str, case: CodingCase, limits: SandboxLimits) -> Judgement:
    """Run the answer's code with the hidden tests in the sandbox."""
    code = extract_code(content, case.function)
    if code is None:
        return Judgement(False, content, "no ```python code block in the answer")
    token = secrets.token_hex(8)
    try:
        ran = run_python(program_with_tests(code, case, token), limits, expect_stdout=token)
    except SandboxError as e:  # not the model's fault: the case could not be judged
        raise CheckError(f"sandbox: {e}", "transport") from None
    extra = {"outcome": ran.outcome, "cpu_s": _round(ran.cpu_s),
             "program_s": round(ran.elapsed_s, 3)}
    if ran.outcome == "ok":
        return Judgement(True, code, extra=extra)
    return Judgement(False, code, ran.reason, extra=extra)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def run_coding(ctx: CheckContext, limits: SandboxLimits | None = None) -> SuiteResult:
    """Ask every case; `limits` bound each program (tests pass short ones)."""
    limits = limits or DEFAULT_LIMITS
    started = time.monotonic()
    try:
        sandbox = describe(limits)
    except SandboxError as e:
        return SuiteResult(SUITE, (), time.monotonic() - started, error=f"sandbox: {e}")
    if not sandbox["works"]:
        return SuiteResult(SUITE, (), time.monotonic() - started, {"sandbox": sandbox},
                           error="sandbox: a trivial program did not run: "
                           f"{sandbox.get('reason')}")
    cases = []
    for case in CASES:
        def judge(case: CodingCase = case) -> Judgement:
            answer = ctx.client.chat({
                "messages": [{"role": "user", "content": case.prompt}],
                "temperature": 0, "max_tokens": MAX_TOKENS})
            return judge_answer(answer.content, case, limits)
        cases.append(run_case(ctx, case.id, expected_of(case), judge))
    return suite_result(SUITE, cases, started, sandbox=sandbox)
