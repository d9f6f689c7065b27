"""Engine worker processes killed with SIGKILL mid-turn on a real server: that turn gets its fallback,
the worker restarts, the next turn works, and another session on the same server is unaffected.

The workers are real processes running the deterministic fakes (slowed so the kill lands mid-request);
the real models in worker processes are covered by the slow test at the end.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeSynthesizer, FakeVad
from bargein.engines.health import Health
from bargein.engines.process.client import ProcessClient
from bargein.engines.process.wire import WorkerSpec
from bargein.engines.resilience import Deadlines, make_resilient
from bargein.engines.resilient_speech import ResilientSynthesizer
from bargein.engines.speak.tts_process import ProcessSynthesizer
from bargein.engines.transcribe.asr_process import ProcessRecognizer
from bargein.engines.transcribe.wer import word_error_rate
from bargein.session.core.reply_course import DIDNT_CATCH
from testdata.speech import librivox_clip, librivox_reference, pcm16_24k
from tests.server.test_faults import FALLBACK_AMPLITUDE, PRIMARY_AMPLITUDE, peak, spoken_turn
from tests.support.server import running_server
from tests.support.turns import events_until_done, open_session, spoken, text_turn

DEADLINES = Deadlines(asr_s=5.0, tts_first_chunk_s=5.0, tts_next_chunk_s=5.0)


@dataclass
class Rig:
    host: str
    engines: Engines
    asr: ProcessRecognizer
    tts: ProcessSynthesizer


@contextmanager
def rig() -> Iterator[Rig]:
    asr = ProcessRecognizer(WorkerSpec("bargein.engines.fakes:FakeRecognizer",
                                       {"transcripts": ("hello there",), "delay_s": 1.0}))
    # one chunk per clause, after a pause: a kill while a clause is asked for lands before its audio
    tts = ProcessSynthesizer(WorkerSpec("bargein.engines.fakes:FakeSynthesizer", {
        "ms_per_char": 5, "chunk_ms": 60_000, "delay_s": 0.3, "amplitude": PRIMARY_AMPLITUDE}))
    fallback = FakeSynthesizer(ms_per_char=5, chunk_ms=20, amplitude=FALLBACK_AMPLITUDE)
    llm = FakeLanguageModel(filler="First clause here. Second clause here. Third clause here.", token_delay_s=0.01)
    engines = make_resilient(Engines(FakeVad(), asr, llm, tts), fallback_tts=fallback, deadlines=DEADLINES,
                             health=Health(first_backoff_s=0.2, max_backoff_s=0.5))
    try:
        with running_server(engines) as host:
            yield Rig(host, engines, asr, tts)
    finally:
        asr.close()
        tts.close()


async def kill_when_busy(engine: ProcessClient, *, after_s: float = 0.0) -> int:
    """SIGKILL the engine's worker once it is serving a request; returns the pid killed."""
    deadline = time.monotonic() + 20
    while engine.queue_depth == 0:
        assert time.monotonic() < deadline, "the worker was never asked for anything"
        await asyncio.sleep(0.01)
    await asyncio.sleep(after_s)
    pid = engine.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return pid


async def wait_restarted(engine: ProcessClient, killed: int) -> None:
    deadline = time.monotonic() + 20
    while engine.pid in (None, killed):
        assert time.monotonic() < deadline, "the worker was not restarted"
        await asyncio.sleep(0.05)


async def wait_stage_usable(r: Rig, stage: str) -> None:
    assert r.engines.health is not None
    deadline = time.monotonic() + 10
    while r.engines.health[stage].state == "down":
        assert time.monotonic() < deadline, r.engines.health[stage].snapshot()
        await asyncio.sleep(0.05)


async def quiet(ws: Any, seconds: float) -> list[dict[str, Any]]:
    """Whatever ``ws`` receives within ``seconds`` (a bystander should receive nothing)."""
    events: list[dict[str, Any]] = []
    with pytest.raises(TimeoutError):
        while True:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), seconds)))
    return events


async def test_asr_worker_killed_under_the_turns_guess_is_recognised_again_by_the_restarted_worker() -> None:
    """The worker dies while it recognises the guess made at the turn's first silence: the guess is only a head
    start, so at the commit the restarted worker recognises the whole item and the turn is answered."""
    with rig() as r:
        ws = await open_session(r.host, manual=False)
        await spoken_turn(ws)
        killed = await kill_when_busy(r.asr, after_s=0.6)  # the guess is in flight once the speech has ended
        events = await events_until_done(ws)
        assert not [e for e in events if e["type"] == "conversation.item.input_audio_transcription.failed"]
        assert spoken(events).startswith("You said: hello there."), "answered, not told it was not caught"
        await wait_restarted(r.asr, killed)
        assert r.asr.restarts == 1
        await ws.close()


async def test_asr_worker_killed_twice_in_a_turn_says_it_did_not_catch_that_and_the_next_turns_work() -> None:
    with rig() as r:
        ws = await open_session(r.host, manual=False)
        bystander = await open_session(r.host, manual=False)
        await spoken_turn(ws)
        killed = await kill_when_busy(r.asr, after_s=0.6)  # the guess is in flight once the speech has ended
        await wait_restarted(r.asr, killed)
        killed = await kill_when_busy(r.asr, after_s=0.3)  # and then the whole item, recognised again
        events = await events_until_done(ws)
        failed = [e for e in events if e["type"] == "conversation.item.input_audio_transcription.failed"]
        assert failed and "speech recognition" in failed[0]["error"]["message"]
        assert events[-1]["response"]["status"] == "completed"
        assert spoken(events) == DIDNT_CATCH and peak(events) > 0, "the user hears that it did not catch that"
        assert await quiet(bystander, 0.5) == [], "the other session saw nothing"
        await wait_restarted(r.asr, killed)
        assert r.asr.restarts == 2
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://{r.host}/metrics")).text
        assert 'bargein_engine_worker_restarts_total{stage="asr"} 2.0' in metrics
        assert 'bargein_engine_worker_restarts_total{stage="tts"} 0.0' in metrics
        assert 'bargein_engine_worker_resident_memory_bytes{stage="tts"}' in metrics
        await wait_stage_usable(r, "asr")
        for session in (ws, bystander):
            await spoken_turn(session)
            events = await events_until_done(session)
            assert spoken(events).startswith("You said: hello there."), events[-1]
        await ws.close()
        await bystander.close()


async def test_tts_worker_killed_mid_reply_has_flite_speak_the_clause_and_the_next_turns_work() -> None:
    with rig() as r:
        ws = await open_session(r.host)
        bystander = await open_session(r.host)
        assert isinstance(r.engines.tts, ResilientSynthesizer)
        killer = asyncio.create_task(kill_when_busy(r.tts, after_s=0.1))
        events = await text_turn(ws, "tell me")
        killed = await killer
        assert events[-1]["response"]["status"] == "completed"
        assert not [e for e in events if e["type"] == "error"]
        assert spoken(events).startswith("You said: tell me.") and spoken(events).endswith("Third clause here.")
        assert r.engines.tts.fallback_clauses >= 1, "the fallback voice spoke what the dead worker could not"
        assert peak(events) > 0
        assert await quiet(bystander, 0.3) == []
        await wait_restarted(r.tts, killed)
        await wait_stage_usable(r, "tts")
        for session in (ws, bystander):
            events = await text_turn(session, "are you back")
            assert spoken(events).startswith("You said: are you back.")
            assert peak(events) > 0.8 * PRIMARY_AMPLITUDE * 32767, "spoken by the worker's voice again"
        await ws.close()
        await bystander.close()


@pytest.mark.slow
async def test_real_whisper_and_kokoro_workers_killed_mid_turn(tmp_path: Path) -> None:
    from bargein.engines.listen.silero_vad import SileroVad
    from bargein.engines.speak.flite_tts import FliteSynthesizer

    asr_flag, tts_flag = tmp_path / "asr", tmp_path / "tts"
    asr = ProcessRecognizer(WorkerSpec("tests.support.worker_faults:KillOnFinal", {
        "inner": WorkerSpec("bargein.engines.transcribe.whisper_asr:load_whisper", {"name": "tiny.en"}),
        "flag": str(asr_flag)}))
    tts = ProcessSynthesizer(WorkerSpec("tests.support.worker_faults:KillOnClause", {
        "inner": WorkerSpec("bargein.engines.speak.kokoro_tts:load_kokoro", {}), "flag": str(tts_flag)}))
    llm = FakeLanguageModel(filler="First clause here. Second clause here. Third clause here.")
    engines = make_resilient(Engines(SileroVad(), asr, llm, tts), fallback_tts=FliteSynthesizer(),
                             health=Health(first_backoff_s=0.2, max_backoff_s=1.0))
    clip = pcm16_24k(librivox_clip("0880"), silence_after_s=1.5)
    try:
        with running_server(engines) as host:
            ws = await open_session(host, manual=False)
            bystander = await open_session(host, manual=False)
            asr_flag.touch()
            await send_audio(ws, clip)
            events = await events_until_done(ws, timeout=60)
            # the kill lands on the turn's first recognition: the final one (the turn gets the fallback) or,
            # when a pause inside the clip started one, the speculative guess (the final then runs on the
            # restarted worker and the turn is answered); the fake-engine test above pins the fallback
            failed = [e for e in events if e["type"] == "conversation.item.input_audio_transcription.failed"]
            assert not asr_flag.exists(), "the worker was killed during the turn"
            if failed:
                assert spoken(events) == DIDNT_CATCH
            else:
                assert spoken(events).startswith("You said:")
            assert events[-1]["response"]["status"] == "completed" and peak(events) > 0
            await wait_stage_usable_engine(engines, "asr", asr)
            tts_flag.touch()
            await send_audio(bystander, clip)  # the other session: heard by the new Whisper worker
            events = await events_until_done(bystander, timeout=60)
            heard = [e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed"]
            assert heard and word_error_rate([librivox_reference("0880")], [heard[0]["transcript"]]) <= 0.35
            assert events[-1]["response"]["status"] == "completed"
            assert not [e for e in events if e["type"] == "error"]
            assert spoken(events).startswith("You said:") and spoken(events).endswith("Third clause here.")
            assert isinstance(engines.tts, ResilientSynthesizer) and engines.tts.fallback_clauses >= 1
            await wait_stage_usable_engine(engines, "tts", tts)
            events = await text_turn(ws, "are you back")
            assert spoken(events).startswith("You said: are you back.") and peak(events) > 0
            assert asr.restarts == 1 and tts.restarts == 1
            await ws.close()
            await bystander.close()
    finally:
        asr.close()
        tts.close()


async def send_audio(ws: Any, pcm: bytes) -> None:
    for offset in range(0, len(pcm), 9600):
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(pcm[offset:offset + 9600]).decode()}))


async def wait_stage_usable_engine(engines: Engines, stage: str, engine: ProcessClient) -> None:
    deadline = time.monotonic() + 60
    while engine.pid is None or (engines.health is not None and engines.health[stage].state == "down"):
        assert time.monotonic() < deadline, f"{stage} did not come back"
        await asyncio.sleep(0.1)
