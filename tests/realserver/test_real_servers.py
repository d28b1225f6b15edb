"""anvil against real third-party servers: transformers serve, vLLM, llama.cpp's llama-server.

Run by `make test-real SERVER=...` (tests/realserver/run_real.sh), which sets the server up
with a tiny local Qwen3-style model (random weights wired to answer `<think>` + 16 reasoning
words + `</think>` + content until `max_tokens`; a real byte-level BPE tokenizer; anvil's own
ChatML template) and passes its address in ANVIL_REAL_URL. Deselected from `make test`.

What differs between the servers (../shared/design/SERVERS.md), and what each test pins:
- where reasoning arrives (`reasoning` for vLLM, `reasoning_content` for the others);
- where usage arrives (its own `choices: []` chunk when asked, or in the finish chunk always);
- whether `[DONE]` ends the stream (transformers serve sends none);
- `<think>`/`</think>` are counted in `completion_tokens` but never sent as deltas.
"""

from __future__ import annotations

import http.client
import os
import re
import time
import urllib.parse
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario

from anvil_metrics.post.derive import derive_row
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.launch import summary_lines
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient
from anvil_metrics.wire.observe import StreamObserver

pytestmark = pytest.mark.real

SERVER = os.environ.get("ANVIL_REAL_SERVER", "")
URL = os.environ.get("ANVIL_REAL_URL", "")
MODEL = os.environ.get("ANVIL_REAL_MODEL", "")
REASONING_WORDS = 16  # the tiny model's fixed reasoning span (make_tiny_model.py)

# What each server is known to do (checked on the wire by test_stream_shape_on_the_wire).
SHAPES = {
    # thinking off: transformers serve still opens with one reasoning delta of "\n\n"
    # (whitespace, but non-empty: by the spec's rule it is the first output)
    "transformers": {"reasoning_field": "reasoning_content", "usage_unasked": True,
                     "done": False, "counter": "probe", "off_reasoning_chunks": 1,
                     "sent_of_40": 38},
    "vllm": {"reasoning_field": "reasoning", "usage_unasked": False, "done": True,
             "counter": "tokenize", "off_reasoning_chunks": 0, "sent_of_40": 38},
    "llama": {"reasoning_field": "reasoning_content", "usage_unasked": False, "done": True,
              "counter": "tokenize", "off_reasoning_chunks": 0, "sent_of_40": 38},
}


@pytest.fixture(scope="module", autouse=True)
def _server() -> None:
    if SERVER not in SHAPES or not URL or not MODEL:
        pytest.fail("run these with `make test-real SERVER=transformers|vllm|llama` "
                    f"(ANVIL_REAL_SERVER={SERVER!r}, ANVIL_REAL_URL={URL!r})")


def _raw_stream(body: dict) -> tuple[list[dict], bool]:
    """The server's SSE chunks for one request, read with the standard library."""
    u = urllib.parse.urlsplit(URL)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/chat/completions", orjson.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()[:500]
    chunks, done = [], False
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            continue
        chunks.append(orjson.loads(data))
    conn.close()
    return chunks, done


def _body(max_tokens: int = 40, usage: bool = True, thinking: bool | None = None) -> dict:
    body: dict = {"model": MODEL, "stream": True, "max_tokens": max_tokens,
                  "messages": [{"role": "user", "content": "Say something about rivers."}]}
    if usage:
        body["stream_options"] = {"include_usage": True}
    if thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    return body


def test_stream_shape_on_the_wire() -> None:
    """The facts the other tests rely on, read off the wire for this server."""
    shape = SHAPES[SERVER]
    chunks, done = _raw_stream(_body(usage=True))
    assert done is shape["done"]
    fields = {k for c in chunks for ch in c.get("choices") or []
              for k, v in (ch.get("delta") or {}).items() if v}
    assert shape["reasoning_field"] in fields and "content" in fields, fields
    usage_chunks = [c for c in chunks if c.get("usage")]
    assert usage_chunks, "usage was asked for"
    assert usage_chunks[-1]["usage"]["completion_tokens"] == 40
    chunks, _ = _raw_stream(_body(usage=False))
    assert any(c.get("usage") for c in chunks) is shape["usage_unasked"]


SCENARIO = """
measurement_protocol = "real-{server}"
concurrency = {users}
requests = {requests}
max_tokens = {max_tokens}
context_tokens = 4096
max_context_tokens = 4096
[context_distribution]
1024 = 2
2048 = 2
[serve_flags]
thinking_mode = "{thinking}"
[request]
include_usage = {usage}
"""


def _run(tmp_path: Path, *flags: str, usage: bool = True, thinking: str = "default",
         users: int = 2, requests: int = 4, max_tokens: int = 40) -> tuple[dict, Path]:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO.format(
        server=SERVER, users=users, requests=requests, max_tokens=max_tokens,
        thinking=thinking, usage=str(usage).lower()))
    proc = anvil("run", str(sc), "--host", URL, "--model", MODEL, "--results-dir",
                 str(tmp_path / "res"), "--run-time", "600", *flags, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    assert verify_benchmark(doc) == []
    assert (doc["requests"], doc["completed"], doc["failed"]) == (requests, requests, 0), \
        doc["failures"]
    return doc, path.parent


def _size_error_ok(row: dict, tolerance_pct: float) -> bool:
    planned, counted = row["planned_context_tokens"], row["prompt_tokens"]
    return abs(counted - planned) * 100 <= tolerance_pct * planned


def test_reasoning_stream_with_usage(tmp_path: Path) -> None:
    """Reasoning first, then content; usage gives the token count, and the `<think>` tags
    are counted by the server but never sent: 16 reasoning chunks, content after them."""
    doc, run_dir = _run(tmp_path)
    tolerance = 0.1 if SHAPES[SERVER]["counter"] == "tokenize" else 0.5
    for r in doc["request_timings"]:
        assert r["output_token_source"] == "usage"
        assert r["output_tokens"] == 40
        assert r["reasoning_chunks"] == REASONING_WORDS, r
        assert r["content_chunks"] >= 1
        # every generated token but the two think tags arrives in a chunk of its own
        assert r["reasoning_chunks"] + r["content_chunks"] == SHAPES[SERVER]["sent_of_40"], r
        assert r["time_to_first_output_ms"] < r["ttft_ms"] < r["e2e_ms"]
        assert _size_error_ok(r, tolerance), r
    assert doc["prompt_calibration"]["method"] == SHAPES[SERVER]["counter"]
    print(f"\n[{SERVER}] " + " ".join(_summary(doc)) + "\n"
          + "\n".join(summary_lines(doc)))
    assert raw_lines(run_dir)[0]["params"]["prompt_calibration"]["method"] == \
        doc["prompt_calibration"]["method"]


def test_the_responses_endpoint(tmp_path: Path) -> None:
    """`--endpoint responses`: the same answer as events (reasoning deltas, then content),
    the usage in the Responses names, the prompt sized as the chat prompt it is templated
    as. (transformers serve says `completed` where max_output_tokens cut the answer, so
    the finish is not pinned.)"""
    _skip_unless_served("/v1/responses", {"input": "hi", "max_output_tokens": 2})
    doc, _ = _run(tmp_path, "--endpoint", "responses")
    tolerance = 0.1 if SHAPES[SERVER]["counter"] == "tokenize" else 0.5
    for r in doc["request_timings"]:
        assert (r["output_token_source"], r["output_tokens"]) == ("usage", 40), r
        assert r["reasoning_chunks"] == REASONING_WORDS and r["content_chunks"] >= 1, r
        assert r["time_to_first_output_ms"] < r["ttft_ms"] < r["e2e_ms"]
        assert _size_error_ok(r, tolerance), r
    assert doc["endpoint"] == "responses"
    print(f"\n[{SERVER}] responses: " + " ".join(_summary(doc)))


def test_the_messages_endpoint(tmp_path: Path) -> None:
    """`--endpoint messages` (the Anthropic Messages API): the same answer as a thinking
    block's deltas, then a text block's; the usage from `message_start` and
    `message_delta`; the prompt sized as the chat prompt it is templated as; the stop
    reason `max_tokens` a `length` finish."""
    _skip_unless_served("/v1/messages", {"messages": [{"role": "user", "content": "hi"}],
                                         "max_tokens": 2})
    doc, run_dir = _run(tmp_path, "--endpoint", "messages")
    tolerance = 0.1 if SHAPES[SERVER]["counter"] == "tokenize" else 0.5
    for r in doc["request_timings"]:
        assert (r["output_token_source"], r["output_tokens"]) == ("usage", 40), r
        # a busy server may send two tokens in one delta: at most one chunk a word, and
        # the thinking block's <think> and </think> never sent
        assert 1 <= r["reasoning_chunks"] <= REASONING_WORDS and r["content_chunks"] >= 1, r
        assert r["reasoning_chunks"] + r["content_chunks"] <= SHAPES[SERVER]["sent_of_40"], r
        # (a busy server's blocks may come in one read: equal, never out of order)
        assert 0 < r["time_to_first_output_ms"] <= r["ttft_ms"] <= r["e2e_ms"]
        assert _size_error_ok(r, tolerance), r
    records = [x for x in raw_lines(run_dir) if x.get("type") == "request"]
    assert records and all(x["finish_reason"] == "length" for x in records)
    assert doc["endpoint"] == "messages"
    print(f"\n[{SERVER}] messages: " + " ".join(_summary(doc)))


def _skip_unless_served(path: str, body: dict) -> None:
    """Skip the test when the server answers a streamed POST of `body` to `path` 404."""
    u = urllib.parse.urlsplit(URL)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("POST", path, orjson.dumps({"model": MODEL, "stream": True, **body}),
                 {"Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    if status == 404:
        pytest.skip(f"{SERVER} has no {path}")


def _summary(doc: dict) -> list[str]:
    m = doc["metrics"]
    return [f"ttfo_p50={m['time_to_first_output_p50_ms']:.1f}ms",
            f"ttft_p50={m['ttft_p50_ms']:.1f}ms", f"decode_p50={m['decode_tok_s_p50']:.1f}tok/s",
            f"prompt_tokens_p50={m['prompt_tokens_p50']}",
            f"error_max={doc['prompt_calibration']['planned_vs_counted_error_pct_max']:.3f}%"]


def test_without_include_usage(tmp_path: Path) -> None:
    """Servers that send usage only when asked: output tokens fall back to the chunk count
    (flagged "chunks", prompt_tokens null); transformers serve sends usage anyway."""
    doc, _ = _run(tmp_path, usage=False)
    for r in doc["request_timings"]:
        if SHAPES[SERVER]["usage_unasked"]:
            assert r["output_token_source"] == "usage" and r["output_tokens"] == 40
        else:
            assert r["output_token_source"] == "chunks"
            assert r["output_tokens"] == 38  # 40 generated minus the two unsent think tags
            assert r["prompt_tokens"] is None
    if not SHAPES[SERVER]["usage_unasked"]:
        assert doc["metrics"]["content_chunks_s"] is not None


def test_thinking_off(tmp_path: Path) -> None:
    """`thinking_mode = "off"` (chat_template_kwargs.enable_thinking = false): the template
    closes the think block itself, so no reasoning words are sent (at most the server's
    known whitespace delta); with none, the first output is the first content."""
    doc, _ = _run(tmp_path, thinking="off")
    expected = SHAPES[SERVER]["off_reasoning_chunks"]
    for r in doc["request_timings"]:
        assert r["reasoning_chunks"] == expected, r
        assert r["content_chunks"] >= 1
        if expected == 0:
            assert r["ttft_ms"] == r["time_to_first_output_ms"]
        else:
            assert r["time_to_first_output_ms"] < r["ttft_ms"]


def test_prompt_sizes_on_the_real_tokenizer(tmp_path: Path) -> None:
    """`anvil prompts` against the server's own count: ±0.1 % where it tokenizes, ±0.5 %
    with probes; 131k where counting costs no prefill."""
    tokenize = SHAPES[SERVER]["counter"] == "tokenize"
    sizes = "4096,32768,131000" if tokenize else "4096,32768"
    proc = anvil("prompts", "--host", URL, "--model", MODEL, "--tokens", sizes, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"\n[{SERVER}] anvil prompts:\n{proc.stdout}")
    rows = [ln.split() for ln in proc.stdout.splitlines() if re.match(r"\s+\d+\s+\d+", ln)]
    assert len(rows) == len(sizes.split(","))
    for planned, counted, err, _ in rows:
        assert abs(float(err)) <= (0.1 if tokenize else 0.5), (planned, counted, err)


# --- vLLM: anvil's figures against the server's own Prometheus histograms -------------------

# Stated bounds (measured here: e2e gap 2-6 ms, first-output gap 4-12 ms). vLLM's clock
# starts when its engine receives the request (after HTTP parsing, chat template and
# tokenization) and its TTFT ends at the first generated token, `<think>`, which is never
# sent: anvil's first output is the next token, one decode step later.
E2E_OVERHEAD_MS = 10.0
FIRST_OUTPUT_OVERHEAD_MS = 20.0
METRICS = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
           "vllm:request_prompt_tokens", "vllm:request_generation_tokens")


def _scrape() -> dict[str, tuple[float, float]]:
    """name -> (sum, count) over all label sets, from /metrics."""
    u = urllib.parse.urlsplit(URL)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out: dict[str, list[float]] = {m: [0.0, 0.0] for m in METRICS}
    for line in text.splitlines():
        for m in METRICS:
            for i, suffix in enumerate(("_sum", "_count")):
                if line.startswith(m + suffix + "{") or line.startswith(m + suffix + " "):
                    out[m][i] += float(line.rsplit(" ", 1)[1])
    return {m: (v[0], v[1]) for m, v in out.items()}


@pytest.mark.skipif(SERVER != "vllm", reason="only vLLM exposes these histograms")
def test_vllm_own_metrics_agree_with_anvil() -> None:
    """One request at a time through anvil's own client and observer; each histogram's
    `_sum`/`_count` differenced around it. vLLM's TTFT is its first generated token, a
    reasoning token here, so it is compared with anvil's time to first output. anvil's
    times must be >= the server's (they include the network and the server's HTTP layer)
    and within the stated overheads. Token counts are checked against what anvil saw on the
    wire, not against usage (that would compare vLLM with itself): the chunks anvil counted
    are the generated tokens minus the two never-sent think tags, and the prompt is what
    vLLM's /tokenize counts for the same messages."""
    client = ChatClient(Endpoint.parse(URL), None)
    client.connect()
    messages = [{"role": "user", "content": "word " * 600}]
    body = orjson.dumps({**_body(max_tokens=32, usage=True), "messages": messages})
    status, tok = client.post_json("/tokenize", {"model": MODEL, "messages": messages},
                                   absolute=True)
    assert status == 200
    prompt_tokens = tok["count"]
    gaps = []
    try:
        for i in range(6):
            before = _scrape()
            obs = StreamObserver(i, time.perf_counter_ns())
            client.stream_chat(body, obs)
            row = derive_row(obs.finish())
            deadline = time.monotonic() + 10
            after = _scrape()
            while after["vllm:e2e_request_latency_seconds"][1] == \
                    before["vllm:e2e_request_latency_seconds"][1] and time.monotonic() < deadline:
                time.sleep(0.05)
                after = _scrape()
            d = {m: (after[m][0] - before[m][0], after[m][1] - before[m][1]) for m in METRICS}
            assert all(cnt == 1 for _, cnt in d.values()), d
            server_ttft_ms = d["vllm:time_to_first_token_seconds"][0] * 1000
            server_e2e_ms = d["vllm:e2e_request_latency_seconds"][0] * 1000
            gaps.append((row["time_to_first_output_ms"] - server_ttft_ms,
                         row["e2e_ms"] - server_e2e_ms))
            assert server_ttft_ms <= row["time_to_first_output_ms"] <= \
                server_ttft_ms + FIRST_OUTPUT_OVERHEAD_MS, (row, server_ttft_ms)
            assert server_e2e_ms <= row["e2e_ms"] <= server_e2e_ms + E2E_OVERHEAD_MS, \
                (row, server_e2e_ms)
            assert d["vllm:request_prompt_tokens"][0] == prompt_tokens == row["prompt_tokens"]
            generated = d["vllm:request_generation_tokens"][0]
            assert generated == 32
            assert row["reasoning_chunks"] + row["content_chunks"] == generated - 2
    finally:
        client.close()
    print(f"\n[vllm] anvil - server (ttfo, e2e) ms per request: "
          f"{[(round(a, 2), round(b, 2)) for a, b in gaps]}")


@pytest.mark.skipif(SERVER not in ("vllm", "llama"), reason="needs the server's /metrics")
@pytest.mark.parametrize("users", [1, 4])
def test_server_block_from_the_real_server(tmp_path: Path, users: int) -> None:
    """The run's `server` block against the real server: its identity discovered (engine,
    version, context limit), its metrics scraped over the window; on vLLM the client's
    first chunk and end to end each sit 0-25 ms above the server's own means (the network
    and the server's HTTP layer lie between), at concurrency 1 and 4."""
    doc, run_dir = _run(tmp_path, users=users, requests=4 * users)
    s = doc["server"]
    print(f"\n[{SERVER}] users {users}: server block: engine {s['engine']} version "
          f"{s['version']} max_model_len {s['max_model_len']} samples {s['samples']} "
          f"requests {s['requests']} client_minus_server_ms {s['client_minus_server_ms']} "
          f"ttft {s['ttft_ms_mean']} e2e {s['e2e_ms_mean']} queue {s['queue_time_ms_mean']} "
          f"null_reasons {s['null_reasons']}")
    assert (run_dir / "server_metrics.jsonl").is_file()
    assert s["engine"] == {"vllm": "vllm", "llama": "llamacpp"}[SERVER]
    assert s["version"] and isinstance(s["max_model_len"], int) and s["max_model_len"] > 0
    assert s["samples"] >= 2 and "counters" not in s["null_reasons"], s["null_reasons"]
    assert s["requests_running"] is not None
    if SERVER == "vllm":
        assert s["requests"] == doc["completed"]
        diff = s["client_minus_server_ms"]
        assert 0 <= diff["first_chunk_vs_ttft"] <= 25, diff
        assert 0 <= diff["e2e"] <= 25, diff
        assert s["prompt_tokens_mean"] == pytest.approx(
            sum(r["prompt_tokens"] for r in doc["request_timings"]) / doc["completed"])


VISION_URL = os.environ.get("ANVIL_REAL_VISION_URL", "")
VISION_SCENARIO = """measurement_protocol = "media"
max_context_tokens = 8192
warmup_requests = 0
max_tokens = 16
context_tokens = 256
context_seed = 7
[request]
include_usage = true
[[request_class]]
name = "text"
weight = 1
[[request_class]]
name = "vision"
weight = 1
images = 2
image_sizes = ["224x224", "448x336"]
"""


def _qwen2vl_image_tokens(w: int, h: int) -> int:
    """Qwen2-VL's count for an image whose sides are multiples of 28 within its pixel bounds
    (smart_resize keeps it): one token per 28x28 (2x2 merged 14-pixel patches), plus
    <|vision_start|> and <|vision_end|>."""
    return (w // 28) * (h // 28) + 2


@pytest.mark.skipif(SERVER != "vllm" or not VISION_URL,
                    reason="needs vLLM serving the tiny Qwen2-VL (setup_vllm_vision.sh)")
def test_images_as_load_on_a_real_vision_tokenizer(tmp_path: Path) -> None:
    """Images as load through vLLM's real Qwen2-VL pipeline: vLLM counts image tokens only
    inside usage.prompt_tokens, so a vision row's prompt_tokens minus the text class's is its
    two images' tokens by the model's own rule, one of the three pairs of the two sizes."""
    sc = write_scenario(tmp_path / "v.toml", VISION_SCENARIO)
    proc = anvil("run", str(sc), "--host", VISION_URL, "--requests", "12", "-u", "2",
                 "--results-dir", str(tmp_path / "res"), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    assert anvil("verify", str(path)).returncode == 0
    doc = load_json(path)
    assert (doc["completed"], doc["failed"]) == (12, 0), doc["failures"]
    rows = doc["request_timings"]
    text = [r for r in rows if r["media_images"] is None]
    vision = [r for r in rows if r["media_images"] is not None]
    assert text and vision and all(r["media_images"] == 2 for r in vision)
    assert all(r["media_image_tokens"] is None for r in rows)  # vLLM: inside prompt_tokens
    (text_tokens,) = {r["prompt_tokens"] for r in text}  # one planned prompt, one count
    one = [_qwen2vl_image_tokens(224, 224), _qwen2vl_image_tokens(448, 336)]  # 66, 194
    pairs = {one[0] * 2, one[0] + one[1], one[1] * 2}
    assert {r["prompt_tokens"] - text_tokens for r in vision} <= pairs, vision
    # base64 PNG noise: ~4/3 of 3 bytes a pixel; at least the smaller pair's pixels
    assert min(r["request_bytes"] for r in vision) > 4 * 224 * 224 * 2
    classes = {c["name"]: c for c in doc["mix"]["classes"]}
    assert classes["vision"]["media_images"] == 2 * len(vision)
    print(f"\n[vllm vision] text prompt {text_tokens}; vision prompt - text "
          f"{sorted(r['prompt_tokens'] - text_tokens for r in vision)} (pairs {sorted(pairs)})\n"
          + "\n".join(summary_lines(doc)))
