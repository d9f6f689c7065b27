"""A session with no instructions keeps the engine's spoken-style prompt when the camera is on: the camera's
guidance and note are private system messages, conversation rather than instructions, so they no longer stop the
engine putting its default prompt first."""

from __future__ import annotations

from bargein.engines.think.llm_prompt import DEFAULT_SYSTEM_PROMPT, with_system_prompt
from bargein.see.scene import SceneNote
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.eyes import GUIDANCE, SessionEyes
from bargein.values import ChatMessage
from tests.see.test_note_age import frame_of


def camera_prompt(instructions: str) -> list[ChatMessage]:
    """What a reply's model reads for one question with a camera note in view (before the engine adds its own)."""
    eyes = SessionEyes(Seeing(VisionSettings("notes")))
    eyes._noted(SceneNote(("EXIT 12",), 0, "even light", (), None, 0.0), frame_of(1, 0.0), 1.0)
    asked = [ChatMessage("system", instructions)] if instructions else []
    return eyes.context([*asked, ChatMessage("user", "which way out?")])


def test_no_instructions_and_the_camera_on_still_get_the_default_spoken_style() -> None:
    prompt = with_system_prompt(camera_prompt(""), DEFAULT_SYSTEM_PROMPT)
    assert prompt[0] == ChatMessage("system", DEFAULT_SYSTEM_PROMPT) and prompt[1] == GUIDANCE
    assert [m.content for m in prompt].count(DEFAULT_SYSTEM_PROMPT) == 1
    assert "EXIT 12" in prompt[-2].content and prompt[-1].content == "which way out?"


def test_a_sessions_own_instructions_still_replace_the_default() -> None:
    prompt = with_system_prompt(camera_prompt("Answer in French."), DEFAULT_SYSTEM_PROMPT)
    assert prompt[0] == ChatMessage("system", "Answer in French.") and prompt[1] == GUIDANCE
    assert all(m.content != DEFAULT_SYSTEM_PROMPT for m in prompt)
    plain = [ChatMessage("user", "hi")]
    assert with_system_prompt(plain, DEFAULT_SYSTEM_PROMPT)[0].content == DEFAULT_SYSTEM_PROMPT
    assert with_system_prompt(plain, None) == plain
