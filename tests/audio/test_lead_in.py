"""A reply starts with its voice: the first chunk's leading silence is cut, later clauses keep their pause."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import numpy as np

from bargein.audio.codecs import AudioFormat
from bargein.audio.lead_in import LEAD_IN_MS, trim_lead_in
from bargein.engines.base import LanguageModel, SpeechSynthesizer
from bargein.session.reply_pipeline import ReplyPipeline, ReplyPlan
from bargein.values import CancelToken, ChatMessage, GenerationOptions, SpeechChunk, WordTiming

RATE = 24_000
PAD_MS = 100.0


def padded_tone(pad_ms: float = PAD_MS, tone_ms: float = 300.0) -> SpeechChunk:
    """``pad_ms`` of a synthesiser's leading silence (a faint hiss under the sound level), then a tone."""
    pad = np.full(int(pad_ms * RATE / 1000), 1e-4, np.float32)
    tone = (0.3 * np.sin(2 * np.pi * 200 * np.arange(int(tone_ms * RATE / 1000)) / RATE)).astype(np.float32)
    word = WordTiming("hello", pad_ms, pad_ms + tone_ms)
    return SpeechChunk(np.concatenate([pad, tone]), RATE, (word,))


def first_sound_ms(audio: np.ndarray, rate: int = RATE) -> float:
    return 1000.0 * int(np.flatnonzero(np.abs(audio) > 3e-3)[0]) / rate


def test_the_leading_silence_is_cut_to_the_lead_in_and_the_words_move_with_it() -> None:
    trimmed = trim_lead_in(padded_tone())
    assert abs(first_sound_ms(trimmed.audio) - LEAD_IN_MS) < 0.1
    assert len(trimmed.audio) == len(padded_tone().audio) - int((PAD_MS - LEAD_IN_MS) * RATE / 1000) - 1
    assert abs(trimmed.words[0].start_ms - (LEAD_IN_MS + 1000 / RATE)) < 0.1
    assert abs(trimmed.words[0].end_ms - trimmed.words[0].start_ms - 300.0) < 1e-6


def test_a_chunk_that_starts_with_sound_or_holds_none_is_left_alone() -> None:
    loud = padded_tone(pad_ms=5.0)
    assert trim_lead_in(loud) is loud
    silent = SpeechChunk(np.zeros(2400, np.float32), RATE, ())
    assert trim_lead_in(silent) is silent


class PaddedSynthesizer(SpeechSynthesizer):
    """Speaks every clause as :func:`padded_tone`: 100 ms of leading silence, as Kokoro's ``lead_ms`` keeps."""

    sample_rate = RATE

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        yield padded_tone()


class TwoClauses(LanguageModel):
    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        for piece in ("Hello there.", " How are you today?"):
            yield piece


class AudioSink:
    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.marks: list[str] = []

    async def wait_for_room(self) -> None:
        return None

    def audio_ahead_ms(self) -> float | None:
        return None  # no playback clock: clauses keep their natural ends

    def reply_text(self, text: str) -> None:
        return None

    def reply_audio(self, payload: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        self.payloads.append(payload)

    def reply_mark(self, stage: str) -> None:
        self.marks.append(stage)

    def reply_tokens(self, count: int) -> None:
        return None


async def test_a_reply_opens_on_its_voice_but_keeps_the_pause_before_its_second_clause() -> None:
    sink = AudioSink()
    plan = ReplyPlan("resp_1", [ChatMessage("user", "hi")], True, None, AudioFormat())
    await ReplyPipeline(TwoClauses(), PaddedSynthesizer()).run(plan, sink, CancelToken())  # type: ignore[arg-type]
    assert sink.marks == ["llm_first_token", "first_clause", "tts_first_audio"], "the ledger's marks, once each"
    audio = AudioFormat().decode(b"".join(sink.payloads)).astype(np.float32) / 32768.0
    assert first_sound_ms(audio) < LEAD_IN_MS + 5, "the first clause's sound starts within the lead-in"
    frames = audio[:len(audio) // 120 * 120].reshape(-1, 120)  # 5 ms frames
    quiet = np.sqrt(np.mean(frames ** 2, axis=1)) < 3e-3
    runs, run = [], 0
    for frame_quiet in quiet[int(first_sound_ms(audio) // 5):]:
        run = run + 1 if frame_quiet else 0
        runs.append(run)
    assert 5 * max(runs) > PAD_MS - 20, f"the second clause keeps its pause ({5 * max(runs)} ms of quiet)"
