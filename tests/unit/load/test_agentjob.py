"""The agent job model's shared rules: join at the first later parent turn at or after a
sub-agent's end, else background; a tool round trip only after a tool_use answer."""

from __future__ import annotations

from anvil_metrics.load.agentjob import Job, Session, Turn, relate, tool_turn


def test_join_is_the_first_later_turn_at_or_after_the_end() -> None:
    parent = [Turn(t, 10, 1) for t in (0.0, 1.0, 2.0, 3.0)]
    assert relate(parent, 0, 0.5, 1500) == 2  # ends at 2.0: turn 2 starts at it
    assert relate(parent, 2, 0.5, 100) == 3  # only later turns than the spawn's
    assert relate(parent, 0, 0.5, 9000) is None and relate(parent, 0, 0.5, None) is None
    assert relate(parent, None, 0.0, 0) == 0


def test_a_tool_round_trip_needs_a_tool_use_answer_before_it() -> None:
    asked = Turn(0.0, 10, 1, stop="tool_use")
    assert tool_turn(asked, "tool_result", 250.0) == (250.0, 0.0)
    assert tool_turn(asked, "tool_result", None) == (None, 0.0)
    assert tool_turn(Turn(0.0, 10, 1, stop="end_turn"), "tool_result", 5.0) == (0.0, 5.0)
    assert tool_turn(None, "text", None) == (0.0, None)


def test_a_job_names_its_root_and_children() -> None:
    job = Job("j", 64, (Session("r", (Turn(0, 9, 1),), tool_tokens=3),
                        Session("c", (Turn(1, 9, 1),), parent_id="r", depth=1,
                                spawn_after_turn=0, join_before_turn=None)))
    assert job.root.id == "r" and job.tool_tokens == 3 and job.requests == 2
    assert [s.id for s in job.children("r")] == ["c"] and not job.sessions[1].joined
