"""Images through a whole session (fake engines, no socket): a good image is added, each bad one gets an error
with its code and the session goes on; the turn's speech opens the sampler's clip."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.core import vocabulary as v
from bargein.session.realtime_session import RealtimeSession
from tests.support.pictures import cmyk_jpeg, data_url, encode, huge_png_header, sign


def session() -> RealtimeSession:
    engines = Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), FakeSynthesizer())
    created = RealtimeSession(engines)
    created.start()
    return created


async def send_image(s: RealtimeSession, url: str, event_id: str) -> None:
    await s.handle_message(json.dumps({"type": "conversation.item.create", "event_id": event_id, "item": {
        "type": "message", "role": "user", "content": [{"type": "input_image", "image_url": url}]}}))


async def drain(s: RealtimeSession) -> list[dict[str, Any]]:
    events = []
    while len(s.outbound):
        events.append((await s.outbound.get()).event)
    return events


@pytest.mark.parametrize(("encoded", "mime", "code"), [
    (b"not an image", "image/png", "image_not_an_image"),
    (encode(sign("HALF"), "JPEG")[:3000], "image/jpeg", "image_truncated"),
    (huge_png_header(), "image/png", "image_too_many_pixels"),
    (cmyk_jpeg(), "image/jpeg", "image_mode_unsupported"),
], ids=["not an image", "truncated", "20k x 20k", "cmyk"])
async def test_a_bad_image_gets_its_error_and_the_session_goes_on(encoded: bytes, mime: str, code: str) -> None:
    s = session()
    await send_image(s, data_url(encoded, mime), "bad")
    errors = [e for e in await drain(s) if e["type"] == "error"]
    assert [(e["error"]["code"], e["error"]["event_id"], e["error"]["param"]) for e in errors] == \
        [(code, "bad", "item.content.image_url")]
    assert len(s.conversation) == 0
    await send_image(s, data_url(encode(sign("GOOD"), "JPEG")), "good")
    kinds = [e["type"] for e in await drain(s)]
    assert "conversation.item.added" in kinds and "error" not in kinds
    assert s.eyes.sampler.newest is not None and s.eyes.sampler.newest.width == 640


async def test_a_url_to_fetch_is_refused_as_before() -> None:
    s = session()
    await send_image(s, "https://example.invalid/sign.jpg", "url")
    errors = [e for e in await drain(s) if e["type"] == "error"]
    assert [e["error"]["code"] for e in errors] == ["invalid_value"]


async def test_the_turns_speech_opens_and_closes_the_clip() -> None:
    s = session()
    s.eyes.on_action(v.SpeechStarted("item_1", 0.0))
    assert s.eyes.sampler.speaking
    await send_image(s, data_url(encode(sign("ONE"), "JPEG")), "a")
    s.eyes.on_action(v.SpeechStopped("item_1", 900.0))
    assert not s.eyes.sampler.speaking
    assert len(s.eyes.sampler.take_turn()) == 1


async def test_a_camera_frame_is_sampled_but_never_added_to_the_conversation() -> None:
    s = session()
    frame = {"type": "bargein.camera.frame", "event_id": "cam", "image_url": data_url(encode(sign("CAM"), "JPEG"))}
    await s.handle_message(json.dumps(frame))
    await s.handle_message(json.dumps(frame))  # the same scene again: a near-duplicate
    assert len(s.conversation) == 0
    assert s.eyes.sampler.counts["kept"] == 1 and s.eyes.sampler.counts["duplicate"] == 1
    assert [e["type"] for e in await drain(s)] == ["session.created"]
    await s.handle_message(json.dumps({**frame, "image_url": data_url(cmyk_jpeg())}))
    errors = [e["error"] for e in await drain(s) if e["type"] == "error"]
    assert [(e["code"], e["param"], e["event_id"]) for e in errors] == [("image_mode_unsupported", "image_url", "cam")]
