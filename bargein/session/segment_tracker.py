"""Follows the segment being spoken: partial recognition while it lasts, speculative recognition at its pause.

While the user speaks, partial recognition runs at most once a second (``input_audio_transcription.delta``
and the words semantic endpointing needs, fed to the machine as :class:`PartialTranscript`). When the
machine sees the first silence it asks for speculative recognition (:class:`SilenceBegan`), and partials
stop until the speech resumes: the guess hears everything a new partial would, and one would only compete
with the guess and the reply prefetched from it for the CPU (a partial already running finishes: the prompt
warming its words start saves the prefetch most of its prompt).
The guess is fed back as :class:`GuessTranscribed`, and the machine decides whether a reply is worth
prefetching (or, over a paused reply, whether the words cut it; then the turn's loud stretch is also
recognised primed, and fed back as a second :class:`GuessTranscribed` with both). For semantic and tiered
endpointing it also asks for the end-of-turn model's score when the machine says (:class:`ScoreTurnEnd`),
fed back as :class:`TurnEndScored`.
Nothing here decides anything about the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from bargein.engines.base import EndOfTurnModel, SpeechRecognizer, TurnModelBusy
from bargein.protocol.server_events import event
from bargein.session.core import vocabulary as v
from bargein.session.core.listening.over_reply import prompt_for, vocabulary_prompt
from bargein.session.input_buffer import InputBuffer
from bargein.session.outbound import Outgoing
from bargein.session.speculation import Speculator
from bargein.session.transcription import Hints
from bargein.values import LISTEN_SAMPLE_RATE, Transcript

log = logging.getLogger(__name__)
PARTIAL_EVERY_MS = 1000.0
"""Partial recognition runs at most this often while the user speaks (and never twice at once)."""
PARTIAL_WINDOW_MS = 10_000.0
"""A partial hears at most the segment's last 10 s, so each costs the same however long the user talks
(past that its text is not a prefix of the next, so deltas stop until the final transcript)."""
MAX_GUESS_MS = 28_000.0
"""A segment longer than this is not recognised speculatively: its final recognition runs in slices."""
FRAME_MS = 32.0
Feed = Callable[[v.Event], None]
Emit = Callable[[Outgoing], None]


class SegmentTracker:
    """Partial and speculative recognition of the segment being spoken, for one session.

    ``padding_ms()`` is the prefix padding the committed item will have, so partials hear the same start.
    """

    def __init__(self, asr: SpeechRecognizer, buffer: InputBuffer, speculator: Speculator, *, feed: Feed,
                 emit: Emit, padding_ms: Callable[[], int], hints: Hints = lambda: (None, None),
                 partials: bool = True, turn_model: EndOfTurnModel | None = None,
                 heard_so_far: Callable[[str], None] = lambda text: None) -> None:
        self.asr = asr
        self.heard_so_far = heard_so_far
        """Hears each partial transcript of a whole segment (the session warms the LLM's prompt with it)."""
        self.turn_model = turn_model
        self._score_task: asyncio.Task[None] | None = None
        self._score_item: str | None = None
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
        self._silent = False
        """The speaking segment is in a silence (since :meth:`silence_began`, until :meth:`resumed`)."""
        self._partial_at_ms = 0.0
        self._partial_sent = ""
        """The partial transcript already sent for the speaking segment (deltas extend it)."""

    @property
    def speaking(self) -> str | None:
        """The segment being spoken, if any."""
        return self._speaking

    def frame(self, frame: v.VadFrame) -> None:
        """Every VAD frame: start partial recognition when one is due."""
        if self._speaking is None or self._silent:
            return
        if (self.partials and frame.end_ms - self._partial_at_ms >= PARTIAL_EVERY_MS
                and (self._partial_task is None or self._partial_task.done())):
            self._partial_at_ms = frame.end_ms
            self._partial_task = asyncio.create_task(self._partial(self._speaking))

    def started(self, item_id: str, onset_ms: float) -> None:
        """Speech began: a new segment."""
        self._speaking = item_id
        self._silent = False
        self._onset_ms = onset_ms
        self._partial_at_ms = onset_ms
        self._partial_sent = ""

    def resumed(self, item_id: str) -> None:
        """The segment's speech came back after a silence: partials are due again."""
        if self._speaking == item_id:
            self._silent = False

    def stopped(self, item_id: str) -> None:
        """The endpoint came (or the turn was dropped): no more partials or scores for this segment."""
        if self._speaking == item_id:
            self._speaking = None
        self.drop_score(item_id)

    def drop_score(self, item_id: str) -> None:
        """The silence being scored for ``item_id`` is over (speech came back, or the turn ended): its score
        could no longer count, so a request still queued for the shared model is withdrawn. Under load this
        sheds the scores that would come too late to matter, instead of running them."""
        task = self._score_task
        if self._score_item == item_id and task is not None:
            if task is not asyncio.current_task():  # a score that ended the turn itself has already counted
                task.cancel()
            self._score_task = self._score_item = None

    def audio(self, end_ms: float | None = None, *, window_ms: float | None = None) -> npt.NDArray[np.float32]:
        """The speaking segment's audio so far, with its prefix padding (only its last ``window_ms``)."""
        start_ms = max(0.0, self._onset_ms - self.padding_ms())
        if window_ms is not None:
            end = end_ms if end_ms is not None else self.buffer.end_sample * 1000.0 / LISTEN_SAMPLE_RATE
            start_ms = max(start_ms, end - window_ms)
        return self.buffer.peek(start_ms, end_ms)

    async def _partial(self, item_id: str) -> None:
        language, prompt = self.hints()
        partial = getattr(self.asr, "transcribe_partial", None)
        try:
            audio = self.audio(window_ms=PARTIAL_WINDOW_MS)
            if partial is not None:  # keyed by this session: a newer partial replaces one still waiting
                transcript: Transcript = await partial(audio, language=language, prompt=prompt, key=self)
            else:
                transcript = await self.asr.transcribe(audio, language=language, prompt=prompt)
        except Exception:
            log.exception("partial recognition failed")
            return
        if self._speaking == item_id:
            self._report_partial(item_id, transcript.text.strip())
            if transcript.text.strip() and len(audio) < PARTIAL_WINDOW_MS * LISTEN_SAMPLE_RATE / 1000:
                self.heard_so_far(transcript.text.strip())

    def _report_partial(self, item_id: str, text: str) -> None:
        self.feed(v.PartialTranscript(item_id, text))
        if text.startswith(self._partial_sent) and len(text) > len(self._partial_sent):
            self.emit(Outgoing(event("conversation.item.input_audio_transcription.delta", item_id=item_id,
                                     content_index=0, delta=text[len(self._partial_sent):])))
            self._partial_sent = text

    # -- speculation --------------------------------------------------------------------------------

    def score(self, item_id: str, at_ms: float, *, optional: bool = False) -> None:
        """Have the end-of-turn model judge the turn up to the silence that began at ``at_ms`` (the audio its
        speculative recognition heard); one score at a time per session. An ``optional`` score may be refused
        by a busy model: the turn then hears no score (the machine's plain silence)."""
        if self._speaking != item_id:
            return
        if self._score_task is not None:
            self._score_task.cancel()  # an older silence's score no longer counts
        self._score_task = asyncio.create_task(
            self._score(item_id, at_ms, self.audio(at_ms + FRAME_MS), optional=optional))
        self._score_item = item_id

    def silence_began(self, item_id: str, at_ms: float, *,
                      listen_span: tuple[float, float] | None = None, urgent: bool = False) -> None:
        """Start recognising the turn so far; the machine hears the guess and may prefetch a reply.
        With ``listen_span`` (a turn over a paused reply) its loud stretch so far is also recognised primed with
        the listening vocabulary, after the plain guess; ``urgent``: both go before other recognitions, and
        the primed one is still reported if the user speaks on (a command in it cuts the paused reply)."""
        if self._speaking != item_id:
            return
        self._silent = True  # a partial running now goes on: its words warm the prompt the prefetch will read
        if at_ms - self._onset_ms > MAX_GUESS_MS:
            return  # a long segment is recognised once, in slices, when it is committed
        task = self.speculator.recognise(item_id, self.audio(at_ms + FRAME_MS), urgent=urgent)
        if task is None:
            return
        task.add_done_callback(lambda done: self._guessed(item_id, at_ms, done))
        if listen_span is not None:
            self._guess_primed(item_id, at_ms, listen_span, task)

    def voice_ended(self, item_id: str, at_ms: float, listen_span: tuple[float, float]) -> None:
        """Over a paused reply the user's loud stretch ended while the room talks on: recognise it primed."""
        if self._speaking == item_id:
            self._guess_primed(item_id, at_ms, listen_span, None)

    def _guess_primed(self, item_id: str, at_ms: float, span: tuple[float, float],
                      plain: asyncio.Task[Transcript] | None) -> None:
        language, prompt = self.hints()
        vocabulary = prompt_for(language, prompt) if vocabulary_prompt(language) else None
        started = (self.speculator.recognise_primed(item_id, span, self.buffer.peek(*span), vocabulary)
                   if vocabulary is not None else None)
        if started is not None and started[1]:  # a stretch already recognised was reported then
            started[0].add_done_callback(lambda done: self._guessed_primed(item_id, at_ms, plain, done))

    async def _score(self, item_id: str, at_ms: float, audio: npt.NDArray[np.float32], *, optional: bool) -> None:
        probability: float | None = None
        if self.turn_model is not None:
            try:
                probability = await self.turn_model.probability(audio, optional=optional)
            except TurnModelBusy:
                pass  # shed under load: the turn goes on without a score, as if the model had not answered yet
            except Exception:  # the turn then waits the long silence; the session goes on
                log.exception("end-of-turn scoring failed")
        self.feed(v.TurnEndScored(item_id, at_ms, probability))

    def _guessed(self, item_id: str, at_ms: float, task: asyncio.Task[Transcript]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        transcript = task.result()
        if self._speaking == item_id:
            self._report_partial(item_id, transcript.text.strip())
        self.feed(v.GuessTranscribed(item_id, transcript, at_ms=at_ms))

    def _guessed_primed(self, item_id: str, at_ms: float, plain: asyncio.Task[Transcript] | None,
                        task: asyncio.Task[Transcript]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        # the plain guess is asked for first and served first: done, unless it was dropped or failed
        heard = (plain.result() if plain is not None and plain.done() and not plain.cancelled()
                 and plain.exception() is None else None)
        self.feed(v.GuessTranscribed(item_id, heard, task.result(), at_ms))

    def close(self) -> None:
        """Stop partial recognition and speculation."""
        for task in (self._partial_task, self._score_task):
            if task is not None:
                task.cancel()
        self.speculator.close()
