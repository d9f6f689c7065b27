"""Pipecat's ``OpenAIRealtimeLLMService``, unmodified, with bargein as its self-hosted speech-to-speech
backend: a spoken turn makes the model call a function registered with Pipecat, Pipecat runs it and
sends the result back, and the spoken reply uses it.

Pipecat is a benchmark-only dependency (see docs/benchmarks.md: ``.venv-pipecat``); this test is skipped
where ``pipecat-ai`` is not installed. Fake ASR/LLM/TTS (named as such), real server and Silero VAD.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeEndOfTurn, FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from tests.support.server import running_server
from tests.support.speech import librivox_clip, pcm16_24k
from tests.support.traffic import record_traffic

pytest.importorskip("pipecat.services.openai.realtime.llm")

from pipecat.adapters.schemas.function_schema import FunctionSchema
from pipecat.adapters.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService


class Recorder(FrameProcessor):
    """Keeps what reaches the end of the pipeline: spoken text, audio, errors."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.audio_bytes = 0
        self.errors: list[str] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSTextFrame):
            self.text.append(frame.text)
        elif isinstance(frame, TTSAudioRawFrame):
            self.audio_bytes += len(frame.audio)
        elif isinstance(frame, ErrorFrame):
            self.errors.append(str(frame.error))
        await self.push_frame(frame, direction)


async def test_pipecat_realtime_service_calls_a_function_over_a_spoken_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    traffic = record_traffic(monkeypatch)
    llm_engine = FakeLanguageModel(token_delay_s=0.005, calls={"young": ("get_weather", '{"city": "Paris"}')})
    engines = Engines(SileroVad(), FakeRecognizer(("he was not an ill disposed young man",)), llm_engine,
                      FakeSynthesizer(ms_per_char=20, chunk_ms=100),
                      FakeEndOfTurn((0.99,)))  # the client asks for semantic_vad: the server needs the model
    asked: list[dict[str, Any]] = []

    async def get_weather(params: FunctionCallParams) -> None:
        asked.append(dict(params.arguments))
        await params.result_callback({"weather": f"sunny in {params.arguments['city']}"})

    with running_server(engines) as host:
        service = OpenAIRealtimeLLMService(api_key="sk-local", base_url=f"ws://{host}/v1/realtime",
                                           settings=OpenAIRealtimeLLMService.Settings(model="bargein"))
        service.register_function("get_weather", get_weather)
        weather = FunctionSchema(name="get_weather", description="The weather in a city.",
                                 properties={"city": {"type": "string"}}, required=["city"])
        context = LLMContext(messages=[{"role": "system", "content": "Be brief."}],
                             tools=ToolsSchema(standard_tools=[weather]))
        aggregators = LLMContextAggregatorPair(context)
        recorder = Recorder()
        task = PipelineTask(Pipeline([aggregators.user(), service, recorder, aggregators.assistant()]),
                            params=PipelineParams(audio_in_sample_rate=24_000, audio_out_sample_rate=24_000))
        runner = PipelineRunner(handle_sigint=False)
        running = asyncio.create_task(runner.run(task))
        await asyncio.sleep(1.0)  # connected and configured
        pcm = pcm16_24k(librivox_clip("0880"), silence_after_s=1.5)
        for offset in range(0, len(pcm), 4_800):
            await task.queue_frames([InputAudioRawFrame(audio=pcm[offset:offset + 4_800], sample_rate=24_000,
                                                        num_channels=1)])
            await asyncio.sleep(0.1)
        for _ in range(100):
            if "".join(recorder.text).endswith('"sunny in Paris"}.'):
                break
            await asyncio.sleep(0.1)
        await task.queue_frame(EndFrame())
        await asyncio.wait_for(running, 10)

    assert not recorder.errors
    traffic.validate()  # every event both ways, as the server saw them
    assert "response.function_call_arguments.done" in traffic.types()
    assert "function_call_output" in [e.get("item", {}).get("type") for e in traffic.client]
    assert asked == [{"city": "Paris"}]
    assert recorder.audio_bytes > 0
    # bargein's own VAD answered the turn before Pipecat sent its tools; Pipecat's response.create then
    # brought the call, and the reply after Pipecat's function_call_output speaks its result
    assert "".join(recorder.text).endswith('The tool said: {"weather": "sunny in Paris"}.')
