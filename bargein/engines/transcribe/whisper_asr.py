"""Whisper speech recognition shared by every session: one model, one or two worker threads, a fair queue.

Sessions ``await`` :meth:`WhisperRecognizer.transcribe` (finals) and
:meth:`WhisperRecognizer.transcribe_partial` (during speech). Both only enqueue a job and await a
future, so the event loop never blocks. A worker thread runs the jobs: urgent finals first (asked
for in a :func:`~bargein.engines.fair.urgent_task`: the words of a segment a paused reply waits on), then
the other finals, each lane's jobs per session in arrival order and the sessions in turn
(:mod:`bargein.engines.fair`; at most ``max_waiting_per_session`` waiting each, both lanes together),
then partials in arrival order; a newer partial of the
same ``key`` (a session) replaces an older one still waiting, and every caller of the replaced one
gets the newer result.
Jobs whose callers all went away (a barge-in cancels a speculative final) are skipped unrun.
With ``final_workers`` (one, as :func:`load_whisper` loads the default models), more threads take the same
finals but never a partial, so the guess at a pause does not wait for a partial still running (up to 200
to 300 ms on the 2-core target), and two sessions' finals are recognised at once.

Why no batching: on the two-core target CTranslate2 ran a batch of 4 or 8 short clips no faster
than the same clips one after another (``bench/latency/asr_latency.py --batch``), so a batch would only make
the first caller wait for the last. The cheap path is a short encoder window, see
:mod:`bargein.engines.transcribe.whisper_decode`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bargein.engines.base import ASRCapabilities, SpeechRecognizer
from bargein.engines.fair import EngineBusy, FairQueue, owner, urgent
from bargein.engines.transcribe.asr_models import WhisperSource, resolve_model
from bargein.engines.transcribe.whisper_decode import FINAL, PARTIAL, DecodeOptions, WhisperCore
from bargein.values import LISTEN_SAMPLE_RATE, Float32Audio, Transcript

log = logging.getLogger(__name__)


class RecognizerBusy(EngineBusy):
    """Too many requests are waiting: the caller should drop this one (backpressure, not a crash)."""


class RecognizerClosed(RuntimeError):
    """The recognizer was closed before the request ran."""


@dataclass
class _Job:
    audio: Float32Audio
    language: str | None
    prompt: str | None
    options: DecodeOptions
    key: Hashable | None
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Transcript]]] = field(default_factory=list)

    def wanted(self) -> bool:
        return any(not future.done() for _, future in self.waiters)


def _settle(future: asyncio.Future[Transcript], result: Transcript | None, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert result is not None
        future.set_result(result)


class WhisperRecognizer(SpeechRecognizer):
    """A :class:`~bargein.engines.base.SpeechRecognizer` on faster-whisper (CTranslate2, int8, CPU)."""

    description: str = "whisper"
    """The model and where it came from, for the banner: a plain attribute (the loaders add to it), in place of
    the protocol's read-only default."""

    def __init__(self, core: WhisperCore, *, final_options: DecodeOptions = FINAL,
                 partial_options: DecodeOptions = PARTIAL, max_waiting: int = 256,
                 max_waiting_partials: int = 32, max_waiting_per_session: int = 8,
                 final_workers: int = 0, description: str = "whisper") -> None:
        self.core = core
        self.final_options = final_options
        self.partial_options = partial_options
        self.max_waiting = max_waiting
        self.max_waiting_partials = max_waiting_partials
        self.max_waiting_per_session = max_waiting_per_session
        self.description = description
        self.jobs_run = 0
        self.jobs_skipped = 0
        self._urgent: FairQueue[_Job] = FairQueue()
        self._finals: FairQueue[_Job] = FairQueue()
        self._partials: deque[_Job] = deque()
        self._partial_by_key: dict[Hashable, _Job] = {}
        self._wake = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name="whisper-worker", daemon=True)]
        # a worker that takes no partials: the words a turn waits on never queue behind one
        self._threads += [threading.Thread(target=self._work, args=(False,), name=f"whisper-finals-{index}",
                                           daemon=True) for index in range(final_workers)]
        for thread in self._threads:
            thread.start()

    # -- the async face ---------------------------------------------------------------------------

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """Final transcript of a whole clip (16 kHz mono); empty or too-short audio gives ``""``."""
        return await self._submit(audio, language, prompt, self.final_options, key=None, partial=False)

    async def transcribe_partial(self, audio: Float32Audio, *, language: str | None = None,
                                 prompt: str | None = None, key: Hashable | None = None) -> Transcript:
        """A quick transcript of the speech so far; finals go first, and with a ``key`` (the session)
        only the newest waiting partial of that key is run."""
        return await self._submit(audio, language, prompt, self.partial_options, key=key, partial=True)

    def transcribe_sync(self, audio: Float32Audio, *, language: str | None = None, prompt: str | None = None,
                        options: DecodeOptions | None = None) -> Transcript:
        """Blocking recognition on the caller's thread (warm-up, benches); not for the event loop."""
        return self.core.transcribe(audio, language=language, prompt=prompt, options=options or self.final_options)

    async def aclose(self) -> None:
        """Stop the workers after the jobs they are running; waiting callers get :class:`RecognizerClosed`."""
        with self._wake:
            self._closed = True
            abandoned = [*self._urgent.drain(), *self._finals.drain(), *self._partials]
            self._partials.clear()
            self._partial_by_key.clear()
            self._wake.notify_all()
        for job in abandoned:
            self._resolve(job, None, RecognizerClosed("the recognizer was closed"))
        for thread in self._threads:
            await asyncio.to_thread(thread.join)

    @property
    def languages(self) -> frozenset[str]:
        """The language codes the loaded model can transcribe; a session asking for another gets an error."""
        return self.core.languages

    @property
    def capabilities(self) -> ASRCapabilities:
        """A quick partial path of its own, and the model's languages."""
        return ASRCapabilities(partial=True, languages=self.core.languages)

    @property
    def waiting(self) -> int:
        """Jobs queued and not yet started (a gauge for /metrics)."""
        return len(self._urgent) + len(self._finals) + len(self._partials)

    @property
    def queue_depth(self) -> int:
        """The ``bargein_queue_depth`` gauge reads this: recognitions waiting."""
        return self.waiting

    # -- the queue --------------------------------------------------------------------------------

    async def _submit(self, audio: Float32Audio, language: str | None, prompt: str | None,
                      options: DecodeOptions, *, key: Hashable | None, partial: bool) -> Transcript:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Transcript] = loop.create_future()
        # copy: the caller's buffer may be reused while the job waits
        clip = np.array(audio, dtype=np.float32, copy=True).reshape(-1)
        with self._wake:
            if self._closed:
                raise RecognizerClosed("the recognizer is closed")
            waiting = self._partial_by_key.get(key) if partial and key is not None else None
            if waiting is not None:  # the same session's older partial has not started: run the newer audio
                waiting.audio, waiting.language, waiting.prompt = clip, language, prompt
                waiting.waiters.append((loop, future))
            else:
                job = _Job(clip, language, prompt, options, key, [(loop, future)])
                if partial:
                    if len(self._partials) >= self.max_waiting_partials:
                        raise RecognizerBusy(f"{len(self._partials)} partial transcriptions are already waiting")
                    self._partials.append(job)
                    if key is not None:
                        self._partial_by_key[key] = job
                else:
                    session, finals = owner(), len(self._finals) + len(self._urgent)
                    if finals >= self.max_waiting or (session is not None and self._finals.waiting(session)
                                                      + self._urgent.waiting(session) >= self.max_waiting_per_session):
                        raise RecognizerBusy(f"{finals} final transcriptions are already waiting")
                    (self._urgent if urgent() else self._finals).put(session, job)
                self._wake.notify_all()  # a finals-only worker woken for a partial would leave it waiting
        return await future

    def _next_job(self, partials: bool) -> _Job | None:
        with self._wake:
            while not self._closed and not self._urgent and not self._finals and not (partials and self._partials):
                self._wake.wait()
            if self._closed:
                return None
            if self._urgent:
                return self._urgent.pop()[1]
            if self._finals:
                return self._finals.pop()[1]
            job = self._partials.popleft()
            if job.key is not None:
                self._partial_by_key.pop(job.key, None)
            return job

    def _work(self, partials: bool = True) -> None:
        while (job := self._next_job(partials)) is not None:
            if not job.wanted():
                with self._wake:
                    self.jobs_skipped += 1
                continue
            try:
                result = self.core.transcribe(job.audio, language=job.language, prompt=job.prompt,
                                              options=job.options)
            except Exception as error:  # reaches the waiting session as an error; the worker lives on
                log.exception("whisper transcription failed")
                self._resolve(job, None, error)
            else:
                with self._wake:
                    self.jobs_run += 1
                self._resolve(job, result, None)

    @staticmethod
    def _resolve(job: _Job, result: Transcript | None, error: BaseException | None) -> None:
        for loop, future in job.waiters:
            with contextlib.suppress(RuntimeError):  # that caller's loop has closed: nobody to tell
                loop.call_soon_threadsafe(_settle, future, result, error)


def load_whisper(name: str | WhisperSource = "tiny.en", *, allow_network: bool = False,
                 cache_dir: Path | None = None, cpu_threads: int = 2, decoder_threads: int | None = 1,
                 compute_type: str = "int8", final_options: DecodeOptions = FINAL,
                 partial_options: DecodeOptions = PARTIAL, warm_up: bool = True) -> WhisperRecognizer:
    """Verify, load and warm up a Whisper model; blocking (seconds), so run it at start-up.

    ``name`` is a registry name (``tiny.en``, ``base``), a local CTranslate2 folder, or (with
    ``allow_network``) a hub id. A weight file that fails its pinned sha256 raises
    :class:`~bargein.weights.WeightError` before anything is loaded. The encoder runs on
    ``cpu_threads``; with another ``decoder_threads`` the weights are loaded a second time for the decoder
    (:attr:`WhisperCore.decoder`), and finals take the encoder's threads instead where a timing at start-up
    found them faster (:mod:`.wide_decoding`); None decodes on the encoder's threads.
    """
    from faster_whisper import WhisperModel  # heavy import, only when a real model is wanted

    model_dir = resolve_model(name, allow_network=allow_network, cache_dir=cache_dir)
    def loaded(threads: int, workers: int = 1) -> WhisperModel:
        return WhisperModel(str(model_dir.path), device="cpu", compute_type=compute_type, cpu_threads=threads,
                            num_workers=workers, local_files_only=True)

    model = loaded(cpu_threads)
    threads = f"{cpu_threads} threads"
    decoder = None
    if decoder_threads is not None and decoder_threads != cpu_threads:
        # two decoders share the weights: a final decodes while a partial does
        decoder = loaded(decoder_threads, workers=2)
        threads = f"{cpu_threads} threads encoding, {decoder_threads} decoding, finals beside partials"
    core = WhisperCore(model, decoder, encoder_threads=cpu_threads)
    recognizer = WhisperRecognizer(core, final_options=final_options,
                                   partial_options=partial_options, final_workers=1 if decoder else 0,
                                   description=f"{model_dir.origin}, {compute_type}, {threads}")
    if warm_up:
        # the first call allocates CTranslate2's buffers; pay for it now, not on the first user turn
        tone = np.sin(np.arange(LISTEN_SAMPLE_RATE, dtype=np.float32) * (2 * np.pi * 220 / LISTEN_SAMPLE_RATE))
        clip = (0.1 * tone).astype(np.float32)
        # both decoder workers at once, so each has its buffers before a turn needs it
        second = threading.Thread(target=recognizer.transcribe_sync, args=(clip,)) if decoder else None
        if second is not None:
            second.start()
        recognizer.transcribe_sync(clip)
        if second is not None:
            second.join()
        if decoder is not None and final_options.widens:
            speed_up = core.measure_wide_decoding(clip)
            where = (f"on {cpu_threads} threads when uncontended" if core.wide.faster
                     else f"on the decoder copy's {decoder_threads} thread(s)")
            log.info("whisper: finals decode %s (%.2fx as fast on %d threads at start-up)",
                     where, speed_up, cpu_threads)
            recognizer.description += f", finals decoded {where}"
    return recognizer
