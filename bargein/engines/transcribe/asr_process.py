"""Speech recognition in a supervised worker process, so a crash in CTranslate2 costs one turn, not the server.

:class:`ProcessRecognizer` is a :class:`~bargein.engines.base.SpeechRecognizer` whose every call is one
request to an :class:`~bargein.engines.process.supervisor.EngineProcess`; :class:`RecognizerService` is
the worker's side and runs the recogniser a spec builds (Whisper, or the by-language router of two) with
its own fair queue, so sessions take turns in the worker as they do in process. A call carries the clip,
``language``, ``prompt``, whether it is a partial (and the session's key, so a newer partial replaces an
older one still waiting), whether it is urgent (:func:`~bargein.engines.fair.urgent_task`: the worker's
queue serves it first), and any further keyword options, which reach the recogniser's method as they are
(a model choice, for instance).

A worker that dies mid-call fails that call with :class:`~bargein.engines.process.wire.WorkerDied`; the
resilience layer turns it into "Sorry, I didn't catch that." for that turn, and the worker restarts.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bargein.engines.base import ASRCapabilities, SpeechRecognizer
from bargein.engines.fair import current_urgent, urgent
from bargein.engines.process.child import EngineService
from bargein.engines.process.client import ProcessClient
from bargein.engines.process.supervisor import EngineProcess, python_worker
from bargein.engines.process.wire import WorkerError, WorkerSpec
from bargein.values import CancelToken, Float32Audio, Transcript


@dataclass(frozen=True)
class RecognitionRequest:
    """One recognition, as it crosses the pipe."""

    audio: Float32Audio
    language: str | None = None
    prompt: str | None = None
    partial: bool = False
    key: int | None = None
    """The session's partials' key (``id`` of the caller's key object with this process's pid, as a shared
    engine serves several processes): a newer partial replaces a waiting one."""
    options: dict[str, Any] = field(default_factory=dict)
    """Further keyword arguments for the recogniser's method."""
    urgent: bool = False
    """Asked for in an :func:`~bargein.engines.fair.urgent_task`: the worker's queue serves it first."""


class ProcessRecognizer(ProcessClient, SpeechRecognizer):
    """A :class:`~bargein.engines.base.SpeechRecognizer` served by a supervised worker process."""

    def __init__(self, spec: WorkerSpec, *, name: str = "asr", start_timeout_s: float = 300.0,
                 ready_wait_s: float = 10.0) -> None:
        self.process = EngineProcess(
            python_worker(WorkerSpec("bargein.engines.transcribe.asr_process:RecognizerService",
                                     {"recognizer": spec}), name),
            name=name, start_timeout_s=start_timeout_s, ready_wait_s=ready_wait_s, stage="asr")

    @property
    def languages(self) -> frozenset[str] | None:
        """The language codes the worker's recogniser transcribes (None: it does not say)."""
        known = self.process.info.get("languages")
        return None if known is None else frozenset(known)

    @property
    def capabilities(self) -> ASRCapabilities:
        """The worker's languages; partials go to the worker, which takes its recogniser's quick path where it
        has one."""
        return ASRCapabilities(partial=True, languages=self.languages)

    @property
    def description(self) -> str:
        """The worker's recogniser, for the start-up banner."""
        return f"{self.process.info.get('description', 'speech recognition')}, in a supervised worker process"

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None, prompt: str | None = None,
                         **options: Any) -> Transcript:
        """Final transcript of a whole clip (16 kHz mono)."""
        return await self._ask(RecognitionRequest(_clip(audio), language, prompt, options=options, urgent=urgent()))

    async def transcribe_partial(self, audio: Float32Audio, *, language: str | None = None,
                                 prompt: str | None = None, key: Hashable | None = None,
                                 **options: Any) -> Transcript:
        """A quick transcript of the speech so far (the worker's recogniser's partial, where it has one)."""
        request = RecognitionRequest(_clip(audio), language, prompt, partial=True,
                                     key=None if key is None else hash((os.getpid(), id(key))), options=options)
        return await self._ask(request)

    async def _ask(self, request: RecognitionRequest) -> Transcript:
        transcript: object = None
        async for item in self.process.stream(request, CancelToken()):  # to its end: the request is then done
            transcript = item
        if not isinstance(transcript, Transcript):
            raise WorkerError(f"{self.process.name}: the worker sent {type(transcript).__name__}, not a transcript")
        return transcript


def _clip(audio: Float32Audio) -> Float32Audio:
    return np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)


class RecognizerService(EngineService):
    """The worker's side: the recogniser ``recognizer`` builds, one transcript per request."""

    cancel_task = True
    """A recognition the caller gave up on (a barge-in drops a speculative final) is cancelled in the
    worker too, so the recogniser's queue skips it if it has not started, as in process."""

    def __init__(self, recognizer: WorkerSpec) -> None:
        engine, self.what = recognizer.build_engine()
        self.engine: Any = engine  # a SpeechRecognizer; options pass to it as they came
        self.capabilities: ASRCapabilities = engine.capabilities

    def describe(self) -> dict[str, Any]:
        """Sent with ``ready``: the languages (for the sessions' ``unsupported_language`` check) and a banner."""
        languages = self.capabilities.languages
        return {"languages": None if languages is None else sorted(languages), "description": self.what}

    async def handle(self, request: RecognitionRequest, cancel: CancelToken) -> AsyncIterator[Transcript]:
        """Recognise the clip (a partial through the recogniser's partial path, where it has one)."""
        current_urgent.set(request.urgent)  # this request's own task: the recogniser's queue sees it
        if request.partial and self.capabilities.partial:
            transcript: Transcript = await self.engine.transcribe_partial(
                request.audio, language=request.language, prompt=request.prompt, key=request.key, **request.options)
        else:
            transcript = await self.engine.transcribe(request.audio, language=request.language,
                                                      prompt=request.prompt, **request.options)
        yield transcript
