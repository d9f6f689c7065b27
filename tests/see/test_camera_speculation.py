"""A spoken turn with the camera on: the reply adopts the answer started in the turn's silence, whose prompt quoted
the note pinned at that silence, though a newer note came before the commit; the turn's prompt was warmed with the
same camera message from the speech's start."""

from __future__ import annotations

import numpy as np

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.see.scene import SceneNote
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.core import vocabulary as v
from tests.see.test_note_age import frame_of
from tests.session.test_prompt_warming import PrefillingModel
from tests.support.session_harness import Harness
from tests.support.tones import quiet, stream, tone


def note(text: str, at_ms: float) -> SceneNote:
    return SceneNote((text,), 0, "even light", (), "little motion", at_ms)


async def test_a_camera_on_turn_adopts_its_head_start_though_a_newer_note_came_after_the_silence() -> None:
    llm = PrefillingModel()
    h = Harness(Engines(FakeVad(), FakeRecognizer(("how far is the exit",)), llm, FakeSynthesizer(),
                        see=Seeing(VisionSettings("notes"))))
    h.session.eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), 0.0)
    await stream(h, np.concatenate([quiet(0.3), tone(0.8), quiet(0.3)]))
    counts = h.session.speculation
    assert counts.llm_started == 1, "the head start began in the silence"
    h.session.eyes._noted(note("GATE 7", 1500.0), frame_of(2, 1500.0), 1.0)  # the camera moved on meanwhile
    await stream(h, quiet(1.2))
    await h.drain(until="response.done")
    assert counts.llm_used == 1 and counts.llm_discarded == 0, "the reply adopted the head start"
    asked = llm.seen[-1]
    assert "EXIT 12" in asked[-2].content and asked[-1].content == "how far is the exit"
    at_start = llm.prefilled[0][0]  # the first note's warm, before any words
    assert at_start[-1].content == "" and at_start[:-1] == asked[:-1]
    await h.session.close()


async def test_a_completed_reply_warms_the_next_turns_prompt_with_the_camera_message_before_the_user_speaks() -> None:
    """The next turn's prompt is known up to its words once a reply completes: the message (some 70 tokens) is read
    while the reply plays, not in the next turn's few seconds of speech; a note that comes between turns is warmed
    when the turn's speech starts, and the next turn's reply adds only its question to that warm."""
    llm = PrefillingModel()
    h = Harness(Engines(FakeVad(), FakeRecognizer(("how far is the exit",)), llm, FakeSynthesizer(),
                        see=Seeing(VisionSettings("notes"))))
    h.session.eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), 0.0)
    await stream(h, np.concatenate([quiet(0.3), tone(0.8), quiet(1.5)]))
    await h.drain(until="response.done")
    first_reply = llm.seen[-1]
    ahead = llm.prefilled[-1][0]  # warmed when the reply completed
    assert ahead[-1].content == "" and ahead[-2].content == first_reply[-2].content  # no words yet, the same note
    assert ahead[len(first_reply) - 1].role == "user" and ahead[len(first_reply)].role == "assistant"
    warms = len(llm.prefilled)
    h.session.eyes._noted(note("GATE 7", 3000.0), frame_of(2, 3000.0), 3.0)  # between turns: warms nothing yet
    assert len(llm.prefilled) == warms
    await stream(h, np.concatenate([tone(0.8), quiet(1.5)]))
    await h.drain(until="response.done")
    at_start = llm.prefilled[warms][0]  # the next turn's speech began: the new note's message, after the same history
    assert "GATE 7" in at_start[-2].content and at_start[:-2] == ahead[:-2]
    asked = llm.seen[-1]
    assert "GATE 7" in asked[-2].content and asked[:-1] == at_start[:-1]
    await h.session.close()


async def test_a_cancelled_reply_or_no_note_warms_nothing_between_turns() -> None:
    llm = PrefillingModel()
    h = Harness(Engines(FakeVad(), FakeRecognizer(("how far is the exit",)), llm, FakeSynthesizer(),
                        see=Seeing(VisionSettings("notes"))))
    await stream(h, np.concatenate([quiet(0.3), tone(0.8), quiet(1.5)]))
    await h.drain(until="response.done")
    assert llm.prefilled == [] or all(m[-1].content for m, _ in llm.prefilled)  # no note: no message to warm
    h.session.eyes.on_action(v.StartReply("resp_x", "turn_detected", None))
    h.session.eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), 0.0)  # the first note, over a live reply
    h.session.eyes.on_action(v.CancelReply("resp_x", "turn_detected"))
    h.session.eyes.on_reply_closed("resp_x", "cancelled", 0.0, 0.0)
    h.session.eyes._noted(note("GATE 7", 500.0), frame_of(2, 500.0), 0.5)
    h.session.eyes.on_reply_closed("resp_y", "cancelled", 0.0, 0.0)
    assert all(m[-1].content for m, _ in llm.prefilled)  # no warm of the message without words
    await h.session.close()
