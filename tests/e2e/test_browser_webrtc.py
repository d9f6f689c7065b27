"""The page over real WebRTC: Chromium with a fake microphone places a call to aiortc on loopback.

The same two LibriVox utterances as ``test_browser.py``: the first starts a turn, the second starts while the reply
still plays. Over WebRTC the reply is a media track, so the checks read the track's receive statistics (its audio
energy) and the server's ``output_audio_buffer`` events; the server cuts the reply itself (the page sends no
truncate). The fallback tests take WebRTC away and check the page lands on the WebSocket and says so.

Needs Debian's ``chromium`` and ``pocketsphinx-testdata`` packages and the ``playwright`` Python package.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bargein.config import Settings
from testdata.speech import librivox_reference
from tests.e2e.test_browser import (
    CHROMIUM,
    FIRST,
    SECOND,
    browser_engines,
    chromium_args,
    connect_with_camera,
    write_fake_microphone,
)
from tests.e2e.test_browser_client import INSTRUMENT
from tests.support.server import free_port, running_server

pytestmark = pytest.mark.slow

ENERGY = "window.bargeinTest.rtcStats().then((s) => (s ? s.totalAudioEnergy : 0))"
# The fake voice is a 220 Hz tone at amplitude 0.2: its energy grows by 0.02 a second while it plays.
TONE_ENERGY_PER_S = 0.2**2 / 2


@pytest.fixture
def server() -> Iterator[str]:
    """The real ASGI app on a free loopback port (local-only mode: no key), engines as in test_browser.py."""
    with running_server(browser_engines()) as address:
        yield address


def _browser(playwright: Any, microphone: Path) -> Any:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(microphone))


def test_page_talks_over_webrtc_and_a_barge_in_stops_the_reply(server: str, tmp_path: Path) -> None:
    """WebRTC by default: transcripts, the reply on the track, camera frames on the data channel, and the server's
    cut on barge-in silences the track and marks the transcript."""
    from playwright.sync_api import sync_playwright

    microphone = tmp_path / "microphone.wav"
    write_fake_microphone(microphone)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with sync_playwright() as playwright:
        browser = _browser(playwright, microphone)
        try:
            page = browser.new_page()
            page_errors: list[str] = []
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            connect_with_camera(page, server, transport="webrtc")
            assert page.evaluate("window.bargeinTest.transport") == "WebRTC"
            assert page.inner_text("#transport") == "WebRTC"

            page.wait_for_function("window.bargeinTest.transcripts.user.some((u) => u.final)", timeout=20_000)
            assert page.evaluate("window.bargeinTest.transcripts.user")[0]["final"] == librivox_reference(FIRST)
            page.wait_for_function("window.bargeinTest.events['output_audio_buffer.started'] >= 1", timeout=20_000)
            page.wait_for_function(f"{ENERGY}.then((e) => e > {TONE_ENERGY_PER_S * 0.3})", timeout=10_000)
            assert page.evaluate("window.bargeinTest.turns[0].firstAudioMs") > 0
            check_the_words_show_as_heard(page)

            check_the_server_cut_the_reply(page)

            page.wait_for_function(
                "window.bargeinTest.transcripts.user.filter((u) => u.final).length >= 2", timeout=20_000)
            user = page.evaluate("window.bargeinTest.transcripts.user.filter((u) => u.final)")
            assert user[1]["final"] == librivox_reference(SECOND)
            page.wait_for_function("window.bargeinTest.events['output_audio_buffer.started'] >= 2", timeout=20_000)
            assert page.evaluate("window.bargeinTest.imagesSent") >= 1
            assert page.evaluate("window.bargeinTest.errors") == []
            assert page_errors == []
        finally:
            browser.close()


FIRST_REPLY = "window.bargeinTest.transcripts.agent[0]"
NOT_YET_HEARD = "(document.querySelector('.msg.agent .pending')?.textContent ?? '')"


def check_the_words_show_as_heard(page: Any) -> None:
    """While the reply plays, the words the track has not played yet are shown as not yet heard (the page's grey
    part, as over the WebSocket), placed by the audio the server says it queued, and the heard part grows."""
    page.wait_for_function(f"{FIRST_REPLY} && {FIRST_REPLY}.heard.length > 0 && {NOT_YET_HEARD}.length > 0",
                           timeout=10_000)
    before = page.evaluate(FIRST_REPLY)
    assert before["receivedMs"] > 0 and before["cutMs"] is None
    assert 0 < len(before["heard"]) < len(before["text"]) and before["text"].startswith(before["heard"])
    page.wait_for_timeout(250)
    after = page.evaluate(FIRST_REPLY)
    if after["cutMs"] is None:  # not yet cut by the second utterance
        assert len(after["heard"]) > len(before["heard"]), (before, after)


def check_the_server_cut_the_reply(page: Any) -> None:
    """The second utterance interrupts: the server clears its output and truncates; the track goes quiet."""
    page.wait_for_function("window.bargeinTest.events['output_audio_buffer.cleared'] >= 1", timeout=20_000)
    assert page.get_attribute("#agent-state", "data-state") == "interrupted"  # the user is still talking
    page.wait_for_timeout(300)  # what was already in the jitter buffer plays out
    before = page.evaluate(ENERGY)
    page.wait_for_timeout(700)
    after = page.evaluate(ENERGY)
    # while it played the track gained 0.014 in 0.7 s; once cut, at most a tenth of that
    assert after - before < 0.1 * TONE_ENERGY_PER_S * 0.7, (before, after)
    page.wait_for_function("window.bargeinTest.truncatedAcks.length > 0", timeout=10_000)
    ack = page.evaluate("window.bargeinTest.truncatedAcks[0]")
    assert page.evaluate("window.bargeinTest.truncates") == []  # the server cut it: the page sent no truncate
    item = ack["item_id"]
    # the page asks the server which words it kept, and shows exactly those as heard
    page.wait_for_function(f"{item!r} in window.bargeinTest.heardByServer", timeout=10_000)
    kept = page.evaluate(f"window.bargeinTest.heardByServer[{item!r}]")
    agent = page.evaluate(f"window.bargeinTest.transcripts.agent.find((a) => a.itemId === {item!r})")
    assert agent["cutMs"] == ack["audio_end_ms"] > 0
    assert kept and agent["heard"] == kept
    assert len(agent["heard"]) < len(agent["text"])


NO_WEBRTC = "delete window.RTCPeerConnection;"
# ICE that can never complete: only relay candidates, and there is no TURN server.
NO_ICE = """(() => {
  const Base = window.RTCPeerConnection;
  window.RTCPeerConnection = class extends Base {
    constructor(config) { super({ ...(config ?? {}), iceTransportPolicy: 'relay' }); }
  };
})();"""


@pytest.mark.parametrize(("init_script", "reason"), [(NO_WEBRTC, "no WebRTC"), (NO_ICE, "no connection within")],
                         ids=["no-peer-connection", "ice-never-connects"])
def test_page_falls_back_to_the_websocket_and_says_so(server: str, init_script: str, reason: str) -> None:
    """Without WebRTC (or when ICE does not connect within seconds) the session opens on the WebSocket."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = _browser(playwright, Path(os.devnull))
        try:
            page = browser.new_page()
            page.add_init_script(init_script)
            page.goto(f"http://{server}/")
            started = time.monotonic()
            page.click("#connect")
            page.wait_for_function("window.bargeinTest.state === 'connected'", timeout=15_000)
            assert time.monotonic() - started < 10
            assert page.evaluate("window.bargeinTest.transport") == "WebSocket"
            assert reason in page.evaluate("window.bargeinTest.fallbackReason")
            assert page.inner_text("#transport") == "WebSocket (WebRTC failed)"
            assert page.evaluate("window.bargeinTest.events['session.created']") == 1
            assert page.evaluate("window.bargeinTest.errors") == []
        finally:
            browser.close()


def test_a_refused_key_or_a_spent_secret_is_not_retried_on_the_websocket() -> None:
    """With keys configured, a wrong key is refused by the calls endpoint and shown; the right one calls. A client
    secret is spent by the answered call: when its ICE then fails, the page says so instead of falling back."""
    from playwright.sync_api import sync_playwright

    settings = Settings(port=free_port(), api_keys=["sk-browser-test"])
    with running_server(browser_engines(), settings) as address, sync_playwright() as playwright:
        browser = _browser(playwright, Path(os.devnull))
        try:
            page = browser.new_page()
            page.goto(f"http://{address}/")
            page.fill("#api-key", "sk-wrong")
            page.click("#connect")
            page.wait_for_function("window.bargeinTest.state === 'closed'", timeout=10_000)
            errors = page.evaluate("window.bargeinTest.errors")
            assert [(e["source"], e["code"]) for e in errors] == [("webrtc", 401)]
            assert page.evaluate("window.bargeinTest.transport") == "WebRTC"  # no fallback was tried

            page.fill("#api-key", "sk-browser-test")
            page.click("#connect")
            page.wait_for_function("window.bargeinTest.state === 'connected'", timeout=10_000)
            assert page.evaluate("window.bargeinTest.transport") == "WebRTC"

            minted = httpx.post(f"http://{address}/v1/realtime/client_secrets", json={}, timeout=10,
                                headers={"Authorization": "Bearer sk-browser-test"})
            page.add_init_script(NO_ICE)
            page.reload()
            page.fill("#api-key", minted.json()["value"])
            page.click("#connect")
            page.wait_for_function("window.bargeinTest.state === 'closed'", timeout=15_000)
            errors = page.evaluate("window.bargeinTest.errors")
            assert len(errors) == 1 and "spent the client secret" in errors[0]["message"], errors
            assert page.evaluate("window.bargeinTest.transport") == "WebRTC"
        finally:
            browser.close()


def test_disconnect_while_the_call_is_placed_lets_the_microphone_go(server: str) -> None:
    """Disconnect pressed while the offer is still unanswered ends the attempt at once: no fallback, the
    microphone and the audio graph are let go, and the next Connect calls again."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = _browser(playwright, Path(os.devnull))
        try:
            page = browser.new_page()
            page.add_init_script(INSTRUMENT)
            held: list[Any] = []
            page.route("**/v1/realtime/calls*", lambda route: held.append(route))  # held: never answered
            page.goto(f"http://{server}/")
            page.click("#connect")
            page.wait_for_function("window.__liveTracks('audio').length === 1", timeout=10_000)
            page.wait_for_timeout(300)
            assert len(held) == 1 and page.evaluate("window.bargeinTest.state") == "connecting"
            page.click("#disconnect")
            page.wait_for_function("window.bargeinTest.state === 'closed'", timeout=5_000)
            page.wait_for_timeout(300)
            assert page.evaluate("window.__liveTracks()") == []
            assert page.evaluate("window.__openContexts()") == 0
            assert page.evaluate("window.bargeinTest.transport") == "WebRTC"  # no fallback for a Disconnect
            assert page.evaluate("window.bargeinTest.errors") == []
            held[0].abort()
            page.unroute("**/v1/realtime/calls*")
            page.click("#connect")
            page.wait_for_function("window.bargeinTest.state === 'connected'", timeout=10_000)
            assert page.evaluate("window.bargeinTest.transport") == "WebRTC"
        finally:
            browser.close()
