"""The rows' media fields (`mediafields.py`): each one a catalogue row of generation 10, and
none sorting before `cached_tokens` (a row's text opens with it)."""

from anvil_metrics.catalog import BY_NAME
from anvil_metrics.mediafields import MEDIA_ROWS


def test_each_media_field_is_a_nullable_count_of_generation_10() -> None:
    names = [r["name"] for r in MEDIA_ROWS]
    assert names == ["request_bytes", "media_images", "media_audio_clips",
                     "media_image_tokens", "media_audio_tokens"]
    for n in names:
        f = BY_NAME[n]
        assert (f.kind, f.nullable, f.presence, f.since) == ("count", True, "added", 10)
        assert n > "cached_tokens"
