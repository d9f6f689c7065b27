"""Follows the segment being spoken: partial recognition while it lasts, speculative recognition at its pause.

While the user speaks, partial recognition runs at most once a second (``input_audio_transcription.delta``
and the words semantic endpointing needs, fed to the machine as :class:`PartialTranscript`). When the
machine sees the first silence it asks for speculative recognition (:class:`SilenceBegan`); the guess is
fed back as :class:`GuessTranscribed`, and the machine decides whether a reply is worth prefetching.
Nothing here decides anything about the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from bargein.engines.base import SpeechRecognizer, Transcript
from bargein.protocol.server_events import event
from bargein.session.core import vocabulary as v
from bargein.session.input_buffer import InputBuffer
from bargein.session.outbound import Outgoing
from bargein.session.speculation import Speculator
from bargein.session.transcription import Hints

log = logging.getLogger(__name__)
PARTIAL_EVERY_MS = 1000.0
"""Partial recognition runs at most this often while the user speaks (and never twice at once)."""
FRAME_MS = 32.0
Feed = Callable[[v.Event], None]
Emit = Callable[[Outgoing], None]


class SegmentTracker:
    """Partial and speculative recognition of the segment being spoken, for one session.

    ``padding_ms()`` is the prefix padding the committed item will have, so partials hear the same start.
    """

    def __init__(self, asr: SpeechRecognizer, buffer: InputBuffer, speculator: Speculator, *, feed: Feed,
                 emit: Emit, padding_ms: Callable[[], int], hints: Hints = lambda: (None, None),
                 partials: bool = True) -> None:
        self.asr = asr
        self.buffer = buffer
        self.speculator = speculator
        self.feed = feed
        self.emit = emit
        self.padding_ms = padding_ms
        self.hints = hints
        """The session's transcription language and prompt: partials use them like the final does."""
        self.partials = partials
        self._speaking: str | None = None
        self._onset_ms = 0.0
        self._partial_task: asyncio.Task[None] | None = None
        self._partial_at_ms = 0.0
        self._partial_sent = ""
        """The partial transcript already sent for the speaking segment (deltas extend it)."""

    @property
    def speaking(self) -> str | None:
        """The segment being spoken, if any."""
        return self._speaking

    def frame(self, frame: v.VadFrame) -> None:
        """Every VAD frame: start partial recognition when one is due."""
        if self._speaking is None:
            return
        if (self.partials and frame.end_ms - self._partial_at_ms >= PARTIAL_EVERY_MS
                and (self._partial_task is None or self._partial_task.done())):
            self._partial_at_ms = frame.end_ms
            self._partial_task = asyncio.create_task(self._partial(self._speaking))

    def started(self, item_id: str, onset_ms: float) -> None:
        """Speech began: a new segment."""
        self._speaking = item_id
        self._onset_ms = onset_ms
        self._partial_at_ms = onset_ms
        self._partial_sent = ""

    def stopped(self, item_id: str) -> None:
        """The endpoint came (or the turn was dropped): no more partials for this segment."""
        if self._speaking == item_id:
            self._speaking = None

    def audio(self, end_ms: float | None = None) -> npt.NDArray[np.float32]:
        """The speaking segment's audio so far, with its prefix padding."""
        return self.buffer.peek(max(0.0, self._onset_ms - self.padding_ms()), end_ms)

    async def _partial(self, item_id: str) -> None:
        language, prompt = self.hints()
        partial = getattr(self.asr, "transcribe_partial", None)
        try:
            if partial is not None:  # keyed by this session: a newer partial replaces one still waiting
                transcript: Transcript = await partial(self.audio(), language=language, prompt=prompt, key=self)
            else:
                transcript = await self.asr.transcribe(self.audio(), language=language, prompt=prompt)
        except Exception:
            log.exception("partial recognition failed")
            return
        if self._speaking == item_id:
            self._report_partial(item_id, transcript.text.strip())

    def _report_partial(self, item_id: str, text: str) -> None:
        self.feed(v.PartialTranscript(item_id, text))
        if text.startswith(self._partial_sent) and len(text) > len(self._partial_sent):
            self.emit(Outgoing(event("conversation.item.input_audio_transcription.delta", item_id=item_id,
                                     content_index=0, delta=text[len(self._partial_sent):])))
            self._partial_sent = text

    # -- speculation --------------------------------------------------------------------------------

    def silence_began(self, item_id: str, at_ms: float) -> None:
        """Start recognising the turn so far; the machine hears the guess and may prefetch a reply."""
        if self._speaking != item_id:
            return
        task = self.speculator.recognise(item_id, self.audio(at_ms + FRAME_MS))
        if task is not None:
            task.add_done_callback(lambda done: self._guessed(item_id, done))

    def _guessed(self, item_id: str, task: asyncio.Task[Transcript]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        transcript = task.result()
        if self._speaking == item_id:
            self._report_partial(item_id, transcript.text.strip())
        self.feed(v.GuessTranscribed(item_id, transcript))

    def close(self) -> None:
        """Stop partial recognition and speculation."""
        if self._partial_task is not None:
            self._partial_task.cancel()
        self.speculator.close()
