"""``@openai/agents-realtime``'s WebRTC transport (``OpenAIRealtimeWebRTC``), unmodified, in Chromium against bargein.

The SDK's own browser bundle (``dist/bundle`` of the installed package) and a small page
(``tests/js/agents_realtime_webrtc.*``) are served on bargein's origin by Playwright's routing, so the transport's
POST to ``/v1/realtime/calls`` is same-origin. It authenticates with an ephemeral key minted by bargein's
``/v1/realtime/client_secrets`` (the SDK refuses anything else in a browser). Chromium's fake microphone speaks two
LibriVox utterances: the first makes the model call the agent's ``get_weather`` tool, which the SDK runs; the second
starts while the answer that uses the tool's result is playing, and the server cuts that answer.

Needs Debian's ``chromium``, the ``playwright`` Python package and ``npm ci --prefix tests/js``; fake ASR/LLM/TTS
(named as such), real Silero VAD.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeEndOfTurn, FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from testdata.speech import librivox_reference
from tests.e2e.test_browser import CHROMIUM, FIRST, SECOND, chromium_args, write_fake_microphone
from tests.support.realtime_client import SERVER_EVENT
from tests.support.server import running_server

CLIENT_DIR = Path(__file__).resolve().parents[1] / "js"
BUNDLE = CLIENT_DIR / "node_modules" / "@openai" / "agents-realtime" / "dist" / "bundle"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not BUNDLE.is_dir(), reason="needs `npm ci --prefix tests/js`"),
]
PREFIX = "/agents-js/"  # where the route serves the page and the bundle, on bargein's origin


def engines() -> tuple[Engines, FakeLanguageModel]:
    """The first utterance holds "young": the model calls get_weather; a slow voice keeps its answer playing."""
    llm = FakeLanguageModel(token_delay_s=0.005, calls={"young": ("get_weather", '{"city": "Paris"}')})
    return Engines(SileroVad(), FakeRecognizer([librivox_reference(FIRST), librivox_reference(SECOND)]), llm,
                   # semantic_vad (the SDK's default): "unfinished" waits the long tier (1.5 s of silence), so a gap
                   # in the fake microphone's audio on a busy machine does not end the first turn half way
                   FakeSynthesizer(ms_per_char=150), FakeEndOfTurn((0.5,))), llm


def serve_files(route: Any) -> None:
    """The page's two files from tests/js, the rest from the SDK's bundle folder."""
    name = route.request.url.split(PREFIX, 1)[1].split("?", 1)[0]
    folder, name = (BUNDLE, name.removeprefix("bundle/")) if name.startswith("bundle/") else (CLIENT_DIR, name)
    path = folder / name
    if "/" in name or not path.is_file():
        route.fulfill(status=404)
        return
    kind = "text/html" if name.endswith(".html") else "text/javascript"
    route.fulfill(body=path.read_bytes(), headers={"Content-Type": kind})


def test_agents_realtime_webrtc_transport_calls_a_tool_and_is_interrupted(tmp_path: Path) -> None:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    microphone = tmp_path / "microphone.wav"
    write_fake_microphone(microphone, lead_s=2.0, gap_s=3.0)  # connecting takes a moment; then mid-answer
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    served, llm = engines()
    with running_server(served) as host, sync_playwright() as playwright:
        minted = httpx.post(f"http://{host}/v1/realtime/client_secrets", json={}, timeout=10)
        assert minted.status_code == 200, minted.text
        key = minted.json()["value"]
        assert key.startswith("ek_")
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(microphone))
        try:
            page = browser.new_page()
            page_errors: list[str] = []
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            page.route(f"**{PREFIX}**", serve_files)
            page.goto(f"http://{host}{PREFIX}agents_realtime_webrtc.html?key={key}")
            page.wait_for_function("window.agentsLog?.some((l) => 'connected' in l || 'error' in l)",
                                   timeout=15_000)
            page.wait_for_function(SECOND_REPLY_STARTED, timeout=40_000)
            log: list[dict[str, Any]] = page.evaluate("window.agentsLog")
        finally:
            browser.close()
    check_the_conversation(log, llm, page_errors)


# The reply to the interrupting utterance has begun: the second user transcript, then a response after it.
SECOND_REPLY_STARTED = """(() => {
  const events = window.agentsLog.filter((l) => l.server).map((l) => l.server);
  const heard = events.findIndex((e) => e.type === 'conversation.item.input_audio_transcription.completed'
    && e.transcript && !e.transcript.includes('young'));
  return heard >= 0 && events.slice(heard).some((e) => e.type === 'response.created');
})()"""


def check_the_conversation(log: list[dict[str, Any]], llm: FakeLanguageModel, page_errors: list[str]) -> None:
    """A tool call run by the SDK, its answer cut by the second utterance, every event a valid GA event."""
    assert [line["error"] for line in log if "error" in line] == []
    assert page_errors == []
    assert any("connected" in line for line in log)
    server = [line["server"] for line in log if "server" in line]
    for event in server:
        SERVER_EVENT.validate_python(event)
    assert [line["tool"] for line in log if "tool" in line] == [{"name": "get_weather", "city": "Paris"}]
    assert any(m.content == "It is sunny in Paris." for messages in llm.seen for m in messages if m.role == "tool")
    types = [e["type"] for e in server]
    # the answer's audio reached the <audio> element before the cut
    assert [line["energy"] > 0.005 for line in log if line.get("after") == "output_audio_buffer.cleared"] == [True]
    assert "output_audio_buffer.started" in types
    # The answer that used the tool's result was playing when the second utterance began: it was cut.
    done = [e["response"] for e in server if e["type"] == "response.done"]
    calling = [r for r in done if "function_call" in [item["type"] for item in r["output"]]]
    assert len(calling) == 1 and calling[0]["status"] == "completed"
    answer = done[done.index(calling[0]) + 1]
    assert answer["status"] == "cancelled", answer
    assert "output_audio_buffer.cleared" in types
    truncated = [e for e in server if e["type"] == "conversation.item.truncated"]
    assert truncated and truncated[0]["audio_end_ms"] > 0
    assert truncated[0]["item_id"] in [item["id"] for item in answer["output"]]
    transcripts = [e["transcript"] for e in server
                   if e["type"] == "conversation.item.input_audio_transcription.completed" and e["transcript"]]
    assert transcripts[:2] == [librivox_reference(FIRST), librivox_reference(SECOND)]
