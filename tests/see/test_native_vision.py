"""``--vision native``: a turn's frames reach the model resized by the token math within the turn's budget, and
the tokens spent are in the turn's ledger and /metrics; ``notes``: no image reaches the model."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import Any

from PIL import Image

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.metrics.prometheus import ServerMetrics
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.realtime_session import RealtimeSession
from tests.support.pictures import data_url, encode, scene, sign


async def ask_about_a_sign(settings: VisionSettings, *, session_budget: int | None = None
                           ) -> tuple[FakeLanguageModel, dict[str, Any], ServerMetrics]:
    llm = FakeLanguageModel()
    metrics = ServerMetrics()
    engines = Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(), see=Seeing(settings))
    session = RealtimeSession(engines, metrics=metrics)
    session.start()
    send = session.handle_message
    if session_budget is not None:
        await send(json.dumps({"type": "session.update", "session": {"image_token_budget": session_budget}}))
    await send(json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}))
    await send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": data_url(encode(sign("PLATFORM 4"), "JPEG"))}]}}))
    await send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "what does the sign say?"}]}}))
    await send(json.dumps({"type": "response.create"}))

    async def turn_metrics() -> dict[str, Any]:
        while True:
            item = await session.outbound.get()
            session.on_sent(item)  # as the transport does: a reply's ledger is reported once its output is out
            if item.event["type"] == "bargein.turn.metrics":
                return item.event
    return llm, await asyncio.wait_for(turn_metrics(), 10), metrics


def size_of(url: str) -> tuple[int, int]:
    with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as image:
        return image.size


async def test_native_frames_are_resized_by_the_families_math() -> None:
    llm, summary, metrics = await ask_about_a_sign(VisionSettings("native", "qwen2.5-vl", 1280))
    prompt = llm.seen[0]
    assert prompt[-1].content == "what does the sign say?"
    assert [size_of(image.data_url) for image in prompt[-1].images] == [(644, 476)]  # 23 x 17 blocks
    assert all(not m.images for m in prompt[:-1])
    assert summary["image_tokens"] == 391
    assert b"bargein_image_tokens_total 391.0" in metrics.exposition()


async def test_the_sessions_budget_overrides_the_servers() -> None:
    llm, summary, _ = await ask_about_a_sign(VisionSettings("native", "openai", 1280), session_budget=300)
    # 640 x 480 high is 2 tiles, 425 tokens; shrunk to one tile along its long side: 512 x 384, 255 tokens
    assert summary["image_tokens"] == 255
    assert [size_of(image.data_url) for image in llm.seen[0][-1].images] == [(512, 384)]


async def test_notes_mode_sends_no_image() -> None:
    llm, summary, _ = await ask_about_a_sign(VisionSettings("notes"))
    assert all(not m.images for m in llm.seen[0])
    assert "image_tokens" not in summary


def test_auto_is_native_with_a_model_behind_a_url() -> None:
    assert VisionSettings.resolve("auto", remote_llm=True).mode == "native"
    assert VisionSettings.resolve("auto", remote_llm=False).mode == "notes"
    assert VisionSettings.resolve("native", remote_llm=False).mode == "native"


async def test_a_speculative_prompt_in_native_mode_carries_the_frames_the_reply_will_send() -> None:
    from bargein.see.frames import decode_frame
    from bargein.values import ChatMessage

    engines = Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), FakeSynthesizer(),
                      see=Seeing(VisionSettings("native", "qwen2.5-vl", 1280)))
    session = RealtimeSession(engines)
    session.eyes.offer(decode_frame(encode(sign("EXIT 12"), "JPEG"), 0.0))
    asked = [ChatMessage("system", "be brief"), ChatMessage("user", "what does it say?")]
    guessed = session.replies.with_memory(asked)
    answered = session.eyes.prompt("resp_1", asked)
    assert guessed == answered  # the prefetched reply's prompt matches, so the reply adopts it
    assert [size_of(image.data_url) for image in answered[-1].images] == [(644, 476)]
    session.eyes.offer(decode_frame(encode(sign("GATE 7"), "JPEG"), 500.0))
    guessed = session.replies.with_memory(asked)
    assert session.eyes.offer(decode_frame(encode(scene(5), "JPEG"), 900.0)) == "kept"  # the camera moved on
    assert session.eyes.prompt("resp_2", asked) != guessed  # a prefetch that did not see it is not adopted
