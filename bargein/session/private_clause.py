"""A reply's first clause, spoken before the turn is committed and kept where no client can hear it.

Speculation writes the reply's first tokens at the first silence; as soon as they make a clause, the TTS
speaks it into this private buffer. Only a reply that the duplex machine started after the endpoint can
read it back, and only for exactly the same clause, voice and pace; until then nothing of it leaves the
server. If the user goes on speaking, :meth:`PrivateClause.discard` stops the TTS within one chunk and
drops what it made. The buffer holds one clause, so it is bounded by the clause splitter's limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from bargein.engines.base import SpeechSynthesizer
from bargein.engines.speak.clauses import has_words
from bargein.values import CancelToken, SpeechChunk


class PrivateClause:
    """One clause being synthesised into a private buffer, readable once by the reply that adopts it."""

    def __init__(self, tts: SpeechSynthesizer, clause: str, voice: str | None, speed: float,
                 cancel: CancelToken) -> None:
        self.clause = clause
        self.voice = voice
        self.speed = speed
        self.chunks: list[SpeechChunk] = []
        self.error: BaseException | None = None
        self.discarded = False
        self._grew = asyncio.Event()
        self._done = asyncio.Event()
        self._task = asyncio.create_task(self._speak(tts, cancel))

    async def _speak(self, tts: SpeechSynthesizer, cancel: CancelToken) -> None:
        try:
            if not has_words(self.clause):  # nothing to say: the reply skips it too, so no synthesiser call
                return
            async for chunk in tts.synthesize(self.clause, voice=self.voice, cancel=cancel, speed=self.speed):
                if self.discarded:
                    return
                self.chunks.append(chunk)
                self._grew.set()
        except Exception as error:  # surfaces in the adopting reply, as a TTS failure would
            self.error = error
        finally:
            self._done.set()
            self._grew.set()

    @property
    def done(self) -> bool:
        """The whole clause has been synthesised (or synthesis stopped)."""
        return self._done.is_set()

    def matches(self, clause: str, voice: str | None, speed: float) -> bool:
        """True when this is the speech a reply wants (``clause`` in ``voice`` at ``speed``) and it is still kept."""
        return not self.discarded and (clause, voice, speed) == (self.clause, self.voice, self.speed)

    async def replay(self) -> AsyncIterator[SpeechChunk]:
        """The clause's chunks, those made already at once and the rest as they come."""
        index = 0
        while True:
            if index < len(self.chunks):
                index += 1
                yield self.chunks[index - 1]
                continue
            if self._done.is_set() or self.discarded:
                if self.error is not None:
                    raise self.error
                return
            self._grew.clear()
            await self._grew.wait()

    def discard(self) -> None:
        """Drop the speech (the user went on, or another reply started); the TTS stops via its cancel."""
        self.discarded = True
        self.chunks.clear()
        self._grew.set()
