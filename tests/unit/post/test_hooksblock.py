"""The `hooks` block: the raw hook lines in order, each stamp on the run's clock."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec

from anvil_metrics.post import hooksblock
from anvil_metrics.post.blockkit import ABSENT


def line(t_ns: int, ok: bool, step: int | None) -> dict:
    return {"type": "hook", "name": "reset_prefix_cache", "target": "http://h/r",
            "status": 200 if ok else 500, "answer": "x", "t_ns": t_ns, "ok": ok,
            "optional": not ok, "step": step}


def test_the_block_is_each_call_seconds_after_the_header_or_absent() -> None:
    raw = SimpleNamespace(hooks=(line(1_500_000_000, True, None), line(3_250_000_000, False, 1)))
    block = hooksblock.build(SimpleNamespace(raw=raw, anchor_ns=1_000_000_000))  # type: ignore[arg-type]
    assert [(h["at_s"], h["step"], h["ok"]) for h in block] == [(0.5, None, True),
                                                                 (2.25, 1, False)]
    msgspec.convert(block, list[hooksblock.HookCall])  # the block's own type accepts it
    assert "type" not in block[0] and "t_ns" not in block[0]
    assert hooksblock.build(SimpleNamespace(raw=SimpleNamespace(hooks=()),  # type: ignore[arg-type]
                                            anchor_ns=0)) is ABSENT
    assert hooksblock.summary_lines({"hooks": block}) == ["hooks: 2 called, 1 failed"]
    assert hooksblock.summary_lines({}) == []
