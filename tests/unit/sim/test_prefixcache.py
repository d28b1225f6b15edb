"""The simulator's prefix cache (``--prefix-cache``): the cache class on its own, then the real
simulator process on 127.0.0.1 answering real HTTP requests.

Expected cached-token figures are derived, never typed in: the shared prefix of two prompts is
measured on the ids the simulator's own ``/tokenize`` returns, then rounded down to the block.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.sim.prefixcache import PrefixCache, prompt_token_ids
from anvil_metrics.sim.rawclient import Response, exchange, exchange_many, request_bytes
from anvil_metrics.sim.tokenizer import RULES, chat_token_ids

MS = 1_000_000
BLOCK = 16

# -- the cache class -----------------------------------------------------------------------------


def run(start: int, n: int) -> list[int]:
    """`n` distinct ids starting at `start` (distinct runs never share a block)."""
    return list(range(start, start + n))


def test_hits_count_leading_whole_blocks_only() -> None:
    cache = PrefixCache(block_tokens=4, capacity_tokens=1000)
    first = run(100, 20)  # 5 full blocks
    cache.insert(cache.lookup(first).keys)
    for shared in (0, 3, 4, 7, 8, 12, 13, 19):
        other = first[:shared] + run(900, 20 - shared)
        assert cache.lookup(other).cached_tokens == shared // 4 * 4, shared
    assert cache.lookup(first + run(500, 6)).cached_tokens == 20


def test_clear_forgets_every_block() -> None:  # POST /reset_prefix_cache, /flush_cache
    cache = PrefixCache(block_tokens=4, capacity_tokens=1000)
    first = run(100, 20)
    cache.insert(cache.lookup(first).keys)
    assert len(cache) == 5 and cache.lookup(first).cached_tokens == 19
    cache.clear()
    assert len(cache) == 0 and cache.lookup(first).cached_tokens == 0
    cache.insert(cache.lookup(first).keys)  # and fills again as before
    assert cache.lookup(first).cached_tokens == 19


def test_partial_last_block_is_not_cached() -> None:
    cache = PrefixCache(block_tokens=4, capacity_tokens=1000)
    ten = run(100, 10)  # 2 full blocks + 2 tokens
    lookup = cache.lookup(ten)
    assert len(lookup.keys) == 2 and lookup.cached_tokens == 0
    cache.insert(lookup.keys)
    assert len(cache) == 2
    assert cache.lookup(ten + run(500, 10)).cached_tokens == 8  # not 10


def test_at_least_one_token_is_computed() -> None:
    cache = PrefixCache(block_tokens=4, capacity_tokens=1000)
    eight, nine = run(100, 8), run(100, 9)
    cache.insert(cache.lookup(eight).keys)
    assert cache.lookup(eight).cached_tokens == 7  # every block hits: prompt_tokens - 1
    assert cache.lookup(nine).cached_tokens == 8  # the 9th token is computed anyway
    one_block = run(300, 4)
    cache.insert(cache.lookup(one_block).keys)
    assert cache.lookup(one_block).cached_tokens == 3
    assert cache.lookup([]).cached_tokens == 0


def test_lookup_does_not_insert() -> None:
    cache = PrefixCache(block_tokens=4, capacity_tokens=1000)
    ids = run(100, 12)
    assert cache.lookup(ids).cached_tokens == 0
    assert cache.lookup(ids).cached_tokens == 0 and len(cache) == 0


def test_lru_eviction_at_capacity() -> None:
    cache = PrefixCache(block_tokens=4, capacity_tokens=14)  # 3 blocks
    assert cache.capacity_blocks == 3
    a, b = run(100, 9), run(200, 9)  # 2 full blocks each (+1 token)
    cache.insert(cache.lookup(a).keys)
    cache.insert(cache.lookup(b).keys)
    assert len(cache) == 3
    # a is the least recently used; its tail block went first, so its head still hits
    assert cache.lookup(a).cached_tokens == 4
    assert cache.lookup(b).cached_tokens == 8
    cache.insert(cache.lookup(a).keys)  # a again: refreshed, b loses its tail
    assert (cache.lookup(a).cached_tokens, cache.lookup(b).cached_tokens) == (8, 4)
    c = run(300, 13)  # 3 blocks: everything else goes
    cache.insert(cache.lookup(c).keys)
    assert len(cache) == 3
    assert (cache.lookup(a).cached_tokens, cache.lookup(b).cached_tokens) == (0, 0)
    assert cache.lookup(c).cached_tokens == 12


def test_a_prompt_longer_than_the_capacity_keeps_its_head() -> None:
    cache = PrefixCache(block_tokens=4, capacity_tokens=8)  # 2 blocks
    long = run(100, 40)
    cache.insert(cache.lookup(long).keys)
    assert len(cache) == 2
    assert cache.lookup(long).cached_tokens == 8


def test_keys_are_chained() -> None:
    """Block content alone does not hit: the whole prefix before it must match too."""
    cache = PrefixCache(block_tokens=4, capacity_tokens=1000)
    x, y, z = run(100, 4), run(200, 4), run(300, 4)
    cache.insert(cache.lookup(x + y + [1]).keys)
    assert cache.lookup(y + x + [1]).cached_tokens == 0  # both blocks held, wrong positions
    assert cache.lookup(z + y + [1]).cached_tokens == 0  # y at its position, other prefix
    assert cache.lookup(x + z + y + [1]).cached_tokens == 4
    assert cache.block_keys(x + y)[1] != cache.block_keys(z + y)[1]
    assert cache.block_keys(x + y) == cache.block_keys(x + y + [7, 7, 7])


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        PrefixCache(block_tokens=0)
    with pytest.raises(ValueError):
        PrefixCache(block_tokens=16, capacity_tokens=15)


def test_key_computation_is_cheap() -> None:
    """393,216 tokens in blocks of 16 (24,576 keys): ~6 ms here. Only a sanity bound, far
    from the figure (a busy machine stretches any time; seen: over 30 ms, best of 5): work
    per key that grew with the prompt (24,576² steps) would take seconds."""
    ids = prompt_token_ids([{"role": "user", "content": "the quick brown fox " * 80_000}])
    ids = ids[:393_216]
    assert ids.size == 393_216
    cache = PrefixCache()
    best = min(_elapsed_ms(lambda: cache.block_keys(ids)) for _ in range(5))
    assert len(cache.block_keys(ids)) == 393_216 // 16
    assert best < 1000, f"{best:.1f} ms"


def _elapsed_ms(work: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    work()
    return (time.perf_counter_ns() - start) / MS


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["system", "user", "assistant"]), st.text(max_size=120)),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(RULES),
    st.integers(1, 30),
)
def test_prompt_ids_are_the_tokenizers(
    turns: list[tuple[str, str]], rule: str, repeat: int
) -> None:
    """The cache's fast ids are exactly `tokenizer.chat_token_ids` (what /tokenize returns)."""
    messages: list[dict[str, Any]] = [{"role": r, "content": t * repeat} for r, t in turns]
    messages.append({"role": "user", "content": [{"type": "text", "text": "a, b"}]})
    assert prompt_token_ids(messages, rule).tolist() == chat_token_ids(messages, rule)


# -- the simulator process -----------------------------------------------------------------------

QUICK = ("--prefill-ms", "0", "--interval-ms", "0", "--reasoning-tokens", "2",
         "--content-tokens", "3")  # fmt: skip


def words(tag: str, n: int) -> str:
    """`n` distinct, deterministic words (a long text that never repeats itself)."""
    return " ".join(f"{tag}{i}x" for i in range(n))


def chat_messages(system: str, user: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def port_of(sim: SimProcess) -> int:
    return int(sim.url.rsplit(":", 1)[1])


def token_ids(port: int, messages: list[dict[str, Any]]) -> list[int]:
    _, resp = exchange(port, "/tokenize", {"model": "sim-model", "messages": messages})
    assert resp.status == 200
    return orjson.loads(resp.body)["tokens"]


def shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def expected_cached(cached_ids: list[int], ids: list[int]) -> int:
    """What the cache holding `cached_ids`' prompt gives `ids`: whole shared blocks, and at
    least one token left to compute."""
    return min(shared_prefix(cached_ids, ids) // BLOCK * BLOCK, len(ids) - 1)


def ask(port: int, messages: list[dict[str, Any]], **fields: Any) -> tuple[int, Response]:
    payload = {"model": "sim-model", "messages": messages, "stream": True,
               "stream_options": {"include_usage": True}, **fields}  # fmt: skip
    sent, resp = exchange(port, "/v1/chat/completions", payload)
    assert resp.status == 200, resp.body
    return sent, resp


def usage(resp: Response) -> dict[str, Any]:
    """Usage from a stream's usage (or finish) chunk, or from a non-streaming body."""
    if not resp.events:
        return orjson.loads(resp.body)["usage"]
    found = [e.chunk["usage"] for e in resp.events if e.chunk and e.chunk.get("usage")]
    assert len(found) == 1, resp.events
    return found[0]


def cached(resp: Response) -> int:
    return usage(resp)["prompt_tokens_details"]["cached_tokens"]


def ttft_ms(sent: int, resp: Response) -> float:
    first = next(
        e for e in resp.events
        if e.chunk and e.chunk["choices"] and (
            e.chunk["choices"][0]["delta"].get("reasoning_content")
            or e.chunk["choices"][0]["delta"].get("content"))
    )  # fmt: skip
    return (first.arrival_ns - sent) / MS


SYSTEM = words("sys", 300)


@pytest.mark.e2e
def test_shared_prefix_is_reported_cached(simulator: Callable[..., SimProcess]) -> None:
    port = port_of(simulator("--prefix-cache", *QUICK))
    first = chat_messages(SYSTEM, "What is the first question?")
    second = chat_messages(SYSTEM, "A different, longer question about something else?")
    fresh = chat_messages(words("other", 300), "What is the first question?")
    ids = {name: token_ids(port, m) for name, m in
           (("first", first), ("second", second), ("fresh", fresh))}  # fmt: skip
    want = expected_cached(ids["first"], ids["second"])
    assert want >= 10 * BLOCK and want % BLOCK == 0  # a long prefix, cut at a block boundary
    assert shared_prefix(ids["first"], ids["second"]) > want  # a partial block is not counted

    _, resp = ask(port, first)
    assert cached(resp) == 0
    assert usage(resp)["prompt_tokens"] == len(ids["first"])
    _, resp = ask(port, second)
    assert cached(resp) == want
    _, resp = ask(port, fresh)
    assert cached(resp) == 0
    # the same prompt again: every full block hits, at least one token is computed
    _, resp = ask(port, second)
    assert cached(resp) == min(len(ids["second"]) // BLOCK * BLOCK, len(ids["second"]) - 1)


@pytest.mark.e2e
def test_cached_tokens_in_every_usage_shape(simulator: Callable[..., SimProcess]) -> None:
    port = port_of(simulator("--prefix-cache", "--usage-in-finish-chunk", *QUICK))
    first = chat_messages(SYSTEM, "one")
    second = chat_messages(SYSTEM, "two, and a bit more")
    want = expected_cached(token_ids(port, first), token_ids(port, second))
    assert want > 0
    _, resp = exchange(port, "/v1/chat/completions", {"messages": first})  # non-streaming
    assert orjson.loads(resp.body)["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    _, resp = ask(port, second, stream_options=None)  # usage rides in the finish chunk
    finish = next(e.chunk for e in resp.events if e.chunk and e.chunk.get("usage"))
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert finish["usage"]["prompt_tokens_details"] == {"cached_tokens": want}
    _, resp = exchange(port, "/v1/chat/completions", {"messages": second})
    body = orjson.loads(resp.body)
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == min(
        len(token_ids(port, second)) // BLOCK * BLOCK, body["usage"]["prompt_tokens"] - 1
    )


@pytest.mark.e2e
def test_cached_prefill_is_shorter(simulator: Callable[..., SimProcess]) -> None:
    """Only uncached tokens are prefilled: with 0.05 ms a token, ~2000 tokens cost ~100 ms
    the first time and a few ms when all but the tail is cached. Never early either."""
    prefill_ms, per_token = 2.0, 0.05
    port = port_of(simulator("--prefix-cache", "--prefill-ms", str(prefill_ms),
                             "--prefill-ms-per-token", str(per_token), "--interval-ms", "1",
                             "--reasoning-tokens", "1", "--content-tokens", "2"))  # fmt: skip
    system = words("long", 1000)
    first = chat_messages(system, "first question")
    second = chat_messages(system, "second question, different")
    ids1, ids2 = token_ids(port, first), token_ids(port, second)
    ask(port, chat_messages("warm up", "hi"))  # the server's code paths, not the cache
    sent, resp = ask(port, first)
    ttft1 = ttft_ms(sent, resp)
    sent, resp = ask(port, second)
    ttft2 = ttft_ms(sent, resp)
    hit = cached(resp)
    assert hit == expected_cached(ids1, ids2) and len(ids2) - hit < 2 * BLOCK + 10
    assert ttft1 >= prefill_ms + per_token * len(ids1)  # ~100 ms
    assert ttft2 >= prefill_ms + per_token * (len(ids2) - hit)
    assert ttft2 < 0.6 * ttft1, (ttft1, ttft2)


@pytest.mark.e2e
def test_no_cache_no_details(simulator: Callable[..., SimProcess]) -> None:
    port = port_of(simulator(*QUICK))
    messages = chat_messages(SYSTEM, "same")
    for _ in range(2):
        _, resp = ask(port, messages)
        assert "prompt_tokens_details" not in usage(resp)
        _, resp = exchange(port, "/v1/chat/completions", {"messages": messages})
        assert "prompt_tokens_details" not in usage(resp)


@pytest.mark.e2e
def test_blocks_enter_at_the_prefill_deadline(simulator: Callable[..., SimProcess]) -> None:
    """Simultaneous requests with one prefix both miss; a refused request, or one whose
    client left before its prefill deadline, leaves nothing in the cache."""
    port = port_of(simulator("--prefix-cache", "--prefill-ms", "150", "--interval-ms", "0",
                             "--reasoning-tokens", "1", "--content-tokens", "1",
                             "--max-context", "4000"))  # fmt: skip
    payload = {"messages": chat_messages(words("same", 200), "q"), "stream": True,
               "stream_options": {"include_usage": True}}  # fmt: skip
    both = exchange_many(port, "/v1/chat/completions", [payload, payload])
    assert [cached(resp) for _, resp in both] == [0, 0]
    _, resp = ask(port, payload["messages"])
    assert cached(resp) > 0

    refused = chat_messages(words("refused", 200), "q")
    _, resp = exchange(port, "/v1/chat/completions", {"messages": refused, "max_tokens": 4000})
    assert resp.status == 400
    _, resp = ask(port, refused)
    assert cached(resp) == 0

    gone = chat_messages(words("gone", 200), "q")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request_bytes("/v1/chat/completions", {"messages": gone, "stream": True}))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")  # head + role chunk, at once
    time.sleep(0.3)  # well past its prefill deadline
    _, resp = ask(port, gone)
    assert cached(resp) == 0
    _, resp = ask(port, gone)
    assert cached(resp) > 0


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--prefix-cache-block", "0"], "--prefix-cache-block"),
        (["--prefix-cache-block", "four"], "--prefix-cache-block"),
        (["--prefix-cache-tokens", "-1"], "--prefix-cache-tokens"),
        (["--prefix-cache-block", "64", "--prefix-cache-tokens", "32"], "--prefix-cache-tokens"),
    ],
)
def test_bad_cache_options_exit_2(args: list[str], flag: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "anvil_metrics.sim", "--prefix-cache", *args],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert flag in last and args[-1] in last, last
