"""Images and audio as load (`load/media.py`): the keys' checks, the draws' seeds and the
pool's bound; a request body's media parts (`load/mixbodies.py`)."""

from __future__ import annotations

import base64
import io
import wave

import orjson
import pytest

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load import media
from anvil_metrics.load.media import MediaPlan, MediaPool
from anvil_metrics.load.mix import parse_media, parse_mix, uniform


def _err(**keys) -> str:
    with pytest.raises(ScenarioError) as e:
        parse_mix([{"name": "v", "weight": 1, **keys}], None, 0, "s.toml")
    return str(e.value)


@pytest.mark.parametrize(("keys", "named"), [
    ({"images": -1}, "request_class[0].images = -1"),
    ({"images": 65}, "request_class[0].images = 65"),
    ({"images": 1, "image_sizes": ["512"]}, "request_class[0].image_sizes = '512'"),
    ({"images": 1, "image_sizes": ["0x5"]}, "request_class[0].image_sizes = '0x5'"),
    ({"images": 1, "image_sizes": []}, "request_class[0].image_sizes = []"),
    ({"images": 1, "image_sizes": ["9000x10"]}, "request_class[0].image_sizes = '9000x10'"),
    ({"images": 1, "image_format": "gif"}, "request_class[0].image_format = 'gif'"),
    ({"images": 1, "image_reuse": 1.5}, "request_class[0].image_reuse = 1.5"),
    ({"image_sizes": ["8x8"]}, "request_class[0].image_sizes"),
    ({"audio_clips": 1, "audio_seconds": 0}, "request_class[0].audio_seconds = 0"),
    ({"audio_clips": 1, "audio_sample_rate": 100}, "request_class[0].audio_sample_rate = 100"),
    ({"audio_seconds": 2}, "request_class[0].audio_seconds = 2"),
    ({"images": 1, "dataset": "d.jsonl"}, "request_class[0].dataset"),
    ({"imagez": 1}, "request_class[0].imagez = 1"),
])
def test_a_bad_media_key_is_one_line_naming_it(keys: dict, named: str) -> None:
    msg = _err(**keys)
    assert msg.startswith("s.toml: " + named) and "\n" not in msg and "use " in msg


def test_the_plan_goes_back_to_its_table() -> None:
    t = {"name": "v", "weight": 1.0, "images": 2, "image_sizes": ["8x8", "16x4"],
         "image_format": "jpeg", "image_reuse": 0.5, "audio_clips": 1, "audio_seconds": 0.25,
         "audio_sample_rate": 8000}
    mix = parse_mix([t], None, 3, None)
    assert mix is not None and mix.to_table()["request_class"] == [t]
    assert parse_media("x", {}, None) is None


def test_draws_are_seeded_unique_per_slot_and_sized_from_the_list() -> None:
    plan = MediaPlan(images=2, image_sizes=((8, 8), (16, 4)), audio_clips=1,
                     audio_seconds=0.1, audio_sample_rate=8000)
    a, b = MediaPool(plan, 7, 0, 6, uniform), MediaPool(plan, 7, 0, 6, uniform)
    assert a.slots == 6 and all(a.parts(k) == b.parts(k) for k in range(6))
    assert a.parts(1) == a.parts(7)  # slot k mod n
    images = [p for k in range(6) for p in a.parts(k)[:2]]
    assert len(set(images)) == len(images)  # image_reuse 0: every image its own
    from PIL import Image

    sizes = {Image.open(io.BytesIO(base64.b64decode(p.split(b",", 1)[1]))).size
             for p in images}
    assert sizes == {(8, 8), (16, 4)}
    with wave.open(io.BytesIO(base64.b64decode(a.parts(0)[2]))) as w:
        assert (w.getnframes(), w.getframerate(), w.getsampwidth()) == (800, 8000, 2)
    assert MediaPool(plan, 8, 0, 6, uniform).parts(0) != a.parts(0)  # another seed, other media


def test_reuse_shares_one_image_and_the_pool_is_bounded(monkeypatch) -> None:
    every = MediaPool(MediaPlan(images=3, image_sizes=((8, 8),), image_reuse=1.0), 1, 0, 4,
                      uniform)
    assert len({p for k in range(4) for p in every.parts(k)}) == 1
    monkeypatch.setattr(media, "POOL_BYTES", 10_000)
    big = MediaPool(MediaPlan(images=1, image_sizes=((32, 32),)), 1, 0, None, uniform)
    assert big.slots == 10_000 // (4 * 3 * 32 * 32 // 3 + 1) and big.bytes <= 10_000


def test_a_media_body_sends_its_parts_after_the_text() -> None:
    from anvil_metrics.load.body import BodyBuilder
    from anvil_metrics.load.scenario import Scenario
    from anvil_metrics.prep.prompts import Calibration, PromptFactory

    sc = Scenario(measurement_protocol="p", max_tokens=8)
    pool = MediaPool(MediaPlan(images=1, image_sizes=((8, 8),), audio_clips=1,
                               audio_seconds=0.05, audio_sample_rate=8000), 0, 0, 3, uniform)
    b = BodyBuilder(sc, "m", PromptFactory(Calibration("probe", 20.0, 1.7), seed=3,
                                                        run_nonce="ab12cd34"), media=pool)
    body = orjson.loads(b.build(64, 2))
    content = body["messages"][-1]["content"]
    assert [p["type"] for p in content] == ["text", "image_url", "input_audio"]
    assert content[1]["image_url"]["url"].encode() == pool.parts(2)[0]
    assert content[2]["input_audio"] == {"data": pool.parts(2)[1].decode(), "format": "wav"}
