"""The machine's phase table covers every combination of its sub-states, and reads as the phases always did."""

from __future__ import annotations

import itertools
from typing import get_args

from bargein.session import core as dx
from bargein.session.core.machine import phase_of
from bargein.session.core.turn_records import ReplyStage


def test_every_combination_of_the_sub_states_has_aphase_of() -> None:
    for speaking, stage, owed in itertools.product((True, False), get_args(ReplyStage), (True, False)):
        phase_of(speaking, stage, owed)


def test_the_user_speaking_wins_and_a_tool_wait_shows_only_with_no_reply() -> None:
    assert {phase_of(True, stage, owed) for stage in get_args(ReplyStage) for owed in (True, False)} == {
        dx.Phase.USER_SPEAKING}
    assert phase_of(False, "none", True) is dx.Phase.AWAITING_TOOL
    assert phase_of(False, "none", False) is dx.Phase.LISTENING
    assert phase_of(False, "thinking", True) is dx.Phase.THINKING
    assert phase_of(False, "speaking", True) is dx.Phase.AGENT_SPEAKING
    assert phase_of(False, "paused", True) is dx.Phase.PAUSED
