"""The rows' fields of images and audio as load (`load/media.py`): name, unit, source and
words, as the keyword arguments of the `RowField`s `catalog.ROW` makes of them (generation 10:
counts, nullable, absent from older files).

Why apart from the catalogue: it is at its 500 lines. "media_": a row's text opens with
`cached_tokens`, the first field by name, so no field may sort before it ("audio_…" would).
"""

from typing import Any

_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("request_bytes", "B", "extra.request_bytes", "the request body's bytes as sent (null "
     "outside a request mix)"),
    *((f"media_{k}", "", f"extra.{k}", f"the {w} the request carried (null outside a "
       "request class with media)") for k, w in (("images", "images"),
                                                 ("audio_clips", "audio clips"))),
    *((f"media_{k}_tokens", "tok", f"usage.prompt_tokens_details.{k}_tokens", f"the prompt's "
       f"{k} tokens as the server reported them apart (inside prompt_tokens too; null where "
       "not reported: vLLM does not split them)") for k in ("image", "audio")),
)
MEDIA_ROWS: tuple[dict[str, Any], ...] = tuple(
    {"name": name, "unit": unit, "kind": "count", "nullable": True, "description": words,
     "presence": "added", "since": 10, "source": source} for name, unit, source, words in _ROWS)
