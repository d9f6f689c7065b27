"""Pipecat 1.14's ``OpenAIRealtimeLLMService``, unmodified, holding one spoken turn with a bargein server.

Runs in its own environment (``.venv-pipecat``, made by ``scripts/setup.sh test``), not bargein's:
``python run_client.py ws://HOST/v1/realtime TURN.pcm``. It registers a ``get_weather`` function with
Pipecat, streams the 24 kHz PCM16 turn in 100 ms frames, waits for the spoken reply that uses the
function's result, and prints one JSON summary line: the function calls Pipecat ran, the spoken text,
the audio bytes and every ``ErrorFrame``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import EndFrame, ErrorFrame, Frame, InputAudioRawFrame, TTSAudioRawFrame, TTSTextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService

SAMPLE_RATE = 24_000
FRAME_BYTES = 4_800  # 100 ms of 24 kHz PCM16
REPLY_END = '"sunny in Paris"}.'  # the spoken reply ends by quoting the function's result


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


async def hold_turn(url: str, pcm: bytes) -> dict[str, Any]:
    """Run the pipeline against ``url`` for one spoken turn and return what it saw."""
    calls: list[dict[str, Any]] = []

    async def get_weather(params: FunctionCallParams) -> None:
        calls.append({"name": "get_weather", "arguments": dict(params.arguments)})
        await params.result_callback({"weather": f"sunny in {params.arguments['city']}"})

    service = OpenAIRealtimeLLMService(api_key="sk-local", base_url=url,
                                       settings=OpenAIRealtimeLLMService.Settings(model="bargein"))
    service.register_function("get_weather", get_weather)
    weather = FunctionSchema(name="get_weather", description="The weather in a city.",
                             properties={"city": {"type": "string"}}, required=["city"])
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}],
                         tools=ToolsSchema(standard_tools=[weather]))
    aggregators = LLMContextAggregatorPair(context)
    recorder = Recorder()
    task = PipelineTask(Pipeline([aggregators.user(), service, recorder, aggregators.assistant()]),
                        params=PipelineParams(audio_in_sample_rate=SAMPLE_RATE, audio_out_sample_rate=SAMPLE_RATE))
    running = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))
    await asyncio.sleep(1.0)  # connected and configured
    for offset in range(0, len(pcm), FRAME_BYTES):
        await task.queue_frames([InputAudioRawFrame(audio=pcm[offset:offset + FRAME_BYTES],
                                                    sample_rate=SAMPLE_RATE, num_channels=1)])
        await asyncio.sleep(0.1)  # real time, as a microphone would
    for _ in range(100):
        if "".join(recorder.text).endswith(REPLY_END):
            break
        await asyncio.sleep(0.1)
    await task.queue_frame(EndFrame())
    await asyncio.wait_for(running, 10)
    return {"calls": calls, "text": "".join(recorder.text), "audio_bytes": recorder.audio_bytes,
            "errors": recorder.errors}


def main() -> None:
    """Hold the turn and print its summary as one JSON line on stdout."""
    url, pcm_path = sys.argv[1], Path(sys.argv[2])
    summary = asyncio.run(hold_turn(url, pcm_path.read_bytes()))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
