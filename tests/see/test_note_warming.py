"""A new scene note while the user is still speaking warms the reply's prompt with it, so the model has read the
camera message before the turn's silence and the reply evaluates only the question after it."""

from __future__ import annotations

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.see.scene import SceneNote
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.core import vocabulary as v
from bargein.session.realtime_session import RealtimeSession
from bargein.values import ChatMessage
from tests.see.test_note_age import frame_of
from tests.session.test_prompt_warming import PrefillingModel


def note(text: str, at_ms: float) -> SceneNote:
    return SceneNote((text,), 0, "even light", (), None, at_ms)


def warm_turn(session: RealtimeSession, text: str) -> None:
    """The core's ``WarmPrompt`` for a partial of the turn being spoken, seen and carried out as the session does."""
    action = v.WarmPrompt("item_1", text)
    for observer in session.observers:
        observer.on_action(action)
    session.executor.run(action)


async def test_a_note_changed_mid_turn_warms_the_prompt_the_reply_then_extends() -> None:
    llm = PrefillingModel()
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(),
                                      see=Seeing(VisionSettings("notes"))))
    eyes, frame = session.eyes, frame_of(1, 0.0)
    eyes._noted(note("EXIT 12", 0.0), frame, 1.0)
    assert llm.prefilled == []  # no turn is being spoken
    eyes.on_action(v.SpeechStarted("item_1", 0.0))
    warm_turn(session, "which exit")
    assert len(llm.prefilled) == 1 and "EXIT 12" in llm.prefilled[0][0][-2].content
    eyes._noted(note("EXIT 12", 500.0), frame, 2.0)  # the same message again (the same scene read): nothing
    assert len(llm.prefilled) == 1
    eyes._noted(note("GATE 7", 1000.0), frame, 3.0)  # the camera turned to a new sign mid-turn
    assert len(llm.prefilled) == 2
    warmed = llm.prefilled[-1][0]
    assert warmed[-1] == ChatMessage("user", "which exit")  # the words the core warmed the turn with
    eyes.on_action(v.SilenceBegan("item_1", 2000.0))
    eyes._noted(note("PLATFORM 4", 2500.0), frame, 4.0)  # after the silence the turn's note is pinned
    assert len(llm.prefilled) == 2
    asked = [*session.conversation.chat_messages(session.config.instructions),
             ChatMessage("user", "which exit is it?")]
    answered = eyes.prompt("resp_1", asked)
    assert "GATE 7" in answered[-2].content
    assert answered[:-1] == warmed[:-1]  # the reply only adds its question to what was warmed
    await session.close()


async def test_no_note_warms_a_turn_the_core_did_not_warm() -> None:
    llm = PrefillingModel()
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(),
                                      see=Seeing(VisionSettings("notes"))))
    eyes, frame = session.eyes, frame_of(1, 0.0)
    eyes.on_action(v.SpeechStarted("item_1", 0.0))  # no partial warmed it yet (or a reply is still playing)
    eyes._noted(note("EXIT 12", 0.0), frame, 1.0)
    eyes._noted(note("GATE 7", 500.0), frame, 2.0)
    assert llm.prefilled == []
    await session.close()
