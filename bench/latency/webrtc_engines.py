"""The engines ``bench.latency.webrtc`` serves with (factories for :mod:`bench.harness.engine_server`).

- :func:`instant_engines`: the real Silero VAD, a recogniser that hears each turn as the question the clip asks,
  a language model whose reply runs on long enough to be interrupted, and :class:`WordBurstSynthesizer`, whose
  words a client can count in the audio it played, so what the history keeps of a cut reply can be held against
  what was heard without the server's word timings.
- :func:`whisper_engines`: the same with the embedded Whisper (tiny.en) in place of the scripted recogniser, for
  the WER of the user's turns under jitter and loss.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from bargein.values import CancelToken, SpeechChunk, WordTiming

FILLER = " ".join(["and here is one more thing I would like to tell you about the weather"] * 8)
"""What the scripted reply says after ``You said: ...``: about 20 s of speech, long enough to cut."""
WORD_GAP_MS = 80.0
"""The silence after each word: wider than the Opus codec's ringing, so words stay countable at the client."""
MS_PER_CHAR = 45.0
MIN_WORD_MS = 120.0


def word_bursts(text: str) -> list[WordTiming]:
    """Each word's tone burst (``MS_PER_CHAR`` a character, at least ``MIN_WORD_MS``), then ``WORD_GAP_MS``."""
    timings, at = [], 0.0
    for word in text.split():
        length = max(MIN_WORD_MS, MS_PER_CHAR * len(word))
        timings.append(WordTiming(word, at, at + length))
        at += length + WORD_GAP_MS
    return timings


class WordBurstSynthesizer(FakeSynthesizer):
    """Speaks each word as a 220 Hz tone burst followed by silence, in 100 ms chunks, with exact word timings."""

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """The bursts of ``text``, chunk by chunk (``speed`` is ignored: the word gaps must stay countable)."""
        words = word_bursts(text)
        total_ms = words[-1].end_ms + WORD_GAP_MS if words else 0.0
        envelope = np.zeros(int(total_ms * 24), np.float32)
        for word in words:
            envelope[int(word.start_ms * 24):int(word.end_ms * 24)] = self.amplitude
        tone = envelope * np.sin(2 * np.pi * 220 * np.arange(len(envelope)) / 24_000).astype(np.float32)
        step = int(self.chunk_ms * 24)
        for start in range(0, len(tone), step):
            if cancel.cancelled:
                return
            start_ms = start / 24
            chunk_words = tuple(WordTiming(w.word, w.start_ms - start_ms, w.end_ms - start_ms)
                                for w in words if start_ms <= w.start_ms < start_ms + self.chunk_ms)
            yield SpeechChunk(tone[start:start + step], 24_000, chunk_words)


def _question_texts() -> tuple[str, ...]:
    from bench.harness.question_clips import question_turns

    return tuple(turn.text.lower() for turn in question_turns())


def instant_engines() -> Engines:
    """Silero VAD, the clips' questions as transcripts, a long reply, countable words."""
    return Engines(SileroVad(), FakeRecognizer(_question_texts()), FakeLanguageModel(filler=FILLER),
                   WordBurstSynthesizer(), description={"engines": "instant, word bursts"})


def whisper_engines() -> Engines:
    """As :func:`instant_engines`, with the embedded Whisper tiny.en hearing the user."""
    from bargein.engines.transcribe.whisper_asr import load_whisper

    return Engines(SileroVad(), load_whisper("tiny.en"), FakeLanguageModel(filler=FILLER), WordBurstSynthesizer(),
                   description={"engines": "Whisper tiny.en, instant reply, word bursts"})
