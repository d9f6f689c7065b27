"""A Pipecat voice pipeline on the same engines as bargein, for ``bench/latency/vs_pipecat.py``.

    python -m bench.latency.pipecat_server --port 8002 --llm-url http://127.0.0.1:8080/v1 --llm-model smollm2

Needs ``pipecat-ai`` (a benchmark-only dependency, kept out of bargein's own environment). One FastAPI
WebSocket endpoint, ``/ws``; each connection gets its own pipeline, the standard Pipecat cascade:

    transport in -> STT -> user aggregator (Silero VAD, turn strategies) -> OpenAI LLM -> TTS
                 -> transport out -> assistant aggregator

* VAD: Pipecat's own ``SileroVADAnalyzer``; its bundled ``silero_vad.onnx`` is checked at start to be
  byte-identical (sha256) to the file bargein pins. Threshold and endpoint silence match bargein's
  ``server_vad`` (see ``--stop-secs``). With ``--smart-turn`` the turn ends as Pipecat's users run it for
  low latency instead: its ``LocalSmartTurnAnalyzerV3`` (the bundled Smart Turn v3.2 model) judges each
  VAD stop, after ``--stop-secs`` of silence.
* STT: a small ``SegmentedSTTService`` around the recogniser bargein's engines use (same class, model
  and settings), transcribing each VAD segment as Pipecat's own Whisper service does.
* LLM: Pipecat's ``OpenAILLMService`` against the same local OpenAI-compatible server, same system
  prompt, temperature and token cap as bargein's session.
* TTS: a small ``TTSService`` around bargein's Kokoro synthesiser (same object type and settings).
* Wire: Pipecat's stock ``ProtobufFrameSerializer``: audio frames (pcm16, 16 kHz in, 24 kHz out), the
  ``InterruptionFrame`` Pipecat broadcasts when the user starts a turn, and transport messages (the
  stage metrics below) as protobuf ``Frame`` messages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (
    Frame,
    MetricsFrame,
    OutputTransportMessageUrgentFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.serializers.protobuf import ProtobufFrameSerializer
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.settings import STTSettings, TTSSettings
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.services.tts_service import TTSService
from pipecat.transcriptions.language import Language
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.turns.user_start import TranscriptionUserTurnStartStrategy, VADUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy, TurnAnalyzerUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.utils.time import time_now_iso8601
from pipecat.workers.runner import WorkerRunner

from bargein.audio.codecs import float_to_int16
from bargein.engines.base import Engines, SpeechRecognizer, SpeechSynthesizer
from bargein.values import CancelToken
from bench.latency.vs_pipecat_engines import (
    ENDPOINT_SILENCE_MS,
    INSTRUCTIONS,
    MAX_OUTPUT_TOKENS,
    TEMPERATURE,
    VAD_THRESHOLD,
    build_engines,
    pipecat_silero_path,
)

IN_RATE = 16_000
OUT_RATE = 24_000


class StageMetricsToClient(FrameProcessor):  # type: ignore[misc]
    """Forwards each service's time-to-first-byte to the client, as bargein's ledger event does."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Pass every frame on; a TTFB figure also goes out as a transport message."""
        await super().process_frame(frame, direction)
        if isinstance(frame, MetricsFrame):
            for data in frame.data:
                if isinstance(data, TTFBMetricsData) and data.value > 0:
                    message = {"type": "metrics", "stage": data.processor.split("#")[0], "ms": 1000 * data.value}
                    await self.push_frame(OutputTransportMessageUrgentFrame(message=message), direction)
        await self.push_frame(frame, direction)


class SharedRecognizerSTT(SegmentedSTTService):  # type: ignore[misc]
    """Pipecat segment STT on the recogniser bargein uses: one call per VAD segment, as WhisperSTTService."""

    def __init__(self, recognizer: SpeechRecognizer, **kwargs: Any) -> None:
        # ttfs_p99_latency is only a safety net here: every segment transcript is final, which ends the wait.
        super().__init__(sample_rate=IN_RATE, ttfs_p99_latency=1.0,
                         settings=STTSettings(model=None, language=Language.EN), **kwargs)
        self._recognizer = recognizer

    @property
    def wants_wav_segments(self) -> bool:
        """Raw pcm16, not a WAV container."""
        return False

    def can_generate_metrics(self) -> bool:
        """Report TTFB (VAD stop to final transcript) like Pipecat's own Whisper service."""
        return True

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        """Transcribe one segment (pcm16 16 kHz)."""
        samples = np.frombuffer(audio, dtype="<i2").astype(np.float32) / 32768.0
        transcript = await self._recognizer.transcribe(samples, language="en")
        if transcript.text.strip():
            yield TranscriptionFrame(transcript.text, self._user_id, time_now_iso8601(), Language.EN)


class SharedSynthesizerTTS(TTSService):  # type: ignore[misc]
    """Pipecat TTS on bargein's synthesiser: every sentence Pipecat aggregates is one synthesis call."""

    def __init__(self, synthesizer: SpeechSynthesizer, **kwargs: Any) -> None:
        super().__init__(sample_rate=OUT_RATE, push_start_frame=True, push_stop_frames=True,
                         settings=TTSSettings(model=None, voice=None, language=None), **kwargs)
        self._synthesizer = synthesizer

    def can_generate_metrics(self) -> bool:
        """Report TTFB (text in to first audio) like Pipecat's own Kokoro service."""
        return True

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Speak ``text``; when Pipecat drops the generator (an interruption) the synthesis is cancelled."""
        cancel = CancelToken()
        try:
            async for chunk in self._synthesizer.synthesize(text, voice=None, cancel=cancel):
                await self.stop_ttfb_metrics()
                yield TTSAudioRawFrame(audio=float_to_int16(chunk.audio).tobytes(), sample_rate=chunk.sample_rate,
                                       num_channels=1, context_id=context_id)
        finally:
            cancel.cancel("pipecat stopped the synthesis")


def _vad_params(stop_secs: float) -> VADParams:
    # bargein starts a turn on the first 32 ms frame at or above the threshold and has no volume gate:
    # start_secs of one frame and min_volume 0 do the same here.
    return VADParams(confidence=VAD_THRESHOLD, start_secs=0.032, stop_secs=stop_secs, min_volume=0.0)


def build_pipeline(websocket: WebSocket, engines: Engines, args: argparse.Namespace) -> PipelineWorker:
    """One connection's pipeline."""
    transport = FastAPIWebsocketTransport(websocket, FastAPIWebsocketParams(
        audio_in_enabled=True, audio_out_enabled=True, audio_in_sample_rate=IN_RATE,
        audio_out_sample_rate=OUT_RATE, add_wav_header=False, serializer=ProtobufFrameSerializer(),
        allowed_origins=[]))
    stop_secs = args.stop_secs
    # Pipecat ends a turn after VAD stop (stop_secs of silence) plus user_speech_timeout: together they
    # make bargein's endpoint silence. With Smart Turn, the model decides at the VAD stop instead.
    timeout = max(0.0, ENDPOINT_SILENCE_MS / 1000 - stop_secs)
    stop: list[Any] = [TurnAnalyzerUserTurnStopStrategy(turn_analyzer=LocalSmartTurnAnalyzerV3())] \
        if args.smart_turn else [SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=timeout)]
    strategies = UserTurnStrategies(
        start=[VADUserTurnStartStrategy(), TranscriptionUserTurnStartStrategy()], stop=stop)
    context = LLMContext()
    aggregators = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(
        vad_analyzer=SileroVADAnalyzer(sample_rate=IN_RATE, params=_vad_params(stop_secs)),
        user_turn_strategies=strategies))
    llm = OpenAILLMService(api_key="sk-local", base_url=args.llm_url, settings=OpenAILLMService.Settings(
        model=args.llm_model, system_instruction=INSTRUCTIONS, temperature=TEMPERATURE,
        max_tokens=MAX_OUTPUT_TOKENS))
    pipeline = Pipeline([transport.input(), SharedRecognizerSTT(engines.asr), aggregators.user(), llm,
                         SharedSynthesizerTTS(engines.tts), StageMetricsToClient(), transport.output(),
                         aggregators.assistant()])
    # Metrics on, as bargein's per-turn ledger is always on; RTVI off: the client does not speak it.
    worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=IN_RATE,
                                                            audio_out_sample_rate=OUT_RATE, enable_metrics=True),
                            enable_rtvi=False, idle_timeout_secs=None)

    @transport.event_handler("on_client_disconnected")  # type: ignore[untyped-decorator]
    async def _gone(_transport: Any, _socket: Any) -> None:
        await worker.cancel()

    return worker


def create_app(engines: Engines, args: argparse.Namespace) -> FastAPI:
    """The FastAPI app: ``/ws`` (one pipeline per connection) and ``/healthz``."""
    app = FastAPI(title="pipecat-bench")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(build_pipeline(websocket, engines, args))
        with contextlib.suppress(asyncio.CancelledError):
            await runner.run()

    return app


def main() -> None:
    """Load the shared engines, then serve until interrupted."""
    parser = argparse.ArgumentParser(description="Pipecat pipeline for bench/latency/vs_pipecat.py")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--llm-url", required=True)
    parser.add_argument("--llm-model", required=True)
    parser.add_argument("--stop-secs", type=float, default=0.2,
                        help="Pipecat VAD stop_secs; user_speech_timeout makes up the rest of the endpoint silence")
    parser.add_argument("--smart-turn", action="store_true",
                        help="end turns with Pipecat's Smart Turn analyzer at each VAD stop")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logger.remove()  # Pipecat logs every frame event at DEBUG: as quiet as bargein's --log-level warning
    logger.add(sys.stderr, level="WARNING")
    print(f"pipecat vad: Silero, {pipecat_silero_path().name} sha256 matches bargein's pin", flush=True)
    engines = build_engines(args.llm_url, args.llm_model)
    for stage, origin in engines.description.items():
        print(f"pipecat {stage}: {origin}", flush=True)
    uvicorn.run(create_app(engines, args), host="127.0.0.1", port=args.port, log_level="warning",
                ws_ping_interval=20, ws_ping_timeout=60)


if __name__ == "__main__":
    main()
