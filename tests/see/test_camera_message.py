"""The camera message's text and the guidance's example exchange (issue 44: the embedded model opened its replies by
repeating "The user's camera, ..." instead of answering)."""

from __future__ import annotations

from bargein.protocol.session_config import DEFAULT_INSTRUCTIONS
from bargein.see.scene import SceneNote
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.eyes import (
    CAMERA_LABEL,
    GUIDANCE,
    GUIDANCE_EXAMPLE,
    SessionEyes,
    camera_message,
    quotes_reads,
)
from bargein.values import ChatMessage
from tests.see.test_note_age import frame_of

READ = SceneNote(("EXIT 12",), 1, "dim light", (), "little motion", 0.0)
BLANK = SceneNote((), 0, "even light", (), None, 0.0)


def test_the_camera_message_is_a_labelled_line_of_facts_that_names_no_one() -> None:
    messages = [camera_message(READ, 1.0).content, camera_message(BLANK, 1.0).content,
                camera_message(READ, 30.0).content]
    assert all(text.startswith(CAMERA_LABEL) for text in messages)  # the same opening for every note: cached
    assert not any("user" in text.lower() or "shows" in text.lower() for text in messages)
    assert messages[0] == 'Camera: writing "EXIT 12"; one face; dim light; little motion.'
    assert messages[1] == "Camera: no writing; no face; even light."


def test_the_camera_message_is_shorter_than_it_was() -> None:
    """The message is read on the turn's critical path when the note changed: the new wording must not cost more."""
    before = {READ: 'It shows writing that reads exactly: "EXIT 12"; one face; dim light; little motion.',
              BLANK: "It shows no writing at all (if the user asks what it says, say you see no writing); no face; "
                     "even light."}
    for note, old in before.items():
        assert len(camera_message(note, 1.0).content) < len(old)


def test_the_guidance_shows_an_exchange_answered_in_its_first_words_where_reads_are_quoted() -> None:
    eyes = SessionEyes(Seeing(VisionSettings("notes")), clock=lambda: 2.0)
    eyes._noted(READ, frame_of(1, 0.0), 1.0)
    history = [ChatMessage("system", DEFAULT_INSTRUCTIONS), ChatMessage("user", "hi"),
               ChatMessage("assistant", "Hello."), ChatMessage("user", "how far is the moon?")]
    prompt = eyes.context(history)
    example = prompt[2:2 + len(GUIDANCE_EXAMPLE)]
    assert prompt[1] == GUIDANCE and tuple(example) == GUIDANCE_EXAMPLE
    assert prompt[2 + len(GUIDANCE_EXAMPLE):] == [*history[1:3], camera_message(READ, 1.0), history[3]]
    assert all(m.private for m in (GUIDANCE, *GUIDANCE_EXAMPLE))  # only the instructions are a shared prefix
    assert example[0].content.startswith(CAMERA_LABEL) and [m.role for m in example[1:]] == ["user", "assistant"]
    answer = example[-1].content.lower()
    assert not any(word in answer for word in ("camera", "writing", "user", "face", "light"))
    assert '"' not in example[0].content  # no writing in the example's scene: nothing to copy into a reading


def test_where_the_model_is_asked_to_read_the_guidance_has_no_example_to_copy() -> None:
    """With other instructions a request to read goes to the model, which copied the example's answer into it."""
    eyes = SessionEyes(Seeing(VisionSettings("notes")), clock=lambda: 2.0)
    eyes._noted(READ, frame_of(1, 0.0), 1.0)
    asked = [ChatMessage("system", "Answer in French."), ChatMessage("user", "what does it say?")]
    assert eyes.context(asked) == [asked[0], GUIDANCE, camera_message(READ, 1.0), asked[1]]
    assert quotes_reads([ChatMessage("system", DEFAULT_INSTRUCTIONS)]) and not quotes_reads(asked)
    assert not quotes_reads([ChatMessage("system", DEFAULT_INSTRUCTIONS, private=True)])
