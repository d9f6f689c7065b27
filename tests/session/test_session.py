"""The session shell in process (no socket): engine failures, cancellation reach, formats, items."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np

from bargein.audio.codecs import AudioFormat, float_to_int16
from bargein.engines.base import Engines, SpeechRecognizer
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from tests.support.session_harness import (
    CountingLanguageModel,
    Harness,
    SilentRecognizer,
    reply_audio,
    say_tone,
)


def engines(llm: Any = None, asr: Any = None) -> Engines:
    return Engines(FakeVad(), asr or FakeRecognizer(("hello",)), llm or FakeLanguageModel(), FakeSynthesizer())


async def test_an_llm_failure_is_an_error_event_and_a_failed_response_and_the_session_lives() -> None:
    h = Harness(engines(llm=FakeLanguageModel(fail=True)))
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "hi"}]})
    await h.send(type="response.create")
    await h.drain(until="response.done")
    errors = [e for e in h.events if e["type"] == "error"]
    assert errors and errors[0]["error"]["type"] == "server_error" and errors[0]["error"]["code"] == "engine_error"
    assert h.events[-1]["response"]["status"] == "failed"
    await h.send(type="session.update", session={"instructions": "still here"})
    assert (await h.drain(until="session.updated"))[-1]["session"]["instructions"] == "still here"
    await h.session.close()


async def test_cancel_reaches_the_llm_within_one_token_and_no_audio_follows_done() -> None:
    llm = CountingLanguageModel()
    h = Harness(engines(llm=llm))
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.output_audio.delta")
    await h.send(type="response.cancel")
    await h.drain(until="response.done")
    assert h.events[-1]["response"]["status"] == "cancelled"
    assert h.events[-1]["response"]["status_details"]["reason"] == "client_cancelled"
    done_index = len(h.events) - 1
    await asyncio.sleep(0.2)
    await h.drain()
    assert not [e for e in h.events[done_index:] if e["type"] == "response.output_audio.delta"]
    assert llm.after_cancel <= 1
    await h.session.close()


async def test_mulaw_audio_in_and_out() -> None:
    h = Harness(engines())
    await h.send(type="session.update", session={"audio": {"input": {"format": {"type": "audio/pcmu"}},
                                                           "output": {"format": {"type": "audio/pcmu"}}}})
    fmt = AudioFormat("audio/pcmu", 8000)
    tone = 0.3 * np.sin(2 * np.pi * 300 * np.arange(8000) / 8000)
    clip = np.concatenate([np.zeros(2400), tone, np.zeros(8000)]).astype(np.float32)
    wire = fmt.encode(float_to_int16(clip))
    for offset in range(0, len(wire), 160):  # 20 ms of μ-law
        await h.send(type="input_audio_buffer.append", audio=base64.b64encode(wire[offset:offset + 160]).decode())
    await h.drain(until="response.done")
    started = [e for e in h.events if e["type"] == "input_audio_buffer.speech_started"][0]
    stopped = [e for e in h.events if e["type"] == "input_audio_buffer.speech_stopped"][0]
    assert 250 <= started["audio_start_ms"] <= 350
    assert 1250 <= stopped["audio_end_ms"] <= 1400
    deltas = [e for e in h.events if e["type"] == "response.output_audio.delta"]
    assert deltas
    # 8 kHz μ-law is one byte per sample: "You said: hello." is 16 characters of 60 ms of fake speech,
    # in ten 100 ms chunks joined by nine 8 ms crossfades
    total = sum(len(base64.b64decode(d["delta"])) for d in deltas)
    assert abs(total - (16 * 0.060 - 9 * 0.008) * 8000) <= 8
    await h.session.close()


async def test_an_input_audio_item_is_transcribed_and_answered() -> None:
    h = Harness(engines(asr=FakeRecognizer(("what time is it",))))
    audio = float_to_int16((0.2 * np.sin(np.arange(24_000) / 5)).astype(np.float32)).tobytes()
    await h.send(type="conversation.item.create", item={
        "type": "message", "role": "user", "content": [{"type": "input_audio",
                                                        "audio": base64.b64encode(audio).decode()}]})
    await h.drain(until="conversation.item.input_audio_transcription.completed")
    await h.send(type="response.create", response={"output_modalities": ["text"]})
    await h.drain(until="response.done")
    text = "".join(e["delta"] for e in h.events if e["type"] == "response.output_text.delta")
    assert text == "You said: what time is it."
    await h.session.close()


async def test_silence_alone_never_starts_a_turn_and_an_empty_transcript_gets_no_words() -> None:
    h = Harness(engines(asr=FakeRecognizer(("",))))
    silence = base64.b64encode(bytes(960)).decode()
    for _ in range(100):
        await h.send(type="input_audio_buffer.append", audio=silence)
    assert "input_audio_buffer.speech_started" not in h.types()
    assert h.session.audio_in.buffer.duration_ms <= 600, "an idle buffer in VAD mode stays small"
    await h.session.close()


async def test_a_false_interruption_resumes_sample_exact_from_the_cut_point() -> None:
    filler = "and then it goes on for a good while longer so that there is plenty to interrupt."

    def reply_engines() -> Engines:
        return Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(filler=filler), FakeSynthesizer())

    ask = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "talk"}]}
    reference = Harness(reply_engines())
    await reference.send(type="conversation.item.create", item=ask)
    await reference.send(type="response.create")
    await reference.drain(until="response.done", timeout=30)
    reference_id = reference.events[-1]["response"]["id"]
    full = await reply_audio(reference, reference_id, reference.events)
    await reference.session.close()

    h = Harness(reply_engines())
    await h.send(type="conversation.item.create", item=ask)
    await h.send(type="response.create")
    await h.drain(until="response.created")
    response_id = h.events[-1]["response"]["id"]
    while len(await reply_audio(h, response_id, h.events)) < 48_000:  # a second of audio has arrived
        await h.drain(until="response.output_audio.delta")
    item_id = next(e for e in h.events if e["type"] == "response.output_item.added")["item"]["id"]
    # a cough: 200 ms of sound, then silence; the client stops playback at 700 ms and says so
    tone = float_to_int16((0.3 * np.sin(np.arange(4800) / 4)).astype(np.float32)).tobytes()
    for offset in range(0, len(tone), 960):
        await h.send(type="input_audio_buffer.append", audio=base64.b64encode(tone[offset:offset + 960]).decode())
    await h.drain(until="bargein.reply.paused")
    before = await reply_audio(h, response_id, h.events)
    await h.send(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=700)
    for _ in range(40):
        await h.send(type="input_audio_buffer.append", audio=base64.b64encode(bytes(960)).decode())
    await h.drain(until="bargein.reply.resumed")
    resumed_at = len(h.events)
    await h.drain(until="response.done", timeout=30)
    after = await reply_audio(h, response_id, h.events[resumed_at:])

    segment = next(e for e in h.events if e["type"] == "bargein.listen.segment" and e["decision"] != "text")
    assert segment["decision"] == "noise" and segment["action"] == "resume the reply"
    paused_at = next(i for i, e in enumerate(h.events) if e["type"] == "bargein.reply.paused")
    assert not [e for e in h.events[paused_at:resumed_at] if e["type"].startswith("response.output_audio")], \
        "nothing of a paused reply goes out, its transcript included"
    assert h.events[-1]["response"]["status"] == "completed"
    assert next(e for e in h.events if e["type"] == "bargein.reply.resumed")["audio_start_ms"] == 700
    cut = 700 * 48  # 700 ms of 24 kHz pcm16
    assert len(before) >= cut
    # what the client played, then what it got after the resume, is the reply exactly: no sample lost or doubled
    assert before[:cut] + after == full
    deleted = [e for e in h.events if e["type"] == "conversation.item.deleted"]
    assert deleted and deleted[0]["item_id"] == segment["item_id"]
    assert h.events[-1]["response"]["output"][0]["content"][0]["transcript"].startswith("You said: talk.")
    await h.session.close()


class RecordingRecognizer(SpeechRecognizer):
    """Remembers the language and prompt it was asked to use."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, str | None]] = []

    async def transcribe(self, audio: Any, *, language: str | None = None, prompt: str | None = None) -> Any:
        from bargein.values import Transcript

        self.calls.append((language, prompt))
        return Transcript("hola")


async def test_the_transcription_language_and_prompt_reach_the_recogniser() -> None:
    asr = RecordingRecognizer()
    h = Harness(engines(asr=asr))
    await h.send(type="session.update", session={"audio": {"input": {"transcription": {
        "model": "whisper-1", "language": "es", "prompt": "bargein"}}}})
    audio = float_to_int16((0.2 * np.sin(np.arange(24_000) / 5)).astype(np.float32)).tobytes()
    await h.send(type="conversation.item.create", item={
        "type": "message", "role": "user", "content": [{"type": "input_audio",
                                                        "audio": base64.b64encode(audio).decode()}]})
    await h.drain(until="conversation.item.input_audio_transcription.completed")
    assert asr.calls == [("es", "bargein")]
    await h.session.close()


async def test_a_rejected_response_create_leaks_nothing_into_the_next_reply() -> None:
    h = Harness(Engines(FakeVad(), FakeRecognizer(("what time is it",)), CountingLanguageModel(),
                        FakeSynthesizer()))
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.created")
    await h.send(type="response.create", response={"output_modalities": ["text"], "conversation": "none",
                                                   "metadata": {"leak": "yes"}})
    await h.drain(until="error")
    assert h.events[-1]["error"]["code"] == "conversation_already_has_active_response"
    await h.send(type="response.cancel")
    await h.drain(until="response.done")
    await say_tone(h, 1.0, 0.7)  # a spoken turn: the VAD starts the next reply
    await h.drain(until="response.created")
    spoken = h.events[-1]["response"]
    assert spoken["output_modalities"] == ["audio"] and spoken["metadata"] is None
    await h.drain(until="conversation.item.added")
    assert h.events[-1]["item"]["role"] == "assistant", "the spoken turn's reply is in the conversation"
    await h.session.close()


async def test_the_segment_event_reports_what_the_machine_decided_in_confirm_mode() -> None:
    h = Harness(Engines(FakeVad(), FakeRecognizer(("stop",)), CountingLanguageModel(), FakeSynthesizer()))
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.created")
    for _ in range(3):  # three barge-ins, each cutting the reply and starting the next
        await say_tone(h, 1.0, 0.7)
        await h.drain(until="response.created")
    assert [e["mode"] for e in h.events if e["type"] == "bargein.turn.mode"] == ["confirm"]
    playing = h.events[-1]["response"]["id"]
    await h.drain(until="response.output_audio.delta")
    await say_tone(h, 0.4, 1.2)  # a short "stop": in confirm mode too short to interrupt
    await h.drain(until="bargein.listen.segment")
    segment = h.events[-1]
    assert segment["decision"] == "query"
    assert segment["action"] == "ignore (confirm mode: too short to interrupt)"
    await h.drain(until="conversation.item.deleted")
    assert h.events[-1]["item_id"] == segment["item_id"]
    done = [e["response"]["id"] for e in h.events if e["type"] == "response.done"]
    assert playing not in done, "the reply plays on"
    started = [e["item_id"] for e in h.events if e["type"] in ("input_audio_buffer.speech_started",
                                                               "input_audio_buffer.speech_stopped")]
    assert segment["item_id"] not in started, "an OpenAI client, which stops playing at speech_started, plays on too"
    await h.session.close()


async def test_a_paused_text_reply_holds_its_text_until_it_resumes() -> None:
    filler = " ".join(["and then one more word"] * 40)
    h = Harness(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(filler=filler, token_delay_s=0.005),
                        FakeSynthesizer()))
    await h.send(type="session.update", session={"output_modalities": ["text"]})
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.output_text.delta")
    await say_tone(h, 0.2, 0.0)  # a cough over the reply pauses it
    await h.drain(until="bargein.reply.paused")
    await asyncio.sleep(0.1)  # the model goes on writing meanwhile
    await say_tone(h, 0.0, 0.8)
    await h.drain(until="response.done", timeout=30)
    kinds = h.types()
    paused_at, resumed_at = kinds.index("bargein.reply.paused"), kinds.index("bargein.reply.resumed")
    assert "response.output_text.delta" not in kinds[paused_at:resumed_at], "a paused reply sends nothing"
    text = "".join(e["delta"] for e in h.events if e["type"] == "response.output_text.delta")
    assert text == f"You said: talk. {filler}", "what was held goes out on resume, in order"
    assert h.events[-1]["response"]["output"][0]["content"][0]["text"] == text
    await h.session.close()
