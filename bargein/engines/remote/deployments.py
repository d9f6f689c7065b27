"""The Ray Serve deployments: one application per stage, each replica holding that stage's engine.

Each replica builds its engine from the same :class:`~bargein.config.Settings` (and the same loaders)
as an in-process server would, so a stage behaves the same wherever it runs; it receives only the settings
its stage reads (:data:`STAGE_SETTINGS`), never a key: an LLM stage that calls an OpenAI-compatible server
takes that server's key from its own environment (``BARGEIN_LLM_API_KEY`` on the Ray nodes). Only the VAD is batched
with ``@serve.batch``: Silero is a pure step function over explicit per-stream state, so frames of
every session on every bargein worker can share one inference (35 to 40 us a frame in batches of 32
against 90 us alone). Whisper, llama.cpp and Kokoro keep their own queues and threads inside the
replica (their engines already serialise and interleave requests); to serve more, add replicas.

Streams (LLM tokens, TTS chunks) are Serve generators: the caller cancels the generator when its
reply is cancelled, and the replica stops at the next token or chunk.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from ray import serve

from bargein.config import Settings, Stage
from bargein.engines.speak.voice_list import voice_listing
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, SpeechChunk, Transcript

log = logging.getLogger(__name__)

VadRequest = tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]
"""One stream's frame (512 samples), context (64) and recurrent state (2 x 128)."""
VAD_MAX_BATCH = 256
VAD_BATCH_WAIT_S = 0.002
"""How long the first frame of a batch waits for more: 2 ms of a 32 ms frame."""
STAGE_SETTINGS: dict[Stage, frozenset[str]] = {
    "vad": frozenset({"engines"}),
    "asr": frozenset({"engines", "asr_model", "language", "mandarin"}),
    "llm": frozenset({"engines", "llm_model", "llm_url", "llm_sequences"}),
    "tts": frozenset({"engines", "tts_engine", "language", "mandarin"}),
}
"""The settings each stage's replicas read; nothing else of the server's settings reaches the cluster."""


def stage_settings_json(settings: Settings, stage: Stage) -> str:
    """What a ``stage`` replica is deployed with: its settings, as JSON."""
    return settings.model_dump_json(include=set(STAGE_SETTINGS[stage]))


def replica_settings(settings_json: str) -> Settings:
    """A replica's settings: those it was deployed with, the rest from its own environment (a key, say)."""
    return Settings(**json.loads(settings_json))


@serve.deployment(max_ongoing_requests=1024)
class VadDeployment:
    """Silero VAD, batched across every caller's streams."""

    def __init__(self, settings_json: str) -> None:
        from bargein.engines.listen.silero_vad import SileroModel

        self.settings = replica_settings(settings_json)
        self.model = SileroModel()

    def describe(self) -> dict[str, str]:
        """What this replica serves (checked by the caller at start-up)."""
        return {"stage": "vad", "model": "silero-vad-v5"}

    @serve.batch(max_batch_size=VAD_MAX_BATCH, batch_wait_timeout_s=VAD_BATCH_WAIT_S)
    async def step(self, requests: list[VadRequest]) -> list[tuple[float, npt.NDArray[np.float32]]]:
        """Run one frame of each request in one inference; return each probability and new state."""
        frames = np.stack([frame for frame, _context, _state in requests])
        contexts = np.stack([context for _frame, context, _state in requests])
        states = np.stack([state for _frame, _context, state in requests], axis=1)
        probabilities, new_states = self.model.step(frames, contexts, states)
        return [(float(probabilities[index]), new_states[:, index, :].copy()) for index in range(len(requests))]


@serve.deployment(max_ongoing_requests=64)
class AsrDeployment:
    """Speech recognition (Whisper, or the fake with ``engines`` fake/instant)."""

    def __init__(self, settings_json: str) -> None:
        from bargein.engines.loaders import load_asr

        self.settings = replica_settings(settings_json)
        self.engine, self.origin = load_asr(self.settings)

    def describe(self) -> dict[str, str]:
        """What this replica serves (checked by the caller at start-up)."""
        model = "fake" if self.settings.engines != "default" else self.settings.asr_model
        return {"stage": "asr", "model": model, "origin": self.origin}

    async def transcribe(self, audio: npt.NDArray[np.float32], language: str | None,
                         prompt: str | None) -> Transcript:
        """One clip, as the in-process recogniser would transcribe it."""
        return await self.engine.transcribe(audio, language=language, prompt=prompt)


@serve.deployment(max_ongoing_requests=64)
class LlmDeployment:
    """The language model (embedded llama.cpp, an OpenAI-compatible server, or the fake)."""

    def __init__(self, settings_json: str) -> None:
        from bargein.engines.loaders import load_llm

        self.settings = replica_settings(settings_json)
        self.engine, self.origin = load_llm(self.settings)

    def describe(self) -> dict[str, Any]:
        """What this replica serves, and whether it can be offered tools (checked by the caller at start-up)."""
        model = "fake" if self.settings.engines != "default" else self.settings.llm_model
        return {"stage": "llm", "model": model, "origin": self.origin,
                "tools": self.engine.capabilities.tools}

    async def stream(self, messages: Sequence[ChatMessage], options: GenerationOptions | None) -> AsyncIterator[str]:
        """Tokens of the reply; stops when the caller cancels the generator."""
        cancel = CancelToken()
        try:
            async for token in self.engine.stream(messages, cancel=cancel, options=options):
                yield token
        finally:
            cancel.cancel("caller gone")

    async def stream_reply(self, messages: Sequence[ChatMessage],
                           options: GenerationOptions | None) -> AsyncIterator[ReplyPiece]:
        """Reply text and tool calls (only for an engine that takes tools)."""
        if not self.engine.capabilities.tools:
            raise TypeError(f"{self.origin} cannot be offered tools")
        cancel = CancelToken()
        try:
            async for piece in self.engine.stream_reply(messages, cancel=cancel, options=options):
                yield piece
        finally:
            cancel.cancel("caller gone")


@serve.deployment(max_ongoing_requests=64)
class TtsDeployment:
    """Speech synthesis (Kokoro, flite, or the fake)."""

    def __init__(self, settings_json: str) -> None:
        from bargein.engines.loaders import load_tts

        self.settings = replica_settings(settings_json)
        self.engine, self.origin = load_tts(self.settings)

    def describe(self) -> dict[str, Any]:
        """What this replica serves, its sample rate (checked by the caller at start-up), and its voices'
        names (the caller's sessions refuse a voice it cannot speak)."""
        model = "fake" if self.settings.engines != "default" else self.settings.tts_engine
        return {"stage": "tts", "model": model, "origin": self.origin, "sample_rate": self.engine.sample_rate,
                **voice_listing(self.engine)}

    async def synthesize(self, text: str, voice: str | None, speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Chunks of speech; stops when the caller cancels the generator."""
        cancel = CancelToken()
        try:
            async for chunk in self.engine.synthesize(text, voice=voice, cancel=cancel, speed=speed):
                yield chunk
        finally:
            cancel.cancel("caller gone")


DEPLOYMENTS: dict[Stage, Any] = {"vad": VadDeployment, "asr": AsrDeployment, "llm": LlmDeployment,
                                 "tts": TtsDeployment}


def app_name(settings: Settings, stage: Stage) -> str:
    """The Serve application that runs ``stage``."""
    return f"{settings.ray_app_prefix}-{stage}"


def deploy(settings: Settings, stages: Sequence[Stage], replicas: dict[str, int] | None = None) -> None:
    """Run each stage's application on the connected Ray cluster (replacing an older version)."""
    serve.start(proxy_location="Disabled")
    for stage in stages:
        count = (replicas or {}).get(stage, 1)
        deployment = DEPLOYMENTS[stage].options(num_replicas=count, ray_actor_options={"num_cpus": 0})
        serve.run(deployment.bind(stage_settings_json(settings, stage)), name=app_name(settings, stage),
                  route_prefix=None)
        log.info("Ray Serve application %s: %d replica(s)", app_name(settings, stage), count)
