"""The transcribe stage: committed user audio to text, with the protocol's transcription events.

A clip longer than :data:`SLICE_S` (a long ``input_audio`` item) is recognised slice by slice, each
slice its own job in the recogniser's fair queue, so other sessions' turns are served in between.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.engines.base import SpeechRecognizer
from bargein.engines.fair import urgent_task
from bargein.languages import join_units
from bargein.protocol.errors import EngineFailure
from bargein.protocol.server_events import event, transcription_usage
from bargein.session.core.listening.over_reply import prompt_for, vocabulary_prompt
from bargein.session.history import Item
from bargein.session.outbound import Outgoing
from bargein.values import LISTEN_SAMPLE_RATE, Transcript, WordTiming

log = logging.getLogger(__name__)
MIN_PRIMED_SAMPLES = 1600
"""A stretch under 0.1 s holds no word: not recognised a second time."""
SLICE_S = 28.0
"""Longest audio recognised as one job (Whisper's window is 30 s)."""
Hints = Callable[[], tuple[str | None, str | None]]
"""The session's ``transcription.language`` and ``prompt``, read at each recognition."""


class Transcriber:
    """Runs recognition of each user audio item and reports it; replies wait for it.

    ``on_done(item, transcript, primed, pending)`` hears of every recognition that ended (``None``: it
    failed); when the user's stretch was also to be recognised primed, first with ``pending`` true, then
    again with ``primed`` (``None`` if that failed).
    """

    def __init__(self, asr: SpeechRecognizer, emit: Callable[[Outgoing], None],
                 on_done: Callable[[Item, Transcript | None, Transcript | None, bool], None], hints: Hints,
                 logprobs: Callable[[], bool] = lambda: False,
                 present: Callable[[Item], bool] = lambda _item: True) -> None:
        self.asr = asr
        self.logprobs = logprobs
        """Whether the session asked for ``item.input_audio_transcription.logprobs``."""
        self.present = present
        """Whether the item is still in the conversation: a client that deleted it while it was being recognised
        hears nothing more of it (``on_done`` still hears, so a turn waiting on the words is not left waiting)."""
        self.emit = emit
        self.on_done = on_done
        self.hints = hints
        self._pending: dict[asyncio.Task[Transcript | None], None] = {}
        """Running recognitions, oldest first: an item may hold several clips, each its own job. Kept by task, not by
        item id: an item deleted while it is recognised and created again with its id has two running at once."""

    async def _in_slices(self, audio: npt.NDArray[np.float32], language: str | None,
                         prompt: str | None) -> Transcript:
        step = int(SLICE_S * LISTEN_SAMPLE_RATE)
        if len(audio) <= step:
            return await self.asr.transcribe(audio, language=language, prompt=prompt)
        parts: list[Transcript] = []
        words: list[WordTiming] = []
        for start in range(0, len(audio), step):
            # each slice is prompted with the text so far, as Whisper itself does across its windows
            context = " ".join(part.text for part in parts[-2:]).strip() or prompt
            part = await self.asr.transcribe(audio[start:start + step], language=language, prompt=context)
            parts.append(part)
            # a slice's words are timed from its own start: moved to the item's clock (logprobs, word timings)
            offset_ms = 1000.0 * start / LISTEN_SAMPLE_RATE
            words.extend(replace(w, start_ms=w.start_ms + offset_ms, end_ms=w.end_ms + offset_ms) for w in part.words)
        # join_units: Mandarin slices join without a space, as the words within one slice do
        return Transcript(text=join_units([p.text.strip() for p in parts if p.text.strip()]),
                          language=parts[0].language, no_speech_prob=min(p.no_speech_prob for p in parts),
                          avg_logprob=float(np.mean([p.avg_logprob for p in parts])), words=tuple(words))

    def start(self, item: Item, audio: npt.NDArray[np.float32], *, content_index: int,
              guessed: asyncio.Task[Transcript] | None = None, primed: npt.NDArray[np.float32] | None = None,
              primed_guess: asyncio.Task[Transcript] | None = None, urgent: bool = False) -> None:
        """Begin recognising ``audio`` for ``item.parts[content_index]``.

        ``guessed`` is a speculative recognition of the same turn started before its endpoint: its
        result stands for the whole (the audio after it is only the endpoint silence). ``primed``: a turn
        over the agent's reply, the stretch of the user's own voice, recognised at the same time with the
        listening vocabulary as prompt (for the listening decision only; the item keeps the plain text);
        ``primed_guess``, its speculative recognition at the turn's pause, stands for it as ``guessed`` does.
        ``urgent``: a paused reply waits for the verdict, so the recogniser serves these first.
        """
        task = urgent_task(self.recognise(item, audio, content_index, guessed, primed=primed,
                                          primed_guess=primed_guess), urgent=urgent)
        self._pending[task] = None
        task.add_done_callback(lambda done: self._pending.pop(done, None))

    async def recognise(self, item: Item, audio: npt.NDArray[np.float32], content_index: int,
                        guessed: asyncio.Task[Transcript] | None = None, *,
                        primed: npt.NDArray[np.float32] | None = None,
                        primed_guess: asyncio.Task[Transcript] | None = None) -> Transcript | None:
        """Recognise now (what :meth:`start` runs as a task): fills the item and emits the events."""
        language, prompt = self.hints()
        vocabulary = prompt_for(language, prompt) if primed is not None and vocabulary_prompt(language) else None
        second: asyncio.Task[Transcript] | None = None
        if primed is not None and vocabulary is not None:
            second = primed_guess or (asyncio.create_task(self.asr.transcribe(primed, language=language,
                                                                              prompt=vocabulary))
                                      if len(primed) >= MIN_PRIMED_SAMPLES else None)
        try:
            transcript = await self._guessed_or_heard(guessed, audio, language, prompt)
        except Exception as error:
            log.exception("transcription of %s failed", item.id)
            item.unheard = True
            self._emit_if_present(item, Outgoing(event(
                "conversation.item.input_audio_transcription.failed", item_id=item.id,
                content_index=content_index,
                error={"type": "server_error", "code": "asr_error",
                       "message": f"the transcription failed ({error.message})" if isinstance(error, EngineFailure)
                       else f"the transcription failed ({type(error).__name__})", "param": None})))
            if second is not None:
                second.cancel()
            self.on_done(item, None, None, False)
            return None
        text = transcript.text.strip()
        item.parts[content_index].text = text
        extra = {"logprobs": word_logprobs(transcript)} if self.logprobs() else {}
        self._emit_if_present(item, Outgoing(event(
            "conversation.item.input_audio_transcription.completed", item_id=item.id,
            content_index=content_index, transcript=text,
            usage=transcription_usage(len(audio) / 16_000), **extra)))
        self._emit_if_present(item, Outgoing(event("conversation.item.done", item=item.wire())))
        self.on_done(item, transcript, None, second is not None)
        if second is not None:  # the verdict may come now (a command), else it waits for the primed one
            self.on_done(item, transcript, await _settled(second), False)
        return transcript

    def _emit_if_present(self, item: Item, outgoing: Outgoing) -> None:
        if self.present(item):
            self.emit(outgoing)

    async def _guessed_or_heard(self, guessed: asyncio.Task[Transcript] | None, audio: npt.NDArray[np.float32],
                                language: str | None, prompt: str | None) -> Transcript:
        """The speculative recognition's result, or the audio recognised now when there was none, it was
        cancelled under us (a guess given up by the speculator is not this turn's end: it still needs words) or it
        failed (the guess is only a head start: the item fails only if its own recognition does too), unless it
        missed its deadline."""
        if guessed is not None:
            try:
                return await guessed
            except asyncio.CancelledError:
                if not _cancelled_under_us(guessed):
                    raise  # this recognition itself is being cancelled
                log.warning("a speculative recognition adopted at the endpoint was cancelled: recognising again")
            except Exception as error:
                if isinstance(error.__cause__, TimeoutError):
                    raise  # the user has already waited a whole deadline: a second would double it
                log.warning("a speculative recognition adopted at the endpoint failed: recognising again",
                            exc_info=True)
        return await self._in_slices(audio, language, prompt)

    async def wait_all(self) -> None:
        """Until every pending recognition has finished (failures included)."""
        pending = list(self._pending)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def tasks(self) -> list[asyncio.Task[Transcript | None]]:
        """The recognitions still running."""
        return list(self._pending)


def _cancelled_under_us(awaited: asyncio.Task[Transcript]) -> bool:
    """After ``await awaited`` raised ``CancelledError``: whether it was ``awaited`` that someone cancelled, not
    the task awaiting it."""
    current = asyncio.current_task()
    return awaited.cancelled() and not (current is not None and current.cancelling())


async def _settled(task: asyncio.Task[Transcript] | None) -> Transcript | None:
    """A second recognition's result, or ``None`` if there was none or it failed (the first one decides alone)."""
    if task is None:
        return None
    try:
        return await task
    except asyncio.CancelledError:
        if not _cancelled_under_us(task):
            raise
        return None  # given up under us: the first recognition decides alone
    except Exception:
        log.exception("the primed recognition failed")
        return None


def word_logprobs(transcript: Transcript) -> list[dict[str, Any]]:
    """The transcript's words as Realtime ``logprobs`` entries (one per word: Whisper's word probability)."""
    return [{"token": word.word, "logprob": math.log(max(word.probability, 1e-12)),
             "bytes": list(word.word.encode("utf-8"))}
            for word in transcript.words if word.probability is not None]
