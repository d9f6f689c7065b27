"""Recognises the segment being spoken before its endpoint, as the machine asks: partial recognition
(:class:`RecognisePartial`, fed back as :class:`PartialTranscript`; the words the machine reports are sent as
``input_audio_transcription.delta``), speculative recognition at its pause (:class:`SilenceBegan`, fed back as
:class:`GuessTranscribed`; over a paused reply its loud stretch is also recognised primed, at the pause or when the
user's voice ended, :class:`VoiceEnded`, and fed back as a second :class:`GuessTranscribed` with both), and the
end-of-turn model's score (:class:`ScoreTurnEnd`, fed back as :class:`TurnEndScored`); and the language model's
end-of-sentence estimate asked with the pause's speculative reply, fed back as :class:`TextEndEstimate`.
Nothing here decides anything about the turn: when each is due is the machine's (:mod:`bargein.session.core.partials`).
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
FRAME_MS = 32.0
Feed = Callable[[v.Event], None]
Emit = Callable[[Outgoing], None]


class SegmentTracker:
    """Partial and speculative recognition of the segment being spoken, and its end-of-turn score, for one session.
    It keeps only the work it runs (a partial, a score) and the transcript already sent as deltas."""

    def __init__(self, asr: SpeechRecognizer, buffer: InputBuffer, speculator: Speculator, *, feed: Feed,
                 emit: Emit, hints: Hints = lambda: (None, None), turn_model: EndOfTurnModel | None = None) -> None:
        self.asr = asr
        self.turn_model = turn_model
        self._score_task: asyncio.Task[None] | None = None
        self._score_item: str | None = None
        self.buffer = buffer
        self.speculator = speculator
        self.feed = feed
        self.emit = emit
        self.hints = hints
        """The session's transcription language and prompt: partials use them like the final does."""
        self._partial_task: asyncio.Task[None] | None = None
        self._sent: tuple[str, str] = ("", "")
        """The item last reported, and the partial transcript already sent for it (deltas extend it)."""
        self._closed = False
        """The session closed: an estimate its close cancelled is not fed back (the machine would act on it)."""

    def drop_score(self, item_id: str) -> None:
        """The silence being scored for ``item_id`` is over (speech came back, or the turn ended): its score
        could no longer count, so a request still queued for the shared model is withdrawn. Under load this
        sheds the scores that would come too late to matter, instead of running them."""
        task = self._score_task
        if self._score_item == item_id and task is not None:
            if task is not asyncio.current_task():  # a score that ended the turn itself has already counted
                task.cancel()
            self._score_task = self._score_item = None

    def audio(self, start_ms: float, end_ms: float | None = None, *,
              window_ms: float | None = None) -> npt.NDArray[np.float32]:
        """The segment's audio from ``start_ms`` (its onset less the padding) to ``end_ms`` (the newest sample),
        only its last ``window_ms``."""
        if window_ms is not None:
            end = end_ms if end_ms is not None else self.buffer.end_sample * 1000.0 / LISTEN_SAMPLE_RATE
            start_ms = max(start_ms, end - window_ms)
        return self.buffer.peek(start_ms, end_ms)

    def recognise_partial(self, ask: v.RecognisePartial) -> None:
        """Recognise the segment so far (the machine runs one at a time); its words are fed back, empty on failure."""
        self._partial_task = asyncio.create_task(self._partial(ask))

    async def _partial(self, ask: v.RecognisePartial) -> None:
        language, prompt = self.hints()
        text, whole = "", True
        try:
            audio = self.audio(ask.start_ms, window_ms=ask.window_ms)
            whole = len(audio) < ask.window_ms * LISTEN_SAMPLE_RATE / 1000
            # keyed by this session: a newer partial replaces one still waiting (a recogniser without a quick
            # partial path recognises the clip as a final)
            transcript = await self.asr.transcribe_partial(audio, language=language, prompt=prompt, key=self)
            text = transcript.text.strip()
        except Exception:
            log.exception("partial recognition failed")
        self.feed(v.PartialTranscript(ask.item_id, text, whole))

    def report_partial(self, item_id: str, text: str) -> None:
        """Words of the segment still being spoken: send what extends the transcript already sent for it."""
        sent = self._sent[1] if self._sent[0] == item_id else ""
        if text.startswith(sent) and len(text) > len(sent):
            self.emit(Outgoing(event("conversation.item.input_audio_transcription.delta", item_id=item_id,
                                     content_index=0, delta=text[len(sent):])))
            self._sent = (item_id, text)

    # -- speculation --------------------------------------------------------------------------------

    def score(self, ask: v.ScoreTurnEnd) -> None:
        """Have the end-of-turn model judge the turn up to the silence that began at ``ask.at_ms`` (the audio its
        speculative recognition heard); one score at a time per session. An optional score may be refused
        by a busy model: the turn then hears no score (the machine's plain silence)."""
        if self._score_task is not None:
            self._score_task.cancel()  # an older silence's score no longer counts
        self._score_task = asyncio.create_task(
            self._score(ask.item_id, ask.at_ms, self.audio(ask.start_ms, ask.at_ms + FRAME_MS), optional=ask.optional))
        self._score_item = ask.item_id

    def silence_began(self, began: v.SilenceBegan) -> None:
        """Start recognising the turn so far, when the machine says a guess is due; the machine hears the guess
        and may prefetch a reply. With ``listen_span`` (a turn over a paused reply) its loud stretch so far is also
        recognised primed with the listening vocabulary, after the plain guess; ``urgent``: both go before other
        recognitions, and the primed one is still reported if the user speaks on (a command in it cuts the paused
        reply)."""
        if not began.guess:
            return  # a long segment is recognised once, in slices, when it is committed
        item_id, at_ms = began.item_id, began.at_ms
        task = self.speculator.recognise(item_id, self.audio(began.start_ms, at_ms + FRAME_MS), urgent=began.urgent)
        if task is None:
            return
        task.add_done_callback(lambda done: self._guessed(item_id, at_ms, done))
        if began.listen_span is not None:
            self._guess_primed(item_id, at_ms, began.listen_span, task)

    def voice_ended(self, item_id: str, at_ms: float, listen_span: tuple[float, float]) -> None:
        """Over a paused reply the user's loud stretch ended while the room talks on: recognise it primed."""
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

    def follow_text_end(self, item_id: str, words: str, task: asyncio.Future[float | None] | None) -> None:
        """Feed the language model's end-of-sentence estimate for the guess ``words`` back when it comes, or, with
        no probability, that none will (it failed, was dropped with its guess, the model had none, or ``task`` is
        ``None``: it was never started), so the endpoint waits for it no longer; never within the action that asked
        (the machine is still handing out its actions)."""
        if task is None:
            task = asyncio.get_running_loop().create_future()
            task.set_result(None)
        task.add_done_callback(lambda done: self._estimated(item_id, words, done))

    def _estimated(self, item_id: str, words: str, task: asyncio.Future[float | None]) -> None:
        if self._closed:
            return
        failed = task.cancelled() or task.exception() is not None
        self.feed(v.TextEndEstimate(item_id, words, None if failed else task.result()))

    def _guessed(self, item_id: str, at_ms: float, task: asyncio.Task[Transcript]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        self.feed(v.GuessTranscribed(item_id, task.result(), at_ms=at_ms))  # its words are reported as a partial's

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
        self._closed = True
        for task in (self._partial_task, self._score_task):
            if task is not None:
                task.cancel()
        self.speculator.close()
