"""The last second of a reply: every word is out, the client still plays what pacing sent ahead. The reply stays live
until it is played, so a cough there resumes it from the cut and a question cancels it where it was heard."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import pytest

from bargein.audio.codecs import float_to_int16
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.think.tool_calls import offered_tools, resolve_call
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece
from tests.support.session_harness import Harness, SilentRecognizer, reply_audio

ASK = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "talk"}]}
COUGH = float_to_int16((0.3 * np.sin(np.arange(4800) / 4)).astype(np.float32)).tobytes()  # 200 ms at 24 kHz
SILENCE_20MS = base64.b64encode(bytes(960)).decode()


async def _full_reply(engines: Engines) -> bytes:
    """The reply's audio when nobody interrupts it."""
    reference = Harness(engines)
    await reference.send(type="conversation.item.create", item=ASK)
    await reference.send(type="response.create")
    await reference.drain(until="response.done", timeout=30)
    audio = await reply_audio(reference, reference.events[-1]["response"]["id"], reference.events)
    await reference.session.close()
    return audio


async def _all_sent(h: Harness, full: bytes) -> tuple[str, str]:
    """Ask for the reply and take its deltas until every sample of it has arrived: ``(response_id, item_id)``."""
    await h.send(type="conversation.item.create", item=ASK)
    await h.send(type="response.create")
    await h.drain(until="response.created")
    response_id = h.events[-1]["response"]["id"]
    while len(await reply_audio(h, response_id, h.events)) < len(full):
        await h.drain(until="response.output_audio.delta")
    item_id = next(e for e in h.events if e["type"] == "response.output_item.added")["item"]["id"]
    return response_id, item_id


async def _speak(h: Harness, sound: bytes) -> None:
    for offset in range(0, len(sound), 960):
        await h.send(type="input_audio_buffer.append", audio=base64.b64encode(sound[offset:offset + 960]).decode())


class ToolCallingModel(FakeLanguageModel):
    """Says it will look, then calls the client's ``get_weather``."""

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        yield "Let me look that up."
        yield resolve_call('{"city": "Oslo"}', offered_tools(options or GenerationOptions()), name="get_weather")


def _done(h: Harness, response_id: str) -> list[dict[str, Any]]:
    return [e for e in h.events if e["type"] == "response.done" and e["response"]["id"] == response_id]


async def test_a_cough_while_the_client_plays_a_finished_reply_resumes_it_from_the_cut() -> None:
    """The whole reply (0.9 s, under the 1 s lead) has left, the client plays it; a cough pauses it, the OpenAI client
    stops playing and truncates at 300 ms, the cough is judged noise: the rest is sent again, sample exact, and only
    then is the reply done, complete."""
    full = await _full_reply(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    assert 0 < len(full) <= 48_000, "the whole reply fits in the lead: it is all sent at once"
    h = Harness(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    response_id, item_id = await _all_sent(h, full)
    assert not _done(h, response_id), "every word is out, but the client is still playing it"
    await _speak(h, COUGH)
    await h.drain(until="bargein.reply.paused")
    await h.send(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=300)
    for _ in range(40):
        await h.send(type="input_audio_buffer.append", audio=SILENCE_20MS)
    await h.drain(until="bargein.reply.resumed")
    resumed_at = len(h.events)
    await h.drain(until="response.done", timeout=30)
    (done,) = _done(h, response_id)
    assert done["response"]["status"] == "completed"
    segment = next(e for e in h.events if e["type"] == "bargein.listen.segment" and e["decision"] != "text")
    assert segment["decision"] == "noise" and segment["action"] == "resume the reply"
    cut = 300 * 48
    assert full[:cut] + await reply_audio(h, response_id, h.events[resumed_at:]) == full
    assert h.session.conversation.get(item_id).heard_ms is None, "heard to its end: nothing of it was cut"
    await h.session.close()


@pytest.mark.parametrize("words", ["what time is it", "yes"])
async def test_words_while_the_client_plays_a_finished_reply_cancel_it_where_it_was_heard_and_are_answered(
        words: str) -> None:
    """A question, or a "yes" overlapping the reply's last second (an answer to the agent, not an acknowledgement:
    the agent's words were all out)."""
    full = await _full_reply(Engines(FakeVad(), FakeRecognizer((words,)), FakeLanguageModel(), FakeSynthesizer()))
    h = Harness(Engines(FakeVad(), FakeRecognizer((words,)), FakeLanguageModel(), FakeSynthesizer()))
    response_id, item_id = await _all_sent(h, full)
    await _speak(h, float_to_int16((0.3 * np.sin(np.arange(24_000) / 4)).astype(np.float32)).tobytes())
    await h.drain(until="bargein.reply.paused")
    await h.send(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=400)
    for _ in range(60):
        await h.send(type="input_audio_buffer.append", audio=SILENCE_20MS)
    await h.drain(until="response.done", timeout=30)
    (done,) = _done(h, response_id)
    assert done["response"]["status"] == "cancelled"
    item = h.session.conversation.get(item_id)
    assert item.heard_ms == 400 and item.status == "incomplete"
    await h.drain(until="response.created", timeout=30)
    assert h.events[-1]["response"]["id"] != response_id, "the question is answered"
    await h.session.close()


async def test_a_client_that_stops_a_finished_reply_by_itself_ends_it_at_once_where_it_stopped() -> None:
    """No speech: the client's own stop (a truncate short of the end) ends the reply then, as heard to the cursor."""
    full = await _full_reply(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    h = Harness(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    response_id, item_id = await _all_sent(h, full)
    await h.send(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=200)
    await h.drain(until="response.done", timeout=30)
    (done,) = _done(h, response_id)
    assert done["response"]["status"] == "completed"
    reply = next(r for r in h.session.replies.recent if r.response_id == response_id)
    assert reply.playback.heard_ms() < reply.playback.sent_ms, "done before the estimate had it played out"
    assert h.session.conversation.get(item_id).heard_ms == 200
    await h.session.close()


async def test_a_response_create_right_behind_a_truncate_of_a_reply_playing_out_is_served() -> None:
    """A client that interrupts with a truncate and no ``response.cancel``, then asks at once: the truncate ended the
    reply playing out, so the new request finds no reply in progress."""
    full = await _full_reply(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    h = Harness(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    response_id, item_id = await _all_sent(h, full)
    await h.send(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=100)
    await h.send(type="conversation.item.create", item=ASK)
    await h.send(type="response.create")
    await h.drain(until="response.created", timeout=30)
    assert not [e for e in h.events if e["type"] == "error"], [e for e in h.events if e["type"] == "error"]
    (done,) = _done(h, response_id)
    assert done["response"]["status"] == "completed"
    await h.session.close()


async def test_a_reply_that_calls_a_client_tool_is_done_without_waiting_for_its_playback() -> None:
    """The client sends the call's output and the next ``response.create`` only at ``response.done``: that must not
    wait for the spoken preamble to play out."""
    tools = [{"type": "function", "name": "get_weather", "description": "the weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    h = Harness(Engines(FakeVad(), SilentRecognizer(), ToolCallingModel(), FakeSynthesizer()))
    await h.send(type="session.update", session={"type": "realtime", "tools": tools})
    await h.send(type="conversation.item.create", item=ASK)
    await h.send(type="response.create")
    await h.drain(until="response.done", timeout=30)
    done = h.events[-1]["response"]
    assert [o["type"] for o in done["output"]] == ["message", "function_call"]
    reply = next(r for r in h.session.replies.recent if r.response_id == done["id"])
    assert reply.playback.heard_ms() < reply.playback.sent_ms, "done while the client still plays the preamble"
    await h.session.close()


async def test_a_response_create_while_a_reply_plays_out_ends_it_and_starts_the_new_one() -> None:
    """A client that asks for a reply (a typed message, say) once the last one's words are all out, as it may once the
    hosted API has said ``response.done``: the reply playing out is done, completed, and the new one starts."""
    full = await _full_reply(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    h = Harness(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    response_id, _ = await _all_sent(h, full)
    await h.send(type="conversation.item.create", item=ASK)
    await h.send(type="response.create")
    await h.drain(until="response.created", timeout=30)
    assert not [e for e in h.events if e["type"] == "error"]
    (done,) = _done(h, response_id)
    assert done["response"]["status"] == "completed"
    await h.session.close()
