"""Fault injection on a real server: engines raise, hang or return garbage mid-turn; what the client gets.

The engines are the deterministic fakes behind :mod:`tests.support.faults` switches and the real
resilience wrappers (short deadlines). Every case asserts what the client receives during the fault and
that the next turn, once the fault is cleared, is answered normally.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.health import Health
from bargein.engines.resilience import LLM_APOLOGY, LLM_CUT_APOLOGY, Deadlines, make_resilient
from bargein.engines.resilient_speech import unspoken
from bargein.session.core.reply_course import DIDNT_CATCH
from tests.support.faults import FaultyLanguageModel, FaultyRecognizer, FaultySynthesizer, FaultyVad
from tests.support.server import running_server
from tests.support.turns import events_until_done, open_session, spoken, text_turn

PRIMARY_AMPLITUDE = 0.2
FALLBACK_AMPLITUDE = 0.05
DEADLINES = Deadlines(llm_first_token_s=0.5, llm_next_token_s=0.5, tts_first_chunk_s=0.5, tts_next_chunk_s=0.5,
                      asr_s=0.5, vad_frame_s=0.5)


@dataclass
class Rig:
    host: str
    engines: Engines
    vad: FaultyVad
    asr: FaultyRecognizer
    llm: FaultyLanguageModel
    tts: FaultySynthesizer


@contextmanager
def rig() -> Iterator[Rig]:
    vad, asr = FaultyVad(FakeVad()), FaultyRecognizer(FakeRecognizer(("hello there",)))
    llm = FaultyLanguageModel(FakeLanguageModel(filler="and some more words to say", token_delay_s=0.01))
    tts = FaultySynthesizer(FakeSynthesizer(ms_per_char=5, chunk_ms=20, amplitude=PRIMARY_AMPLITUDE))
    fallback = FakeSynthesizer(ms_per_char=5, chunk_ms=20, amplitude=FALLBACK_AMPLITUDE)
    engines = make_resilient(Engines(vad, asr, llm, tts), fallback_tts=fallback, deadlines=DEADLINES,
                             health=Health(first_backoff_s=0.1, max_backoff_s=0.2))
    with running_server(engines) as host:
        yield Rig(host, engines, vad, asr, llm, tts)


def peak(events: list[dict[str, Any]]) -> int:
    audio = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")
    return int(np.max(np.abs(np.frombuffer(audio, "<i2").astype(np.int32)), initial=0))


async def assert_next_turn_is_normal(ws: Any) -> None:
    events = await text_turn(ws, "are you back")
    assert events[-1]["response"]["status"] == "completed"
    assert spoken(events).startswith("You said: are you back.")
    assert peak(events) > 0.8 * PRIMARY_AMPLITUDE * 32767, "spoken by the primary TTS again"


@pytest.mark.parametrize(("fault", "after"), [("raise", 0), ("raise", 4), ("hang", 0), ("hang", 4),
                                              ("garbage", 0), ("garbage", 4)])
async def test_llm_fault_mid_turn_is_spoken_as_an_apology(fault: str, after: int) -> None:
    with rig() as r:
        ws = await open_session(r.host)
        r.llm.fault, r.llm.after = fault, after
        events = await text_turn(ws, "tell me")
        assert events[-1]["response"]["status"] == "completed"
        # before: nothing told the client that what it heard was an apology, not an answer
        [error] = [e for e in events if e["type"] == "error"]
        assert error["error"]["type"] == "server_error" and error["error"]["code"] == "llm_unavailable"
        assert "language model" in error["error"]["message"] and "apology" in error["error"]["message"]
        assert events[-1]["response"]["id"] in error["error"]["message"]
        assert "event_id" not in error["error"] or error["error"]["event_id"] is None
        assert events.index(error) < len(events) - 1, "told before response.done"
        if after == 0:
            assert spoken(events) == LLM_APOLOGY
        else:
            assert spoken(events).startswith("You said:") and spoken(events).endswith(LLM_CUT_APOLOGY.strip())
        assert any(e["type"] == "response.output_audio.delta" for e in events), "the apology is heard"
        assert r.engines.health is not None and r.engines.health["llm"].state == "degraded"
        r.llm.fault = None
        await assert_next_turn_is_normal(ws)
        await ws.close()


@pytest.mark.parametrize("fault", ["raise", "hang", "garbage"])
async def test_tts_fault_before_audio_is_spoken_by_the_fallback(fault: str) -> None:
    with rig() as r:
        ws = await open_session(r.host)
        r.tts.fault = fault
        events = await text_turn(ws, "tell me")
        assert events[-1]["response"]["status"] == "completed"
        assert spoken(events).startswith("You said: tell me.")
        loudest = peak(events)
        assert 0 < loudest < 1.2 * FALLBACK_AMPLITUDE * 32767, "every clause came from the fallback voice"
        r.tts.fault = None
        await assert_next_turn_is_normal(ws)
        await ws.close()


async def test_tts_fault_mid_clause_has_the_fallback_speak_the_rest_of_it() -> None:
    with rig() as r:
        ws = await open_session(r.host)
        r.tts.fault, r.tts.after = "raise", 2
        events = await text_turn(ws, "remember")
        assert not [e for e in events if e["type"] == "error"]
        assert events[-1]["response"]["status"] == "completed"
        assert spoken(events).startswith("You said: remember.")
        # the first clause's audio: every audio delta before the second clause's transcript delta
        first_clause: list[bytes] = []
        for e in events:
            if e["type"] == "response.output_audio_transcript.delta" and first_clause:
                break
            if e["type"] == "response.output_audio.delta":
                first_clause.append(base64.b64decode(e["delta"]))
        samples = np.abs(np.frombuffer(b"".join(first_clause), "<i2").astype(np.int32))
        primary_part = samples[:2 * 20 * 24]  # the two 20 ms chunks the primary made before it failed
        assert np.max(primary_part) > 0.8 * PRIMARY_AMPLITUDE * 32767
        tail = samples[-10 * 24:]  # the clause's last 10 ms: the fallback's voice, not silence
        assert 0 < np.max(tail) < 1.2 * FALLBACK_AMPLITUDE * 32767, "the rest of the first clause: fallback"
        r.tts.fault = None
        await assert_next_turn_is_normal(ws)
        await ws.close()


async def test_tts_fault_mid_clause_whose_words_cannot_be_placed_fails_the_reply_with_an_error() -> None:
    with rig() as r:
        ws = await open_session(r.host)
        r.tts.fault, r.tts.after, r.tts.wrong_words = "raise", 2, True
        events = await text_turn(ws, "tell me")
        errors = [e for e in events if e["type"] == "error"]
        assert errors and errors[0]["error"]["code"] == "engine_error"
        assert "speech synthesis failed" in errors[0]["error"]["message"]
        r.tts.fault, r.tts.wrong_words = None, False
        await assert_next_turn_is_normal(ws)
        await ws.close()


def test_unspoken_is_what_follows_the_words_already_out() -> None:
    assert unspoken("Hello there, how are you?", ["Hello", "there,"]) == " how are you?"
    assert unspoken("Hello there.", ["Hello", "there."]) == ""
    assert unspoken("你好，世界。", ["你", "好，"]) == "世界。"
    assert unspoken("Hello there.", ["Goodbye"]) is None
    assert unspoken("Hi.", ["Hi.", "more"]) is None


def tone_turn_pcm() -> bytes:
    """0.8 s of a loud tone then 1.2 s of silence, pcm16 24 kHz: one turn for the RMS fake VAD."""
    t = np.arange(int(0.8 * 24_000)) / 24_000
    tone = (0.3 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2")
    return tone.tobytes() + bytes(2 * int(1.2 * 24_000))


async def spoken_turn(ws: Any) -> None:
    pcm = tone_turn_pcm()
    for offset in range(0, len(pcm), 1920):
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(pcm[offset:offset + 1920]).decode()}))


@pytest.mark.parametrize("fault", ["raise", "hang", "garbage"])
async def test_asr_fault_is_answered_with_didnt_catch_that_and_the_next_turn_works(fault: str) -> None:
    with rig() as r:
        ws = await open_session(r.host, manual=False)
        r.asr.fault = fault
        await spoken_turn(ws)
        events = await events_until_done(ws)
        failed = [e for e in events if e["type"] == "conversation.item.input_audio_transcription.failed"]
        assert failed and "speech recognition" in failed[0]["error"]["message"]
        assert events[-1]["response"]["status"] == "completed"
        assert spoken(events) == DIDNT_CATCH
        assert peak(events) > 0, "the user hears it"
        r.asr.fault = None
        await _wait_state(r, "asr", "ok", allow=("degraded",))
        await spoken_turn(ws)
        events = await events_until_done(ws)
        assert spoken(events).startswith("You said: hello there.")
        await ws.close()


async def test_vad_fault_switches_the_session_to_manual_turns_with_one_error() -> None:
    with rig() as r:
        ws = await open_session(r.host, manual=False)
        r.vad.fault = "raise"
        await spoken_turn(ws)
        events: list[dict[str, Any]] = []
        with pytest.raises(TimeoutError):
            while True:
                events.append(json.loads(await asyncio.wait_for(ws.recv(), 1.0)))
        errors = [e for e in events if e["type"] == "error"]
        assert len(errors) == 1, "one error, not one per append"
        assert errors[0]["error"]["code"] == "turn_detection_unavailable"
        assert "voice activity detection failed" in errors[0]["error"]["message"]
        updated = [e for e in events if e["type"] == "session.updated"]
        assert updated and "turn_detection" not in updated[-1]["session"]["audio"]["input"]
        async with httpx.AsyncClient() as http:
            health = (await http.get(f"http://{r.host}/healthz")).json()
            metrics = (await http.get(f"http://{r.host}/metrics")).text
        assert health["stages"]["vad"]["state"] in ("degraded", "down")
        assert 'bargein_stage_failures_total{stage="vad"} 1.0' in metrics
        # manual turns work meanwhile: the audio was buffered
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send(json.dumps({"type": "response.create"}))
        manual = await events_until_done(ws)
        assert spoken(manual).startswith("You said: hello there.")
        # the VAD is back: setting turn detection again retries it
        r.vad.fault = None
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}}))
        await spoken_turn(ws)
        events = await events_until_done(ws)
        assert not [e for e in events if e["type"] == "error"]
        assert any(e["type"] == "input_audio_buffer.speech_started" for e in events)
        assert events[-1]["response"]["status"] == "completed"
        await ws.close()


async def test_a_down_llm_is_skipped_then_retried_in_the_background() -> None:
    with rig() as r:
        ws = await open_session(r.host)
        r.llm.fault = "raise"
        for _ in range(3):
            assert spoken(await text_turn(ws, "tell me")) == LLM_APOLOGY
        assert r.engines.health is not None and r.engines.health["llm"].state == "down"
        calls = r.llm.calls
        r.llm.fault = "hang"  # a down stage is not called: the apology comes at once, not after the deadline
        started = time.monotonic()
        skipped = await text_turn(ws, "tell me")
        assert spoken(skipped) == LLM_APOLOGY
        assert [e["error"]["code"] for e in skipped if e["type"] == "error"] == ["llm_unavailable"]
        assert time.monotonic() - started < DEADLINES.llm_first_token_s
        assert r.llm.calls - calls <= 2, "only the background probes reach the model"
        r.llm.fault = None
        await _wait_state(r, "llm", "ok")
        await assert_next_turn_is_normal(ws)
        await ws.close()


async def _wait_state(r: Rig, stage: str, state: str, *, allow: tuple[str, ...] = ()) -> None:
    assert r.engines.health is not None
    deadline = time.monotonic() + 10
    while r.engines.health[stage].state not in (state, *allow):
        assert time.monotonic() < deadline, r.engines.health[stage].snapshot()
        await asyncio.sleep(0.05)
