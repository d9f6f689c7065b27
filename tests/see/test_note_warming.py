"""The camera message is warmed into the model's prompt cache as the session's first note comes and at a turn's start
(where it changed since the last warm), never because a later scene note came while the user speaks; the core's own
warm reads the newest message."""

from __future__ import annotations

import json

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.see.scene import SceneNote
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.core import vocabulary as v
from bargein.session.eyes import CAMERA_GUIDANCE, GUIDANCE, SessionEyes, camera_message
from bargein.session.realtime_session import RealtimeSession
from bargein.values import ChatMessage
from tests.see.test_note_age import frame_of
from tests.session.test_prompt_warming import PrefillingModel


def note(text: str, at_ms: float) -> SceneNote:
    return SceneNote((text,), 0, "even light", (), None, at_ms)


def shared_start(*texts: str) -> str:
    """The longest start every one of ``texts`` has."""
    end = next((i for i, chars in enumerate(zip(*texts, strict=False)) if len(set(chars)) > 1), min(map(len, texts)))
    return texts[0][:end]


def warm_turn(session: RealtimeSession, text: str) -> None:
    """The core's ``WarmPrompt`` for a partial of the turn being spoken, seen and carried out as the session does."""
    action = v.WarmPrompt("item_1", text)
    for observer in session.observers:
        observer.on_action(action)
    session.executor.run(action)


async def test_a_note_changed_mid_turn_warms_nothing_and_the_reply_reads_the_note_pinned_at_the_silence() -> None:
    """With a new scene in every frame a warm on each new note kept the model busy through the user's speech,
    beside the recogniser and the end-of-turn model; now a new note mid-turn warms nothing, the core's next warm
    reads it with the words, and the reply extends that warm with its question."""
    llm = PrefillingModel()
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(),
                                      see=Seeing(VisionSettings("notes"))))
    eyes, frame = session.eyes, frame_of(1, 0.0)
    eyes._noted(note("EXIT 12", 0.0), frame, 1.0)
    assert len(llm.prefilled) == 1  # the session's first note: the guidance and the message, no words yet
    eyes.on_action(v.SpeechStarted("item_1", 0.0))
    assert len(llm.prefilled) == 1  # the turn's start: the message is the one read
    eyes._noted(note("GATE 7", 500.0), frame, 2.0)  # the camera turned to a new sign mid-turn
    eyes._noted(note("PLATFORM 4", 800.0), frame, 2.5)  # and another
    assert len(llm.prefilled) == 1
    warm_turn(session, "which exit")  # the core's warm, a partial later: the newest message and the words
    assert len(llm.prefilled) == 2
    warmed = llm.prefilled[-1][0]
    assert "PLATFORM 4" in warmed[-2].content and warmed[-1] == ChatMessage("user", "which exit")
    eyes.on_action(v.SilenceBegan("item_1", 2000.0))
    eyes._noted(note("GATE 9", 2500.0), frame, 4.0)  # after the silence the turn's note is pinned
    assert len(llm.prefilled) == 2
    asked = [*session.conversation.chat_messages(session.config.instructions),
             ChatMessage("user", "which exit is it?")]
    answered = eyes.prompt("resp_1", asked)
    assert "PLATFORM 4" in answered[-2].content
    assert answered[:-1] == warmed[:-1]  # the reply only adds its question to what was warmed
    await session.close()


async def test_only_the_sessions_first_note_warms_a_turn_the_core_did_not_warm() -> None:
    """The first note brings the guidance and its example exchange (some 70 tokens, once a session): read as it
    comes, not at the turn's silence; a later note mid-turn warms nothing."""
    llm = PrefillingModel()
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(),
                                      see=Seeing(VisionSettings("notes"))))
    eyes, frame = session.eyes, frame_of(1, 0.0)
    eyes.on_action(v.SpeechStarted("item_1", 0.0))  # no partial warmed it yet
    eyes._noted(note("EXIT 12", 0.0), frame, 1.0)
    assert len(llm.prefilled) == 1
    first = llm.prefilled[0][0]
    assert GUIDANCE in first and "EXIT 12" in first[-2].content and first[-1] == ChatMessage("user", "")
    eyes._noted(note("GATE 7", 500.0), frame, 2.0)
    assert len(llm.prefilled) == 1
    await session.close()


async def test_a_turn_that_starts_with_a_note_in_view_is_warmed_with_it_at_once() -> None:
    """The core's own warm waits for a partial of the words (a second or more in); the camera message, some 60
    tokens, is read by then only if its warm began when the speech did."""
    llm = PrefillingModel()
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(),
                                      see=Seeing(VisionSettings("notes"))))
    eyes = session.eyes
    eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), 1.0)
    eyes.on_action(v.SpeechStarted("item_1", 0.0))
    assert len(llm.prefilled) == 1
    at_start = llm.prefilled[0][0]
    assert at_start[-1] == ChatMessage("user", "") and "EXIT 12" in at_start[-2].content  # no words yet
    warm_turn(session, "which exit")  # the core's warm, a partial later: the same note, the words after it
    assert llm.prefilled[-1][0][:-1] == at_start[:-1]
    eyes.on_action(v.SilenceBegan("item_1", 2000.0))
    asked = [*session.conversation.chat_messages(session.config.instructions),
             ChatMessage("user", "which exit is it?")]
    assert eyes.prompt("resp_1", asked)[:-1] == at_start[:-1]  # the reply adds only its question
    await session.close()


async def test_no_warm_at_the_start_of_a_turn_over_a_live_reply_or_one_that_gets_no_reply() -> None:
    llm = PrefillingModel()
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(),
                                      see=Seeing(VisionSettings("notes"))))
    eyes = session.eyes
    eyes.on_action(v.StartReply("resp_1", "turn_detected", None))
    eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), 1.0)  # the first note, over the live reply
    eyes.on_action(v.SpeechStarted("item_1", 0.0))  # over the live reply: its end is not known yet
    assert llm.prefilled == []
    eyes.on_action(v.CompleteReply("resp_1", "completed"))
    await session.handle_message(json.dumps({"type": "session.update", "session": {
        "audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": False}}}}}))
    eyes.on_action(v.SpeechStarted("item_2", 5000.0))  # the client asks for its replies itself
    assert llm.prefilled == []
    await session.close()


def test_the_guidance_stays_before_the_history_and_each_turns_message_holds_the_facts_alone() -> None:
    """Each turn's camera message comes after the history, so the model reads it anew every turn: it holds only the
    note's facts; the guidance on how to use them is read once, after the instructions, and stays in the prompt
    cache while the conversation grows behind it."""
    first = camera_message(SceneNote(("EXIT 12",), 0, "even light", (), "little motion", 0.0), 1.0).content
    second = camera_message(SceneNote(("GATE 7",), 1, "dim light", (), "much motion", 500.0), 1.0).content
    blank = camera_message(SceneNote((), 0, "even light", (), None, 900.0), 30.0).content
    assert not any(CAMERA_GUIDANCE[:40] in message for message in (first, second, blank))
    assert len(first) < len(CAMERA_GUIDANCE) and shared_start(first, second, blank)
    eyes = SessionEyes(Seeing(VisionSettings("notes")))
    assert eyes.context([ChatMessage("system", "be brief"), ChatMessage("user", "hi")])[1].role == "user"  # no note
    eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), 1.0)
    first_turn = eyes.prompt("resp_1", [ChatMessage("system", "be brief"), ChatMessage("user", "which exit?")])
    later = eyes.context([ChatMessage("system", "be brief"), ChatMessage("user", "which exit?"),
                          ChatMessage("assistant", "Exit twelve."), ChatMessage("user", "and now?")])
    assert later[:len(first_turn)] == first_turn and later[1] == first_turn[1] == GUIDANCE
    assert [m.content for m in later].count(CAMERA_GUIDANCE) == 1
