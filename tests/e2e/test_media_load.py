"""Issue 51 item 2's proof: images and audio clips as load, against the simulator's truth.

The simulator (`--media`) counts each image ceil(w/28)·ceil(h/28) + 2 tokens and each clip
one token per 40 ms (`sim/media.py`), reports them in usage.prompt_tokens_details and logs
per request (`--log-requests`) the body's bytes and the media it read. A run's rows must
carry exactly those figures: each row's (request_bytes, media tokens, prompt_tokens) is one
log line's, as multisets (the log does not know request indices); warm-ups are off so every
logged request is a row. Small images and short clips keep each run about a second.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from conftest import anvil
from simfork import start_simulator

pytestmark = pytest.mark.e2e

N = 12
BASE = """measurement_protocol = "media"
max_context_tokens = 4096
requests = {n}
concurrency = 3
warmup_requests = 0
max_tokens = 4
context_tokens = 64
context_seed = 5
[request]
include_usage = true
[[request_class]]
name = "text"
weight = 1
[[request_class]]
name = "media"
weight = 2
{media}
"""


def run_media(tmp: Path, media: str) -> tuple[dict, list[dict]]:
    log = tmp / "sim.jsonl"
    scenario = tmp / "media.toml"
    scenario.write_text(BASE.format(n=N, media=media))
    with start_simulator(["--interval-ms", "1", "--media", "--log-requests", str(log)]) as sim:
        proc = anvil("run", str(scenario), "-H", sim.url, "--no-server-metrics",
                     "--results-dir", str(tmp / "res"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (bench,) = Path(tmp / "res").glob("benchmark-*/benchmark.json")
    checked = anvil("verify", str(bench))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    return orjson.loads(bench.read_bytes()), [x for x in lines if "t_ns" in x]


def _truth(lines: list[dict], kind: str) -> Counter:
    """(body bytes, media tokens) of each logged request: a text request's media tokens are
    0 (the simulator with --media reports them in every usage)."""
    return Counter((x["body_bytes"], x.get("media", {}).get(kind, 0)) for x in lines)


def test_images_of_two_sizes_carry_the_servers_tokens_and_bytes(tmp_path: Path) -> None:
    doc, lines = run_media(tmp_path, 'images = 2\nimage_sizes = ["56x84", "100x30"]')
    rows = doc["request_timings"]
    assert len(rows) == len(lines) == N and not doc.get("failures")
    media_rows = [r for r in rows if r["media_images"] is not None]
    assert media_rows and all(r["media_images"] == 2 for r in media_rows)
    # the rule's two sizes: 2·3+2 = 8 and 4·2+2 = 10 tokens an image, both drawn
    sizes = {tuple(i[:2]) for x in lines for i in x.get("media", {}).get("images", [])}
    assert sizes == {(56, 84), (100, 30)}
    assert {t for x in lines if "media" in x for t in (x["media"]["images"][0][2],
                                                         x["media"]["images"][1][2])} <= {8, 10}
    got = Counter((r["request_bytes"], r["media_image_tokens"]) for r in rows)
    assert got == _truth(lines, "image_tokens")
    # the mix block's media figures, per class, from the same truth
    media = doc["mix"]["classes"][1]
    logged = [x["media"] for x in lines if "media" in x]
    assert media["media_images"] == sum(len(m["images"]) for m in logged)
    assert media["media_image_tokens_mean"] == pytest.approx(
        sum(m["image_tokens"] for m in logged) / len(logged), rel=1e-12)
    assert doc["mix"]["classes"][0]["media_images"] is None
    # the sizing error is the text's: a media row's prompt_tokens hold its images' tokens
    # (the simulator counts them there, as vLLM does), which no plan holds
    text_rows = [r for r in rows if r["media_images"] is None]
    assert doc["prompt_calibration"]["planned_vs_counted_error_pct_max"] == pytest.approx(max(
        abs(r["prompt_tokens"] - r["planned_context_tokens"]) / r["planned_context_tokens"]
        * 100 for r in text_rows), rel=1e-12)
    # a media class's rows count its clips (0), the text class's have no media counts
    assert all(r["media_audio_clips"] == (None if r["media_images"] is None else 0)
               for r in rows)


def test_audio_clips_carry_the_servers_tokens_and_bytes(tmp_path: Path) -> None:
    doc, lines = run_media(tmp_path, "audio_clips = 1\naudio_seconds = 0.5\n"
                                     "audio_sample_rate = 8000")
    rows = doc["request_timings"]
    assert len(rows) == len(lines) == N and not doc.get("failures")
    got = Counter((r["request_bytes"], r["media_audio_tokens"]) for r in rows)
    assert got == _truth(lines, "audio_tokens")
    assert {x["media"]["audio_tokens"] for x in lines if "media" in x} == {13}  # 500 ms / 40
