"""How anvil counts a chat prompt's tokens (`prep.counting`), against every server shape.

Prompt sizes are planned in the server's tokens, and each server family exposes its count
differently (vLLM, llama.cpp, SGLang, or nothing). A counting path proves itself only against
a real process: it must be picked on its own family's server, fall through cleanly on the
others, and give exactly what the server then reports as ``usage.prompt_tokens``. So each
``anvil sim --tokenize-api`` shape is started as a real process on 127.0.0.1 and
`server_counter` is checked against the simulator's own usage, under both tokenizer rules.

The pieces without a server are unit-tested too: the template overhead `templated_counter`
measures once per role layout, `local_text_counter` (with or without the optional
``tokenizers`` package: the branch is explicit, never a silent skip), and the simulator's
template text parsing back into the chat ids.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import anvil
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from simfork import start_simulator

from anvil_metrics.errors import UsageError
from anvil_metrics.prep import counting
from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.sim import prefixcache, tokenizer
from anvil_metrics.sim.config import TOKENIZE_APIS
from anvil_metrics.sim.tokenapi import APIS
from anvil_metrics.sim.tokenizer import (
    RULES,
    chat_token_ids,
    count_chat_tokens,
    count_text_tokens,
    prompt_token_ids,
    render_chat,
    template_token_ids,
    text_token_ids,
)
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient

MODEL = "sim-model"
QUICK = ("--prefill-ms", "0", "--interval-ms", "0", "--reasoning-tokens", "0",
         "--content-tokens", "1")  # fmt: skip
HAS_TOKENIZERS = importlib.util.find_spec("tokenizers") is not None

# (Counter.method, a word Counter.source must contain) for each simulated server shape
EXPECTED_COUNTER = {
    "vllm": ("tokenize", "vLLM"),
    "llamacpp": ("tokenize", "llama.cpp"),
    "sglang": ("tokenize", "SGLang"),
    "none": ("probe", "probes"),
}


def long_text(words: int = 3000, seed: int = 11) -> str:
    """A deterministic ~`words`-word text: varied word lengths, punctuation, newlines, UTF-8."""
    rng = random.Random(seed)
    vocab = ("the", "a", "of", "internationalization", "tokenizer", "benchmark", "café",
             "naïve", "日本語", "under_score", "x", "42", "3.14", "throughput", "latency")
    out = []
    for _ in range(words):
        word = rng.choice(vocab)
        if rng.random() < 0.1:
            word += rng.choice((",", ".", "!", "?", ";", " —", "'s"))
        out.append(word + ("\n" if rng.random() < 0.03 else " "))
    return "".join(out).strip()


SHORT = [{"role": "user", "content": "Say hi, politely."}]
LONG = [{"role": "user", "content": long_text()}]
SYSTEM_USER = [
    {"role": "system", "content": "You are terse.\nAnswer in one line."},
    {"role": "user", "content": "Explain tokenization — briefly!"},
]
MULTI_TURN = [
    *SYSTEM_USER,
    {"role": "assistant", "content": "Text becomes ids."},
    {"role": "user", "content": [{"type": "text", "text": "And"},
                                 {"type": "text", "text": " why?"}]},
]
MESSAGE_LISTS = {"short": SHORT, "long": LONG, "system+user": SYSTEM_USER, "multi": MULTI_TURN}


class RecordingClient(ChatClient):
    """A `ChatClient` that remembers the path of every POST (to count probes)."""

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__(endpoint)
        self.posts: list[str] = []

    def post_json(self, path: str, body: dict, absolute: bool = False) -> tuple[int, object]:
        self.posts.append(path if absolute else self.endpoint.api_path + path)
        return super().post_json(path, body, absolute)

    def chat_posts(self) -> int:
        return self.posts.count(self.endpoint.api_path + "/chat/completions")


@contextmanager
def client_for(sim: SimProcess) -> Iterator[RecordingClient]:
    client = RecordingClient(Endpoint.parse(sim.url))
    try:
        yield client
    finally:
        client.close()


Start = Callable[..., SimProcess]


@pytest.fixture(scope="module")
def start() -> Iterator[Start]:
    """`start(api, rule)`: the simulator of that shape and tokenizer rule, started once for
    the module and shared by every test that asks for the same pair (8 pairs for 15 asks:
    a simulator costs ~0.4 CPU-s and ~0.5 s to start). Sharing changes no test: each one
    reads only what its own requests are answered, and no shape keeps state between them
    (no prefix cache here)."""
    with ExitStack() as stack:
        started: dict[tuple[str, str], SimProcess] = {}

        def get(api: str, rule: str = "words4") -> SimProcess:
            if (api, rule) not in started:
                started[api, rule] = stack.enter_context(start_simulator(
                    [*QUICK, "--tokenizer", rule, "--tokenize-api", api]))
            return started[api, rule]

        yield get


def usage_prompt_tokens(client: ChatClient, messages: list[dict[str, Any]]) -> int:
    """The simulator's own count: ``usage.prompt_tokens`` of a non-streaming request."""
    status, body = client.post_json(
        "/chat/completions",
        {"model": MODEL, "messages": messages, "max_tokens": 1, "stream": False},
    )
    assert status == 200 and isinstance(body, dict), body
    return body["usage"]["prompt_tokens"]


# -- the simulator's template text -------------------------------------------------------------


def test_every_tokenize_api_has_routes() -> None:
    assert set(APIS) == set(TOKENIZE_APIS)
    assert prefixcache.prompt_token_ids is tokenizer.prompt_token_ids  # moved, still importable


_ROLES = st.sampled_from(["system", "user", "assistant", "tool"])
_CONTENT = st.text(max_size=60).filter(lambda t: tokenizer.IM_END_TEXT not in t)


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.tuples(_ROLES, _CONTENT), min_size=1, max_size=4),
    st.sampled_from(RULES),
    st.booleans(),
)
def test_rendered_template_parses_back_to_the_chat_ids(
    turns: list[tuple[str, str]], rule: str, generation: bool
) -> None:
    """llama.cpp's path (render, then tokenize the text) gives the chat path's ids exactly."""
    messages = [{"role": role, "content": text} for role, text in turns]
    ids = chat_token_ids(messages, rule, generation)
    assert template_token_ids(render_chat(messages, generation), rule).tolist() == ids
    assert prompt_token_ids(messages, rule, generation).tolist() == ids
    assert len(ids) == count_chat_tokens(messages, rule, generation)


def test_template_markers_outside_turns_are_single_tokens() -> None:
    for rule in RULES:
        text = "before <|im_end|>after<|im_start|>"
        expected = count_text_tokens("before ", rule) + count_text_tokens("after", rule) + 2
        assert template_token_ids(text, rule).size == expected
        assert template_token_ids("plain text, no markers", rule).tolist() == text_token_ids(
            "plain text, no markers", rule)
    # a plain count of the rendered text is *not* the chat count: the markers must be parsed
    rendered = render_chat(SYSTEM_USER)
    assert count_text_tokens(rendered) != count_chat_tokens(SYSTEM_USER)


# -- each simulated server's endpoints ---------------------------------------------------------


@pytest.mark.e2e
def test_vllm_shape(start: Start) -> None:
    with client_for(start("vllm")) as client:
        status, body = client.post_json("/tokenize", {"model": MODEL, "messages": SYSTEM_USER},
                                        absolute=True)
        assert status == 200 and body["count"] == count_chat_tokens(SYSTEM_USER)
        assert body["tokens"] == chat_token_ids(SYSTEM_USER)
        for path in ("/apply-template", "/v1/tokenize"):
            assert client.post_json(path, {"prompt": "x"}, absolute=True)[0] == 404


@pytest.mark.e2e
@pytest.mark.parametrize("rule", RULES)
def test_llamacpp_shape(start: Start, rule: str) -> None:
    with client_for(start("llamacpp", rule)) as client:
        status, body = client.post_json("/apply-template", {"messages": MULTI_TURN},
                                        absolute=True)
        assert status == 200 and body == {"prompt": render_chat(MULTI_TURN)}
        status, body = client.post_json(
            "/tokenize", {"content": body["prompt"], "add_special": True}, absolute=True)
        assert status == 200 and body == {"tokens": chat_token_ids(MULTI_TURN, rule)}
        assert len(body["tokens"]) == usage_prompt_tokens(client, MULTI_TURN)
        # as llama-server: a body without "content" is not an error, it has no tokens
        status, body = client.post_json("/tokenize", {"model": MODEL, "messages": SHORT},
                                        absolute=True)
        assert (status, body) == (200, {"tokens": []})
        status, body = client.post_json("/apply-template", {"prompt": "x"}, absolute=True)
        assert status == 400 and body["error"]["type"] == "invalid_request_error"
        assert client.post_json("/v1/tokenize", {"prompt": "x"}, absolute=True)[0] == 404


@pytest.mark.e2e
def test_sglang_shape(start: Start) -> None:
    with client_for(start("sglang", "syllable3")) as client:
        text = "internationalization, twice\n"
        want = count_text_tokens(text, "syllable3")
        for path in ("/v1/tokenize", "/tokenize"):
            status, body = client.post_json(
                path, {"model": MODEL, "prompt": text, "add_special_tokens": False},
                absolute=True)
            assert status == 200
            assert body == {"tokens": text_token_ids(text, "syllable3"), "count": want,
                            "max_model_len": 32768}
        status, body = client.post_json("/v1/tokenize", {"prompt": [text, "a"]}, absolute=True)
        assert status == 200 and body["count"] == [want, count_text_tokens("a", "syllable3")]
        status, body = client.post_json("/tokenize", {"model": MODEL, "messages": SHORT},
                                        absolute=True)
        assert status == 400
        assert body["object"] == "error" and body["code"] == 400 and "prompt" in body["message"]
        assert client.post_json("/apply-template", {"messages": SHORT}, absolute=True)[0] == 404


@pytest.mark.e2e
@pytest.mark.parametrize("flags", [("--tokenize-api", "none"), ("--no-tokenize",)],
                         ids=["none", "no-tokenize"])
def test_no_tokenize_endpoints(simulator: Callable[..., SimProcess],
                               flags: tuple[str, ...]) -> None:
    with client_for(simulator(*QUICK, *flags)) as client:
        for path in ("/tokenize", "/v1/tokenize", "/apply-template"):
            assert client.post_json(path, {"messages": SHORT}, absolute=True)[0] == 404
        counter = counting.server_counter(client, {"model": MODEL})
        assert counter.method == "probe"


def test_unknown_tokenize_api_exits_2() -> None:
    result = subprocess.run([sys.executable, "-m", "anvil_metrics.sim", "--tokenize-api", "tgi"],
                            capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and "--tokenize-api" in result.stderr


# -- server_counter end to end -----------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("api", TOKENIZE_APIS)
def test_server_counter_equals_usage(start: Start, api: str, rule: str) -> None:
    """The way picked names the server's shape, and counts exactly as the server charges.

    Only SGLang's text endpoint needs probes: one per role layout, for the template's tokens.
    """
    sim = start(api, rule)
    with client_for(sim) as client, client_for(sim) as reference:
        counter = counting.server_counter(client, {"model": MODEL})
        method, name = EXPECTED_COUNTER[api]
        assert counter.method == method and name in counter.source, counter
        for label, messages in MESSAGE_LISTS.items():
            want = usage_prompt_tokens(reference, messages)
            assert want == count_chat_tokens(messages, rule)  # the sim runs with this rule
            assert counter.count(messages) == want, label
        layouts = len({tuple(m["role"] for m in msgs) for msgs in MESSAGE_LISTS.values()})
        probes = {"vllm": 0, "llamacpp": 0, "sglang": layouts, "none": len(MESSAGE_LISTS)}
        assert client.chat_posts() == probes[api], client.posts


@pytest.mark.e2e
def test_rules_give_different_counts(start: Start) -> None:
    """The check above is not vacuous: the long prompt costs differently under each rule."""
    counts = set()
    for rule in RULES:
        with client_for(start("llamacpp", rule)) as client:
            counts.add(counting.server_counter(client, {"model": MODEL}).count(LONG))
    assert len(counts) == 2


# -- templated_counter -------------------------------------------------------------------------

FAKE_ROLE_TOKENS = {"system": 7, "user": 5, "assistant": 6}
FAKE_GENERATION_TOKENS = 3


def fake_text_count(text: str) -> int:
    return len(text.split())


def fake_server_count(messages: list[dict[str, Any]]) -> int:
    """A server whose template adds a fixed cost per role and for the generation prompt."""
    return FAKE_GENERATION_TOKENS + sum(
        FAKE_ROLE_TOKENS[m["role"]] + fake_text_count(counting._message_text(m)) for m in messages
    )


def test_templated_counter_measures_the_template_once_per_layout() -> None:
    probes: list[list[dict[str, Any]]] = []

    def probe(messages: list[dict[str, Any]]) -> int:
        probes.append(messages)
        return fake_server_count(messages)

    count = counting.templated_counter(fake_text_count, probe)
    first = [{"role": "user", "content": "one two three"}]
    second = [{"role": "user", "content": "four five six seven eight nine"}]
    assert count(first) == fake_server_count(first) == 3 + 5 + 3
    assert count(second) == fake_server_count(second) == 3 + 5 + 6
    assert probes == [[{"role": "user", "content": "hello"}]]  # small contents, one probe

    system_user = [{"role": "system", "content": "be brief now"},
                   {"role": "user", "content": "go on then"}]
    assert count(system_user) == fake_server_count(system_user) == 3 + 7 + 3 + 5 + 3
    assert probes[1] == [system_user[0], {"role": "user", "content": "hello"}]  # system kept
    assert count([system_user[0], {"role": "user", "content": "x"}]) == 3 + 7 + 3 + 5 + 1
    assert len(probes) == 2

    reordered = [system_user[1], system_user[0]]  # same roles, another order: a new layout
    assert count(reordered) == fake_server_count(reordered)
    parts = [{"role": "user", "content": [{"type": "text", "text": "a b"},
                                          {"type": "text", "text": " c"}]}]
    assert count(parts) == 3 + 5 + 3  # parts counted by their joined text, layout known
    assert len(probes) == 3


def test_templated_counter_adds_the_measured_overhead() -> None:
    """The overhead is probe minus the probe's own contents, whatever the contents cost."""
    count = counting.templated_counter(lambda text: 2 * len(text), lambda messages: 1000)
    hello = 2 * len("hello")
    assert count([{"role": "user", "content": "abc"}]) == 1000 - hello + 6
    assert count([{"role": "user", "content": ""}]) == 1000 - hello


# -- local_text_counter ------------------------------------------------------------------------


def write_word_level_tokenizer(path: Path) -> None:
    """A tiny WordLevel tokenizer.json trained with the `tokenizers` API."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    tok.train_from_iterator(["the quick brown fox", "jumps over the lazy dog",
                             "the dog sleeps, the fox runs!"], trainer)
    tok.save(str(path))


def test_local_text_counter_without_tokenizers_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    with pytest.raises(UsageError) as info:
        counting.local_text_counter("tokenizer.json")
    assert "anvil-metrics[tokenizer]" in str(info.value) and "--tokenizer" in str(info.value)


def test_local_text_counter_counts_with_a_tokenizer_json(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    if not HAS_TOKENIZERS:
        # `tokenizers` is an optional extra, not installed here: anvil must say which one
        with pytest.raises(UsageError, match=r"anvil\[tokenizer\]"):
            counting.local_text_counter(str(path))
        return
    write_word_level_tokenizer(path)
    count = counting.local_text_counter(str(path))
    assert count("the quick brown fox") == 4
    assert count("the fox, the dog!") == 6  # punctuation is its own piece
    assert count("zebra") == 1  # unknown word: one [UNK]
    assert count("") == 0


@pytest.mark.parametrize("content", [None, '{"not": "a tokenizer"}', "plain text"],
                         ids=["missing", "other-json", "not-json"])
def test_tokenizer_path_that_is_not_a_tokenizer(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "tokenizer.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError) as info:
        counting.local_text_counter(str(path))
    message = str(info.value)
    assert "--tokenizer" in message
    if HAS_TOKENIZERS:
        assert str(path) in message and "tokenizer.json" in message
    else:  # the import fails first: the same UsageError as with a good file
        assert "anvil-metrics[tokenizer]" in message


@pytest.mark.e2e
def test_cli_bad_tokenizer_is_one_line_not_a_traceback(start: Start, tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("not a tokenizer")
    sim = start("vllm")
    result = anvil("prompts", "--host", sim.url, "--tokens", "64", "--tokenizer", str(bad),
                   timeout=60)
    assert result.returncode == 2, result.stderr
    assert "--tokenizer" in result.stderr and "Traceback" not in result.stderr


def test_a_local_tokenizer_that_is_not_the_servers_is_refused() -> None:
    """One ~1,000-word probe compares the local count with the server's: 1 % off is a
    different tokenizer, refused with one line naming --tokenizer."""
    server = fake_server_count
    counting._check_local_tokenizer(server, server, "same.json")  # agrees: accepted
    off = lambda msgs: int(server(msgs) * 1.05)  # noqa: E731
    with pytest.raises(UsageError) as info:
        counting._check_local_tokenizer(off, server, "other.json")
    msg = str(info.value)
    assert "--tokenizer 'other.json' does not match the server" in msg and "\n" not in msg


def test_cli_mismatched_tokenizer_exits_2(start: Start, tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"  # `tokenizers` is in the [dev] extra: runs in CI
    write_word_level_tokenizer(path)
    sim = start("vllm")
    proc = subprocess.run(
        [sys.executable, "-m", "anvil_metrics", "prompts", "--host", sim.url, "--tokens",
         "4096", "--tokenizer", str(path)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "does not match the server" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("api,method", [("vllm", "tokenize"), ("sglang", "tokenize"),
                                        ("llamacpp", "probe")])
def test_completions_counter_counts_the_prompt_as_the_endpoint_does(start: Start, api: str,
                                                                    method: str) -> None:
    """`--endpoint completions`: the prompt's raw count (no chat template), from vLLM's
    `/tokenize {"prompt"}` where it agrees with a completions probe, else from probes; each
    equal to what `/v1/completions` says it counted."""
    text = long_text(300)
    with client_for(start(api)) as client:
        counter = counting.text_counter(client, {"model": MODEL})
        assert counter.method == method
        n = counter.count([{"role": "user", "content": text}])
        status, body = client.post_json("/completions", {"model": MODEL, "prompt": text,
                                                         "max_tokens": 1})
        assert status == 200 and body["usage"]["prompt_tokens"] == n
        assert n < counting.server_counter(client, {"model": MODEL}).count(
            [{"role": "user", "content": text}])  # the chat template's tokens are not in it


class _TextServer:
    """A server that counts a text prompt with `count` plus one BOS, and has no /tokenize:
    just enough of a `ChatClient` for `text_counter`."""

    def __init__(self, count: Any) -> None:
        self.endpoint = type("E", (), {"api_path": "/v1"})()
        self._count = count

    def post_json(self, path: str, body: dict, absolute: bool = False) -> tuple[int, object]:
        if path == "/completions":
            return 200, {"usage": {"prompt_tokens": 1 + self._count(body["prompt"])}}
        return 404, {"error": "no such route"}


def test_text_counter_counts_with_the_local_tokenizer_and_the_servers_specials(
        tmp_path: Path) -> None:
    """`--tokenizer` with a text endpoint: the local count plus the tokens the endpoint adds
    (one probe); a tokenizer.json that is not the server's is refused, one line."""
    path = tmp_path / "tokenizer.json"
    if not HAS_TOKENIZERS:
        with pytest.raises(UsageError, match=r"anvil-metrics\[tokenizer\]"):
            counting.text_counter(_TextServer(len), {"model": MODEL}, "completions", str(path))
        return
    write_word_level_tokenizer(path)
    local = counting.local_text_counter(str(path))
    counter = counting.text_counter(_TextServer(local), {"model": MODEL}, "completions",
                                    str(path))
    assert counter.method == "local_tokenizer" and str(path) in counter.source
    text = "the quick brown fox, the lazy dog!"
    assert counter.count([{"role": "user", "content": text}]) == 1 + local(text)
    with pytest.raises(UsageError, match="does not match the server"):
        counting.text_counter(_TextServer(lambda t: 2 * len(t.split())), {"model": MODEL},
                              "completions", str(path))


def test_the_templates_opening_is_where_two_one_word_messages_differ() -> None:
    """`_opening`: the tokens before a message's text, from the token lists `/tokenize`
    returned for "an" and "by" (None when it lists none, or they differ in length)."""
    from anvil_metrics.prep.counting import _opening

    def counter(lists: dict[str, object]) -> tuple[object, dict[str, object]]:
        seen: dict[str, object] = {}

        def count(messages: list[dict]) -> int:
            seen["tokens"] = lists[messages[0]["content"]]
            return 0
        return count, seen

    count, seen = counter({"an": [1, 2, 3, 10, 4, 5], "by": [1, 2, 3, 11, 4, 5]})
    assert _opening(count, seen) == 3
    count, seen = counter({"an": None, "by": None})  # a server that lists no tokens
    assert _opening(count, seen) is None
    count, seen = counter({"an": [1, 10], "by": [1, 11, 12]})  # no common shape
    assert _opening(count, seen) is None
