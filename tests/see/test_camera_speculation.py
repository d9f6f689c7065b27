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
    at_start = llm.prefilled[0][0]  # the warm when the speech began, before any words
    assert at_start[-1].content == "" and at_start[:-1] == asked[:-1]
    await h.session.close()
