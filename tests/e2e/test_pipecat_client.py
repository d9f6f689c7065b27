"""Pipecat's ``OpenAIRealtimeLLMService``, unmodified, with bargein as its self-hosted speech-to-speech
backend: a spoken turn makes the model call a function registered with Pipecat, Pipecat runs it and
sends the result back, and the spoken reply uses it.

The server runs here, in bargein's environment; Pipecat runs in its own (``.venv-pipecat``, made by
``scripts/setup.sh test``) as a subprocess executing ``tests/pipecat_client/run_client.py``, so neither
project's dependencies constrain the other's. Skipped where ``.venv-pipecat`` is absent. Fake ASR/LLM/TTS
(named as such), real server and Silero VAD.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.server import running_server
from tests.support.traffic import record_traffic, weather_turn

ROOT = Path(__file__).resolve().parents[2]
PIPECAT_PYTHON = ROOT / ".venv-pipecat" / "bin" / "python"
CLIENT = Path(__file__).resolve().parents[1] / "pipecat_client" / "run_client.py"
pytestmark = pytest.mark.skipif(not PIPECAT_PYTHON.is_file(),
                                reason="needs .venv-pipecat (Pipecat's own environment): `scripts/setup.sh test`")


async def test_pipecat_realtime_service_calls_a_function_over_a_spoken_turn(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    traffic = record_traffic(monkeypatch)
    engines, _llm, pcm_file = weather_turn(tmp_path)
    with running_server(engines) as host:
        process = await asyncio.create_subprocess_exec(
            str(PIPECAT_PYTHON), str(CLIENT), f"ws://{host}/v1/realtime", str(pcm_file),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), 90)
        except TimeoutError:
            process.kill()
            raise
    assert process.returncode == 0, stderr.decode()[-3000:]
    summaries = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    assert len(summaries) == 1, stdout.decode()[-2000:]
    summary = summaries[0]
    assert not summary["errors"]  # no ErrorFrame reached the end of Pipecat's pipeline
    traffic.validate()  # every event both ways, as the server saw them
    assert "response.function_call_arguments.done" in traffic.types()
    assert "function_call_output" in [e.get("item", {}).get("type") for e in traffic.client]
    assert summary["calls"] == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert summary["audio_bytes"] > 0
    # bargein's own VAD answered the turn before Pipecat sent its tools; Pipecat's response.create then
    # brought the call, and the reply after Pipecat's function_call_output speaks its result
    assert summary["text"].endswith('The tool said: {"weather": "sunny in Paris"}.')
