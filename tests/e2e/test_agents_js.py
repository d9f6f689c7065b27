"""The ``@openai/agents-realtime`` JavaScript SDK under Node, unmodified, as a bargein client: a spoken turn
makes the model call the agent's function tool, the SDK runs it and the reply uses its result.

Needs Node and ``npm ci --prefix tests/js``; skipped otherwise. Fake ASR/LLM/TTS (named as such), real
server and Silero VAD; every raw server event the SDK received is validated against the GA union.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from tests.support.realtime_client import SERVER_EVENT
from tests.support.server import running_server
from tests.support.traffic import record_traffic, weather_turn

CLIENT_DIR = Path(__file__).resolve().parents[1] / "js"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (CLIENT_DIR / "node_modules" / "@openai" / "agents-realtime").is_dir(),
    reason="needs node and `npm ci --prefix tests/js`")


async def test_agents_realtime_js_calls_a_function_tool_over_a_spoken_turn(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    traffic = record_traffic(monkeypatch)
    engines, llm, pcm_file = weather_turn(tmp_path)
    with running_server(engines) as host:
        process = await asyncio.create_subprocess_exec(
            "node", str(CLIENT_DIR / "agents_realtime_client.mjs"), f"ws://{host}/v1/realtime", str(pcm_file),
            cwd=CLIENT_DIR, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    lines = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    assert process.returncode == 0, stderr.decode()[-2000:]
    traffic.validate()  # every event both ways, as the server saw them
    assert "response.function_call_arguments.done" in traffic.types()
    assert "function_call_output" in [e.get("item", {}).get("type") for e in traffic.client]
    assert not [line["error"] for line in lines if "error" in line]
    server = [line["server"] for line in lines if "server" in line]
    for event in server:
        SERVER_EVENT.validate_python(event)
    assert not [e for e in server if e["type"].startswith("bargein.") or e["type"] == "error"]
    assert [line["tool"] for line in lines if "tool" in line] == [{"name": "get_weather", "city": "Paris"}]
    assert [m.content for m in llm.seen[-1] if m.role == "tool"] == ["It is sunny in Paris."]
    transcripts = [e["transcript"] for e in server if e["type"] == "response.output_audio_transcript.done"]
    assert transcripts[-1] == "The tool said: It is sunny in Paris.."
