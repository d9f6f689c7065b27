"""The scene note's age: counted from the last frame that still showed its scene (a near-duplicate of the newest
scene keeps its note young), fixed when the user's turn is committed and reported once by the reply to it."""

from __future__ import annotations

import asyncio

from bargein.see.frames import Frame, decode_frame
from bargein.see.scene_pool import ScenePool
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.core import vocabulary as v
from bargein.session.eyes import SessionEyes
from bargein.values import ChatMessage
from tests.see.test_scene import EmptyDetectors
from tests.support.pictures import encode, scene


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def frame_of(seed: int, at_ms: float) -> Frame:
    return decode_frame(encode(scene(seed), "JPEG", quality=90), at_ms)


async def noted(eyes: SessionEyes, frame: Frame) -> None:
    before = eyes.note
    eyes.offer(frame)
    for _ in range(200):
        await asyncio.sleep(0.005)
        if eyes.note is not before:
            return
    raise AssertionError("no note came")


async def test_a_near_duplicate_keeps_the_note_young_and_a_new_scene_does_not() -> None:
    clock, progress = Clock(), []
    pool = ScenePool(EmptyDetectors)
    eyes = SessionEyes(Seeing(VisionSettings("notes"), pool), clock=clock,
                       progress=lambda *report: progress.append(report))
    await noted(eyes, frame_of(3, 0.0))
    clock.now += 5.0
    assert eyes.note_age_s() == 5.0
    assert eyes.offer(frame_of(3, 5000.0)) == "duplicate"  # the camera still shows the noted scene
    assert eyes.note_age_s() == 0.0
    clock.now += 1.5
    eyes.on_action(v.CommitBuffer("item_1", None, 6500.0))
    eyes.offer(frame_of(9, 6500.0))  # a new scene: until its note comes, the old one ages from its last showing
    clock.now += 2.0
    assert eyes.note_age_s() == 3.5
    eyes.prompt("resp_1", [ChatMessage("user", "what does it say?")])
    eyes.prompt("resp_2", [ChatMessage("user", "and now?")])
    assert progress == [("resp_1", "scene_note_age_ms", 1500)]  # the age at the commit, reported once
    await pool.aclose()


async def test_a_late_note_of_a_scene_still_in_view_is_as_young_as_its_last_duplicate() -> None:
    clock = Clock()
    pool = ScenePool(EmptyDetectors)
    eyes = SessionEyes(Seeing(VisionSettings("notes"), pool), clock=clock)
    eyes.offer(frame_of(4, 0.0))
    clock.now += 1.0
    eyes.offer(frame_of(4, 1000.0))  # a duplicate arrives while the first frame is still being read
    for _ in range(200):
        await asyncio.sleep(0.005)
        if eyes.note is not None:
            break
    assert eyes.note_age_s() == 0.0
    await pool.aclose()


async def test_the_note_at_the_silence_is_the_one_the_turns_prompts_quote() -> None:
    from bargein.engines.base import Engines
    from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
    from bargein.see.scene import SceneNote
    from bargein.session.realtime_session import RealtimeSession

    engines = Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), FakeSynthesizer(),
                      see=Seeing(VisionSettings("notes")))
    session = RealtimeSession(engines)
    eyes = session.eyes
    eyes.note, eyes.note_seen_s = SceneNote(("EXIT 12",), 0, "even light", (), None, 0.0), eyes._clock()
    asked = [ChatMessage("system", "be brief"), ChatMessage("user", "which exit is it?")]
    eyes.on_action(v.SilenceBegan("item_1", 2000.0))
    guessed = session.replies.with_memory(asked)  # the speculative reply, at the guess
    eyes.note = SceneNote(("GATE 7",), 0, "even light", (), None, 2500.0)  # a newer note before the reply
    answered = eyes.prompt("resp_1", asked)
    assert answered == guessed and "EXIT 12" in answered[-2].content  # so the reply adopts the speculative one
    assert "GATE 7" in eyes.context(asked)[-2].content  # the next turn reads the newest
    eyes.on_action(v.SilenceBegan("item_2", 9000.0))
    eyes.on_action(v.SpeechResumed("item_2"))  # the turn went on: nothing stays pinned
    eyes.note = SceneNote(("PLATFORM 4",), 0, "even light", (), None, 9500.0)
    assert "PLATFORM 4" in eyes.context(asked)[-2].content


def test_an_earlier_question_keeps_the_note_it_was_asked_with() -> None:
    from bargein.see.scene import SceneNote

    eyes = SessionEyes(Seeing(VisionSettings("notes")))
    eyes.note, eyes.note_seen_s = SceneNote(("EXIT 12",), 0, "even light", (), None, 0.0), eyes._clock()
    first = [ChatMessage("system", "be brief"), ChatMessage("user", "which exit is it?")]
    asked_first = eyes.prompt("resp_1", first)
    eyes.note = SceneNote(("GATE 7",), 0, "even light", (), None, 5000.0)
    second = [*first, ChatMessage("assistant", "Exit twelve."), ChatMessage("user", "and now?")]
    asked_second = eyes.prompt("resp_2", second)
    assert asked_second[:len(asked_first)] == asked_first  # the model's cache holds the whole first turn
    assert [m.role for m in asked_second] == ["system", "system", "system", "user", "assistant", "system", "user"]
    assert "GATE 7" in asked_second[5].content
