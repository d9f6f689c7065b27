"""The browser page end to end: Chromium with a fake microphone talks to the real server through the page.

The fake microphone plays two real LibriVox utterances: the first starts a turn, the second starts while the
agent's reply is still playing, so the page must clear its playback worklet and send
``conversation.item.truncate`` with the position it actually reached.

Needs Debian's ``chromium`` and ``pocketsphinx-testdata`` packages and the ``playwright`` Python package (which
drives the system Chromium; no browser download).
"""

from __future__ import annotations

import os
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bargein.audio.codecs import float_to_int16
from bargein.audio.resample import resample
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from testdata.speech import librivox_clip, librivox_reference
from tests.support.server import free_port, running_server

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FIRST, SECOND = "0880", "0930"  # "he was not an ill disposed young man", "he might even have been made amiable..."
LEAD_S = 1.0  # silence before the first utterance: the page connects while the fake device is already running
GAP_S = 2.5  # from the end of the first utterance to the start of the second: the agent is speaking by then
# A long reply (the fake TTS speaks 60 ms per character), so the second utterance lands in the middle of it.
FILLER = ("That is an interesting thought, and I would like to answer it at some length so that there is "
          "plenty of time to interrupt me while I am still talking about it.")


def write_fake_microphone(path: Path, *, lead_s: float = LEAD_S, gap_s: float = GAP_S) -> None:
    """Two utterances with silence around them, as 48 kHz stereo pcm16 (what the fake device plays best)."""
    rate = 48_000

    def silence(seconds: float) -> np.ndarray:
        return np.zeros(int(seconds * rate), np.float32)

    first = resample(librivox_clip(FIRST), 16_000, rate)
    second = resample(librivox_clip(SECOND), 16_000, rate)
    mono = np.concatenate([silence(lead_s), first, silence(gap_s), second, silence(30.0)])
    stereo = np.repeat(float_to_int16(mono)[:, None], 2, axis=1)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(2)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(stereo.tobytes())


def browser_engines() -> Engines:
    """Real Silero VAD (it decides when speech starts and stops); deterministic fake ASR, LLM and TTS."""
    return Engines(
        SileroVad(),
        FakeRecognizer([librivox_reference(FIRST), librivox_reference(SECOND)]),
        FakeLanguageModel(filler=FILLER),
        FakeSynthesizer(),
        description={"vad": "silero", "asr": "fake", "llm": "fake", "tts": "fake"},
    )


@pytest.fixture
def server() -> Iterator[str]:
    """The real ASGI app on a free loopback port (local-only mode: no key)."""
    with running_server(browser_engines()) as address:
        yield address


def chromium_args(microphone: Path) -> list[str]:
    """Headless Chromium with fake media devices and nothing that reaches the network."""
    return [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}%noloop",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--autoplay-policy=no-user-gesture-required",
        "--allow-loopback-in-peer-connection",  # WebRTC to the server on loopback on a machine with only lo
    ]


def test_page_talks_listens_and_is_interrupted(server: str, tmp_path: Path) -> None:
    """Transcript shown, agent audio played, barge-in clears playback and truncates at the played position."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    microphone = tmp_path / "microphone.wav"
    write_fake_microphone(microphone)
    ARTIFACTS.mkdir(exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(microphone))
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page_errors: list[str] = []
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            connect_with_camera(page, server)

            # 1. The first utterance is recognised and its transcript reaches the page.
            page.wait_for_function("window.bargeinTest.transcripts.user.some((u) => u.final)", timeout=20_000)
            user = page.evaluate("window.bargeinTest.transcripts.user")
            assert user[0]["final"] == librivox_reference(FIRST)

            # 2. The agent's reply is played by the playback worklet.
            page.wait_for_function("window.bargeinTest.samplesPlayed > 2400", timeout=20_000)
            first_turn = page.evaluate("window.bargeinTest.turns[0]")
            assert first_turn["firstAudioMs"] is not None and first_turn["firstAudioMs"] > 0

            # 3. and 4. The second utterance interrupts it, and playback stops where the truncate says.
            cut_item = check_cut_where_played(page)

            # 5. The interrupting utterance gets its own transcript and a reply that plays.
            page.wait_for_function(
                "window.bargeinTest.transcripts.user.filter((u) => u.final).length >= 2", timeout=20_000)
            page.wait_for_function(
                f"Object.entries(window.bargeinTest.playedByItem).some(([id, n]) => id !== {cut_item!r} && n > 0)",
                timeout=20_000)
            user = page.evaluate("window.bargeinTest.transcripts.user.filter((u) => u.final)")
            assert user[1]["final"] == librivox_reference(SECOND)
            page.wait_for_timeout(1500)  # a little more of the reply, for the screenshot

            # Camera frames went out as input_image items, and the server took them without complaint.
            assert page.evaluate("window.bargeinTest.imagesSent") >= 1
            errors = page.evaluate("window.bargeinTest.errors")
            assert errors == [], errors
            assert page_errors == [], page_errors
            page.screenshot(path=str(ARTIFACTS / "browser.png"), full_page=True)
        finally:
            browser.close()


def connect_with_camera(page: Any, server: str, transport: str = "websocket") -> None:
    """Open the page (a camera frame every 2 s) on ``transport``, wait for the server, turn the camera and frames
    on, connect. The talk test pins the WebSocket: its truncate checks are the page's own cut, which over WebRTC
    the server makes (test_browser_webrtc.py)."""
    page.goto(f"http://{server}/?frame_ms=2000&transport={transport}")
    page.wait_for_function("document.getElementById('server-ready').dataset.state === 'ready'")
    page.click("#camera")
    page.check("#send-frames")
    page.click("#connect")
    page.wait_for_function("window.bargeinTest.state === 'connected'", timeout=10_000)


def check_cut_where_played(page: Any) -> str:
    """Check the barge-in's truncate (steps 3 and 4 of the talk test) and return the cut item's id."""
    # 3. The second utterance interrupts it: playback is cleared and the played position is truncated.
    page.wait_for_function("window.bargeinTest.truncatedAcks.length > 0", timeout=20_000)
    hook: dict[str, Any] = page.evaluate(
        "({truncate: bargeinTest.lastTruncate, acks: bargeinTest.truncatedAcks})")
    truncate = hook["truncate"]
    cut_item: str = truncate["item_id"]
    assert truncate["sent"]
    assert 0 < truncate["audio_end_ms"] <= truncate["received_ms"]
    # The server received it: it answers with the same position (it would clamp one past the item's end).
    assert hook["acks"][0] == {"item_id": cut_item, "audio_end_ms": truncate["audio_end_ms"]}
    # The reply was still going, so part of it was never played.
    assert truncate["unplayed_ms"] > 0 or truncate["received_ms"] > truncate["audio_end_ms"]

    # 4. Playback of the cut item stopped where the truncate says, and stays stopped.
    page.wait_for_timeout(600)
    played_ms = page.evaluate(f"window.bargeinTest.playedByItem[{cut_item!r}]") / 24.0
    assert abs(played_ms - truncate["audio_end_ms"]) < 5.0
    agent = page.evaluate(f"window.bargeinTest.transcripts.agent.find((a) => a.itemId === {cut_item!r})")
    assert agent["cutMs"] == truncate["audio_end_ms"]
    assert len(agent["heard"]) < len(agent["text"])
    return cut_item


def test_page_fits_a_phone(server: str) -> None:
    """At 360 px nothing scrolls sideways: every panel fits the width."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(Path(os.devnull)))
        try:
            page = browser.new_page(viewport={"width": 360, "height": 740})
            page.goto(f"http://{server}/")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 360
        finally:
            browser.close()


def test_page_authenticates_with_the_key_typed_in() -> None:
    """With keys configured, a wrong key is refused and shown as an error; the right one opens the session."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    settings = Settings(port=free_port(), api_keys=["sk-browser-test"])
    with running_server(browser_engines(), settings) as address, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(Path(os.devnull)))
        try:
            page = browser.new_page()
            page.goto(f"http://{address}/?transport=websocket")  # WebRTC's refusal: test_browser_webrtc.py
            page.fill("#api-key", "sk-wrong")
            page.click("#connect")
            page.wait_for_function("window.bargeinTest.state === 'closed'", timeout=10_000)
            errors = page.evaluate("window.bargeinTest.errors")
            assert errors and errors[-1]["source"] == "socket"
            assert page.locator("#errors li").count() >= 1

            page.fill("#api-key", "sk-browser-test")
            page.click("#connect")
            page.wait_for_function("window.bargeinTest.state === 'connected'", timeout=10_000)
            assert page.evaluate("window.bargeinTest.events['session.created']") == 1
        finally:
            browser.close()


RESAMPLER_PROBE = """async () => {
  const { StreamResampler } = await import('/resampler.js');
  const { charsAt } = await import('/transcript.js');
  function run(inRate, outRate, freq, chunk) {
    const r = new StreamResampler(inRate, outRate);
    const x = new Float32Array(inRate);  // one second
    for (let i = 0; i < x.length; i++) x[i] = 0.5 * Math.sin(2 * Math.PI * freq * i / inRate);
    const parts = [];
    for (let i = 0; i < x.length; i += chunk) parts.push(r.push(x.subarray(i, i + chunk)));
    parts.push(r.flush());
    const y = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
    let o = 0;
    for (const p of parts) { y.set(p, o); o += p.length; }
    let err = 0, power = 0, sq = 0;
    for (let j = 500; j < outRate - 500; j++) {
      const ideal = 0.5 * Math.sin(2 * Math.PI * freq * j / outRate);
      err += (y[j] - ideal) ** 2; power += ideal ** 2; sq += y[j] ** 2;
    }
    return { length: y.length, snrDb: 10 * Math.log10(power / err), rms: Math.sqrt(sq / (outRate - 1000)) };
  }
  return {
    down: run(48000, 24000, 1000, 128),
    alias: run(48000, 24000, 15000, 128),
    odd: run(44100, 24000, 3000, 441),
    up: run(24000, 48000, 3000, 480),
    chars: [charsAt([{ms: 0, chars: 0}, {ms: 1000, chars: 10}], 3000, 30, 500),
            charsAt([{ms: 0, chars: 0}, {ms: 0, chars: 10}], 2000, 20, 1000)],
  };
}"""


def test_worklet_resampler_and_transcript_mapping(server: str) -> None:
    """The worklets' resampler keeps speech-band tones, removes what would alias, and drops no samples."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(Path(os.devnull)))
        try:
            page = browser.new_page()
            page.goto(f"http://{server}/")
            result = page.evaluate(RESAMPLER_PROBE)
        finally:
            browser.close()
    for name, rate in (("down", 24_000), ("odd", 24_000), ("up", 48_000)):
        assert abs(result[name]["length"] - rate) <= 2, (name, result[name])  # one second in, one second out
        assert result[name]["snrDb"] > 60, (name, result[name])
    # 15 kHz cannot exist at 24 kHz: without the low-pass it would fold down to 9 kHz at full level.
    assert result["alias"]["rms"] < 0.005, result["alias"]
    # Halfway through a clause's audio, halfway through its text; text that raced ahead spreads over the audio.
    assert result["chars"] == [5, 10]


def test_page_shows_a_builtin_tool_the_server_ran(tmp_path: Path) -> None:
    """The page asks for bargein's events, so a built-in tool call shows in its transcript."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    # the words ground the call (a call resting on nothing the user said is not run: tools/grounding.py)
    engines = Engines(SileroVad(), FakeRecognizer(["What is seventeen times twenty three?"]),
                      FakeLanguageModel(calls={"times": ("calculate", '{"expression": "17 * 23"}')}),
                      FakeSynthesizer())
    microphone = tmp_path / "microphone.wav"
    write_fake_microphone(microphone)
    with running_server(engines) as address, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(microphone))
        try:
            page = browser.new_page()
            page.goto(f"http://{address}/")
            page.wait_for_function("document.getElementById('server-ready').dataset.state === 'ready'")
            page.click("#connect")
            tool = page.wait_for_selector(".msg.tool", timeout=30_000)
            assert tool is not None
            assert tool.inner_text().endswith('calculate({"expression": "17 * 23"}) → 17 * 23 = 391')
            page.wait_for_function("window.bargeinTest.transcripts.agent.some((a) => a.text.includes('391'))",
                                   timeout=20_000)
            assert page.evaluate("window.bargeinTest.errors") == []
        finally:
            browser.close()
