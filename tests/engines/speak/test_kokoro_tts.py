"""The Kokoro (hibari-tts) synthesiser with the real model, offline."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.audio.crossfade import Crossfader
from bargein.engines.base import SpeechSynthesizer
from bargein.engines.speak.kokoro_tts import MODEL_FILES, KokoroSynthesizer, load_kokoro
from bargein.values import CancelToken, SpeechChunk
from bargein.weights import WeightError

pytestmark = pytest.mark.slow

SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank."
PARAGRAPH = ("Good morning, and welcome back. Today we will look at three short examples. "
             "The first one is about cooking pasta. The second one is about the weather tomorrow.")


@pytest.fixture(scope="module")
def tts() -> Iterator[KokoroSynthesizer]:
    synthesizer = load_kokoro()
    yield synthesizer
    asyncio.run(synthesizer.aclose())


async def _collect(tts: KokoroSynthesizer, text: str, voice: str | None = None,
                   cancel: CancelToken | None = None) -> list[SpeechChunk]:
    return [c async for c in tts.synthesize(text, voice=voice, cancel=cancel or CancelToken())]


def _rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))) if len(audio) else 0.0


async def test_a_sentence_is_24khz_speech_of_sensible_length(tts: KokoroSynthesizer) -> None:
    assert isinstance(tts, SpeechSynthesizer)
    chunks = await _collect(tts, SENTENCE)
    assert chunks and all(c.sample_rate == 24_000 == tts.sample_rate for c in chunks)
    audio = np.concatenate([c.audio for c in chunks])
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert np.all(np.isfinite(audio)) and np.max(np.abs(audio)) <= 1.0
    assert _rms(audio) > 0.01
    seconds = len(audio) / 24_000
    words = len(SENTENCE.split())
    # Conversational speech runs at 2-4 words a second.
    assert words / 4.0 < seconds < words / 1.5
    # The model's ~350 ms leading silence is trimmed to about 100 ms, so first sound comes early.
    onset = int(np.flatnonzero(np.abs(audio) > 0.01)[0])
    assert onset < 0.2 * 24_000


async def test_sentences_stream_as_separate_chunks_with_every_word(tts: KokoroSynthesizer) -> None:
    chunks = await _collect(tts, PARAGRAPH)
    assert len(chunks) == 4
    words = [w.word for c in chunks for w in c.words]
    assert words == PARAGRAPH.split()
    # Normalised text ("Dr." read as "Doctor", a date read as words) keeps the caller's words.
    tricky = "Dr. Smith paid $9.99 on 3/4/2024, didn't he?"
    assert [w.word for c in await _collect(tts, tricky) for w in c.words] == tricky.split()


async def test_word_timings_follow_the_speech(tts: KokoroSynthesizer) -> None:
    text = "I said extraordinarily, not no."
    (chunk,) = await _collect(tts, text)
    duration_ms = len(chunk.audio) * 1000 / 24_000
    timings = chunk.words
    assert [w.word for w in timings] == text.split()
    for a, b in itertools.pairwise(timings):
        assert a.end_ms <= b.start_ms
    assert all(0 <= w.start_ms < w.end_ms <= duration_ms for w in timings)
    by_word = {w.word: w.end_ms - w.start_ms for w in timings}
    assert by_word["extraordinarily,"] > 3 * by_word["I"]

    def segment(start_ms: float, end_ms: float) -> np.ndarray:
        return chunk.audio[int(start_ms * 24): int(end_ms * 24)]

    speech = _rms(np.concatenate([segment(w.start_ms, w.end_ms) for w in timings]))
    # Before the first word and after the last the model is silent; the words hold the sound.
    assert _rms(segment(0, timings[0].start_ms - 20)) < 0.05 * speech
    assert _rms(segment(timings[-1].end_ms + 60, duration_ms)) < 0.05 * speech


async def test_cancel_stops_within_one_chunk(tts: KokoroSynthesizer) -> None:
    cancel = CancelToken()
    received = []
    async for chunk in tts.synthesize(PARAGRAPH, voice=None, cancel=cancel):
        received.append(chunk)
        cancel.cancel("barge-in")
    assert len(received) == 1

    # Cancelled before the first chunk is ready: nothing at all arrives.
    cancel = CancelToken()
    stream = tts.synthesize(PARAGRAPH, voice=None, cancel=cancel)
    first = asyncio.ensure_future(anext(stream, None))
    await asyncio.sleep(0)
    cancel.cancel()
    assert await first is None

    # And a cancelled token yields nothing; the synthesiser keeps working afterwards.
    assert await _collect(tts, PARAGRAPH, cancel=cancel) == []
    assert len(await _collect(tts, "Still here.")) == 1


async def test_sessions_share_the_model_sentence_by_sentence(tts: KokoroSynthesizer) -> None:
    """A short reply is not queued behind a long one: jobs interleave per sentence."""
    finished: list[str] = []

    async def run(name: str, text: str) -> None:
        await _collect(tts, text)
        finished.append(name)

    await asyncio.gather(run("long", PARAGRAPH + " " + PARAGRAPH), run("short", "Yes, of course."))
    assert finished == ["short", "long"]


async def test_voices_resolve_without_crashing(tts: KokoroSynthesizer) -> None:
    assert "heart" in tts.voices
    for name in (None, "", "alloy", "echo", "af_heart", "HEART", "no-such-voice"):
        assert tts.resolve_voice(name) in tts.voices
    chunks = await _collect(tts, "Hello.", voice="no-such-voice")
    assert chunks and _rms(chunks[0].audio) > 0.01
    assert await _collect(tts, "   ") == []


async def test_real_chunks_join_without_clicks(tts: KokoroSynthesizer) -> None:
    chunks = await _collect(tts, PARAGRAPH)
    # Also cut real speech mid-word and join pieces of different sentences: worst-case seams.
    cut = [c.audio[len(c.audio) // 3: 2 * len(c.audio) // 3] for c in chunks]
    for pieces in ([c.audio for c in chunks], cut):
        inside = max(float(np.max(np.abs(np.diff(p)))) for p in pieces)
        fader = Crossfader(24_000)
        emitted = [fader.push(SpeechChunk(p, 24_000)).audio for p in pieces]
        joined = np.concatenate([*emitted, fader.flush().audio])
        assert len(joined) == sum(len(p) for p in pieces) - fader.overlap * (len(pieces) - 1)
        seams = np.cumsum([len(p) - fader.overlap for p in pieces])[:-1]
        for seam in seams:
            region = joined[seam - 2 * fader.overlap: seam + 2 * fader.overlap]
            assert float(np.max(np.abs(np.diff(region)))) <= inside


def _copy_assets(tmp_path: Path) -> Path:
    import hibari

    source = Path(hibari.__file__).parent / "assets"
    target = tmp_path / "assets"
    target.mkdir()
    for name in MODEL_FILES:
        shutil.copy(source / name, target / name)
    return target


def test_a_tampered_weight_file_is_refused(tmp_path: Path) -> None:
    assets = _copy_assets(tmp_path)
    KokoroSynthesizer(assets_dir=assets)  # the intact copy loads
    model = assets / "hibari.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(WeightError, match=r"hibari\.onnx"):
        KokoroSynthesizer(assets_dir=assets)
    model.unlink()
    with pytest.raises(WeightError, match="missing"):
        KokoroSynthesizer(assets_dir=assets)


async def test_a_very_long_sentence_is_cut_into_several_chunks(tts: KokoroSynthesizer) -> None:
    text = ("When you get to the station, walk past the ticket machines, take the stairs on your left, "
            "cross the footbridge over the tracks, turn right at the bakery on the corner, follow the "
            "river for about ten minutes until you see the old mill, and then knock on the blue door "
            "next to the garden gate where my aunt has lived for nearly forty years.")
    chunks = await _collect(tts, text)
    assert len(chunks) >= 2
    assert [w.word for c in chunks for w in c.words] == text.split()
    assert all(_rms(c.audio) > 0.01 for c in chunks)


def test_a_cached_voice_that_does_not_match_its_pin_is_refused(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Extra voices are used only from hibari's cache (never downloaded) and are checked like the rest."""
    monkeypatch.setenv("HIBARI_HOME", str(tmp_path))
    assert KokoroSynthesizer(default_voice="alloy").voices == ("heart",)
    (tmp_path / "af_kore.int8.onnx").write_bytes(b"not the kore voice")
    with pytest.raises(WeightError, match=r"af_kore\.int8\.onnx"):
        KokoroSynthesizer()
