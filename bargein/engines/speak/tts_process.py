"""Speech synthesis in a supervised worker process, so a crash in onnxruntime costs one clause, not the server.

:class:`ProcessSynthesizer` is a :class:`~bargein.engines.base.SpeechSynthesizer` whose every clause is
one request to an :class:`~bargein.engines.process.supervisor.EngineProcess`, streamed back chunk by chunk;
:class:`SynthesizerService` is the worker's side and runs the voice a spec builds (Kokoro) with its own
fair executor, so sessions take turns sentence by sentence in the worker as they do in process.

The worker tells its voice's names when it is ready (:func:`~bargein.engines.speak.voice_list.voice_listing`),
so a session naming a voice it cannot speak is refused here as it is with the voice in process.

A worker that dies fails the clause it was speaking with :class:`~bargein.engines.process.wire.WorkerDied`;
the resilience layer has flite speak that clause instead (and the next ones, while the worker restarts:
a clause waits at most ``ready_wait_s`` for it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from bargein.engines.base import SpeechSynthesizer
from bargein.engines.process.child import EngineService
from bargein.engines.process.client import ProcessClient
from bargein.engines.process.supervisor import EngineProcess, python_worker
from bargein.engines.process.wire import WorkerSpec
from bargein.engines.speak.voice_list import ListedVoices, voice_listing
from bargein.values import CancelToken, SpeechChunk


class ProcessSynthesizer(ProcessClient, ListedVoices):
    """A :class:`~bargein.engines.base.SpeechSynthesizer` served by a supervised worker process; its
    ``voices`` (None when the worker's voice lists none) are those the worker said when it was ready."""

    def __init__(self, spec: WorkerSpec, *, name: str = "tts", start_timeout_s: float = 300.0,
                 ready_wait_s: float = 0.5) -> None:
        self.process = EngineProcess(
            python_worker(WorkerSpec("bargein.engines.speak.tts_process:SynthesizerService", {"voice": spec}), name),
            name=name, start_timeout_s=start_timeout_s, ready_wait_s=ready_wait_s, stage="tts")
        self.sample_rate = int(self.process.info["sample_rate"])

    def _voice_listing(self) -> Mapping[str, Any]:
        """The worker's voice listing, from its ready message."""
        return self.process.info  # the current worker's: a restarted one says it again

    @property
    def description(self) -> str:
        """The worker's voice, for the start-up banner."""
        return f"{self.process.info.get('description', 'speech synthesis')}, in a supervised worker process"

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Speak one clause, chunk by chunk as the worker makes them; stop at once on ``cancel``."""
        if not text.strip():
            return
        async for chunk in self.process.stream((text, voice, speed), cancel):
            yield chunk


class SynthesizerService(EngineService):
    """The worker's side: the voice ``voice`` builds, one clause per request."""

    def __init__(self, voice: WorkerSpec) -> None:
        engine, self.what = voice.build_engine()
        self.engine: SpeechSynthesizer = engine

    def describe(self) -> dict[str, Any]:
        """Sent with ``ready``: the sample rate every chunk has, a banner, and the voice's names (for the
        sessions' check of the voice they ask for)."""
        return {"sample_rate": self.engine.sample_rate, "description": self.what, **voice_listing(self.engine)}

    async def handle(self, request: tuple[str, str | None, float], cancel: CancelToken) -> AsyncIterator[SpeechChunk]:
        """The clause's chunks."""
        text, voice, speed = request
        async for chunk in self.engine.synthesize(text, voice=voice, cancel=cancel, speed=speed):
            yield chunk
