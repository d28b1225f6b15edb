"""The simulator's media rule (`sim/media.py`): an image's patches, a clip's 40 ms tokens,
in prompt_tokens and prompt_tokens_details; without --media, refused."""

from __future__ import annotations

import pytest

from anvil_metrics.load.media import MediaPlan, MediaPool
from anvil_metrics.load.mix import uniform
from anvil_metrics.sim.chatrequest import RequestError, parse_chat_request, plan_output, usage_of
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.media import image_tokens


def _body(plan: MediaPlan) -> dict:
    parts = MediaPool(plan, 1, 0, 1, uniform).parts(0)
    content = [{"type": "text", "text": "hi there"}]
    content += [{"type": "image_url", "image_url": {"url": p.decode()}}
                for p in parts[:plan.images]]
    content += [{"type": "input_audio", "input_audio": {"data": p.decode(), "format": "wav"}}
                for p in parts[plan.images:]]
    return {"model": "sim-model", "max_tokens": 4, "messages": [{"role": "user",
                                                                 "content": content}]}


def test_images_and_clips_are_counted_by_the_stated_rule() -> None:
    assert image_tokens(56, 84) == 2 * 3 + 2 and image_tokens(57, 1) == 3 * 1 + 2
    plan = MediaPlan(images=2, image_sizes=((56, 84),), audio_clips=1, audio_seconds=0.5,
                     audio_sample_rate=8000)
    cfg = SimConfig(media=True)
    text = parse_chat_request(_body(MediaPlan(images=0, audio_clips=0)), cfg).prompt_tokens
    r = parse_chat_request(_body(plan), cfg)
    assert r.prompt_tokens == text + 2 * 8 + 13
    details = usage_of(r, plan_output(r, cfg))["prompt_tokens_details"]
    assert details == {"image_tokens": 16, "audio_tokens": 13}


def test_without_media_an_image_is_refused() -> None:
    with pytest.raises(RequestError) as e:
        parse_chat_request(_body(MediaPlan(images=1, image_sizes=((8, 8),))), SimConfig())
    assert e.value.status == 400
