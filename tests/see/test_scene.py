"""The offline scene reader on real generated frames: real OCR, the face detector, light, colours, motion; the
scene pool's fair turns; the note reaching the model as context just before the question."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageFilter

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.see.detectors import PINNED, Detectors, TextLine
from bargein.see.frames import Frame, decode_frame
from bargein.see.scene import SceneNote, dominant_colours, light_of, motion_between, read_scene
from bargein.see.scene_pool import ScenePool
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.eyes import GUIDANCE
from bargein.session.realtime_session import RealtimeSession
from bargein.values import ChatMessage
from tests.support.pictures import data_url, encode, scene, sign


@pytest.fixture(scope="module")
def detectors() -> Detectors:
    return Detectors()


def frame_of(image: Image.Image, at_ms: float = 0.0) -> Frame:
    return decode_frame(encode(image, "JPEG", quality=90), at_ms)


def test_every_packaged_model_file_matches_its_pin() -> None:
    for pin in PINNED:
        assert pin.verified_path().is_file()


def test_ocr_reads_a_printed_sign(detectors: Detectors) -> None:
    lines = detectors.read_text(frame_of(sign("PLATFORM 4", text_size=56)).pixels)
    assert "PLATFORM4" in "".join(line.text for line in lines).replace(" ", "").upper()


def test_ocr_reads_a_slightly_blurred_tilted_sign(detectors: Detectors) -> None:
    card = sign("EXIT 12", text_size=72).rotate(6, expand=False, fillcolor="white").filter(ImageFilter.GaussianBlur(1))
    lines = detectors.read_text(frame_of(card).pixels)
    assert "EXIT12" in "".join(line.text for line in lines).replace(" ", "").upper()


def test_no_text_and_no_face_is_found_in_a_plain_scene(detectors: Detectors) -> None:
    pixels = frame_of(scene(7)).pixels
    assert detectors.read_text(pixels) == []
    assert detectors.count_faces(pixels) == 0


def test_light_colours_and_motion() -> None:
    dark = np.full((480, 640, 3), 30, dtype=np.uint8)
    assert light_of(dark) == "dim light"
    assert light_of(np.full((480, 640, 3), 230, dtype=np.uint8)) == "bright light"
    blue = np.zeros((480, 640, 3), dtype=np.uint8)
    blue[..., 2] = 200
    blue[:, :200] = 255  # a white third
    assert dominant_colours(blue) == ("blue", "white")
    still = frame_of(scene(2)).pixels
    assert motion_between(still, still) == "little motion"
    assert motion_between(still, frame_of(scene(9)).pixels) == "much motion"


def test_the_note_says_what_was_found(detectors: Detectors) -> None:
    first = frame_of(sign("OPEN 24 HOURS", text_size=56), 0.0)
    note = read_scene(first, first, detectors)
    line = note.line()
    assert line.startswith("text on screen: '") and "OPEN" in line.upper()
    assert "no face" in line and "little motion" in line and "bright light" in line
    assert read_scene(frame_of(scene(3)), None, detectors).line().startswith("no text in view; no face")


class EmptyDetectors:
    """Detectors that find nothing, at once (the pool's order is what is tested)."""

    def read_text(self, pixels: np.ndarray) -> list[TextLine]:
        return []

    def count_faces(self, pixels: np.ndarray) -> int:
        return 0

    def begin(self) -> None:
        """Nothing to reset: these detectors cannot stop a read."""

    def stop(self) -> None:
        """These detectors cannot stop a read."""


async def test_the_pool_serves_sessions_in_turn_and_only_their_newest_frame() -> None:
    pool = ScenePool(EmptyDetectors)
    notes: list[tuple[str, float]] = []
    frames = {k: frame_of(scene(k), k * 10.0) for k in range(12)}
    for k in range(10):  # a busy session streams ten frames before the pool runs; a quiet one sends one
        pool.submit("busy", frames[k], None, lambda note: notes.append(("busy", note.frame_at_ms)))
    pool.submit("quiet", frames[11], None, lambda note: notes.append(("quiet", note.frame_at_ms)))
    assert pool.waiting == 2
    for _ in range(100):
        await asyncio.sleep(0.01)
        if len(notes) == 2:
            break
    assert notes == [("busy", 90.0), ("quiet", 110.0)]
    await pool.aclose()


async def test_the_note_reaches_the_model_as_context_after_the_question() -> None:
    llm = FakeLanguageModel()
    seeing = Seeing(VisionSettings("notes"), ScenePool(Detectors, niceness=0))  # a busy machine: read at once
    engines = Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(), see=seeing)
    session = RealtimeSession(engines)
    session.start()
    send = session.handle_message
    await send(json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}))
    await send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": data_url(encode(sign("PLATFORM 4", text_size=56), "JPEG"))}]}}))
    note = await next_event(session, "bargein.see.note")
    assert "PLATFORM" in note["note"].upper()
    await send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "which platform is this?"}]}}))
    await send(json.dumps({"type": "response.create"}))
    await next_event(session, "response.done")
    prompt = llm.seen[-1]
    assert prompt[-1].role == "user" and prompt[-1].content == "which platform is this?"  # the question leads (a
    # request to read it would be answered by quoting the note: tests/see/test_quoting.py)
    assert prompt[-2].role == "system" and prompt[-2].content.startswith("Camera: writing")
    assert prompt[1] == GUIDANCE  # how to use the camera's readings: after the instructions, before the history
    assert 'writing "PLATFORM' in prompt[-2].content
    assert all(not m.images for m in prompt)
    assert isinstance(session.eyes.note, SceneNote)
    await seeing.pool.aclose()  # type: ignore[union-attr]


async def next_event(session: RealtimeSession, kind: str) -> dict[str, Any]:
    async def wait() -> dict[str, Any]:
        while True:
            item = await session.outbound.get()
            session.on_sent(item)
            if item.event["type"] == kind:
                return item.event
    return await asyncio.wait_for(wait(), 20)


def test_the_camera_message_says_how_to_use_the_note() -> None:
    from bargein.session.eyes import camera_message

    read = camera_message(SceneNote(("EXIT 12",), 1, "dim light", (), "little motion", 0.0), 2.0)
    assert read.private  # what a user's camera saw: never the shared prefix of another session's prompt
    assert read.role == "system" and 'writing "EXIT 12"' in read.content
    assert "one face; dim light; little motion" in read.content and "a while ago" not in read.content
    blank = camera_message(SceneNote((), 0, "even light", (), None, 0.0), 30.0)
    assert "no writing" in blank.content and "a while ago" in blank.content
    assert not any(ch.isdigit() for ch in blank.content)  # nothing a model could repeat as invented text


def test_ocr_slips_between_letters_and_digits_are_mended() -> None:
    from bargein.see.detectors import mend_digits_and_letters

    assert mend_digits_and_letters("RO0M 105") == "ROOM 105"
    assert mend_digits_and_letters("PLATF0RM 1O5") == "PLATFORM 105"
    assert mend_digits_and_letters("ROOM 10") == "ROOM 10"


def test_a_tilted_signs_words_are_read_in_order(detectors: Detectors) -> None:
    card = sign("Pharmacy A8", text_size=64).rotate(8, fillcolor="white")
    lines = detectors.read_text(frame_of(card).pixels)
    assert [line.text.replace(" ", "") for line in lines] == ["PharmacyA8"]


async def test_a_speculative_prompt_gets_the_same_camera_message_as_the_reply() -> None:
    engines = Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), FakeSynthesizer(),
                      see=Seeing(VisionSettings("notes")))
    session = RealtimeSession(engines)
    session.eyes.note = SceneNote(("EXIT 12",), 0, "even light", (), None, 0.0)
    guessed = session.replies.with_memory([ChatMessage("system", "be brief"), ChatMessage("user", "what is that")])
    answered = session.eyes.prompt("resp_1", [ChatMessage("system", "be brief"), ChatMessage("user", "what is that")])
    assert guessed == answered  # the prefetched reply's prompt matches, so it can be adopted
    assert [m.role for m in answered] == ["system", "system", "system", "user"] and "EXIT 12" in answered[2].content
    assert answered[1] == GUIDANCE


async def test_a_closed_session_leaves_no_frame_waiting() -> None:
    pool = ScenePool(EmptyDetectors)
    engines = Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), FakeSynthesizer(),
                      see=Seeing(VisionSettings("notes"), pool))
    session = RealtimeSession(engines)
    session.eyes.offer(frame_of(scene(4)))
    assert pool.waiting == 1
    await session.close()
    assert pool.waiting == 0 and session.eyes.sampler.newest is None
    await pool.aclose()
