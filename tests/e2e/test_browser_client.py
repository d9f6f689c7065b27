"""The page's own client logic against a scripted Realtime server (Playwright's WebSocket routing).

No bargein server runs here: the page's files are served from disk, ``/healthz`` and ``/v1/realtime`` are answered
by the test, so each test sends exactly the server events it needs, in the order it needs. The page's
``getUserMedia`` and ``AudioContext`` are wrapped (init script) so a test can see whether the microphone, the
camera and the audio graph were really let go.

Needs Debian's ``chromium`` and the ``playwright`` Python package (no browser download).
"""

from __future__ import annotations

import base64
import json
import math
import os
import struct
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_browser import CHROMIUM, chromium_args

pytestmark = pytest.mark.slow

STATIC = Path(__file__).resolve().parents[2] / "bargein" / "web" / "static"

INSTRUMENT = """
(() => {
  window.__media = [];
  window.__gumDelay = { audio: 0, video: 0 };
  const md = navigator.mediaDevices;
  const original = md.getUserMedia.bind(md);
  md.getUserMedia = async (constraints) => {
    const delay = constraints && constraints.video ? window.__gumDelay.video : window.__gumDelay.audio;
    if (delay) await new Promise((r) => setTimeout(r, delay));
    const stream = await original(constraints);
    window.__media.push(stream);
    return stream;
  };
  window.__contexts = [];
  const Base = window.AudioContext;
  window.AudioContext = class extends Base {
    constructor(...args) { super(...args); window.__contexts.push(this); }
  };
  window.__liveTracks = (kind) => window.__media.flatMap((s) => s.getTracks())
    .filter((t) => t.readyState === 'live' && (!kind || t.kind === kind))
    .map((t) => ({ kind: t.kind, enabled: t.enabled }));
  window.__openContexts = () => window.__contexts.filter((c) => c.state !== 'closed').length;
})();
"""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def static_site() -> Iterator[str]:
    """The page's files over plain http on loopback (a secure context: worklets and getUserMedia work)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(STATIC)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


class FakeRealtime:
    """The scripted server: every socket the page opens, and every client event it sent."""

    def __init__(self, *, created: bool = True) -> None:
        self.sockets: list[Any] = []
        self.received: list[dict[str, Any]] = []
        self.created = created

    def handler(self, ws: Any) -> None:
        self.sockets.append(ws)
        ws.on_message(lambda message: self.received.append(json.loads(message)))
        if self.created:
            self.send({"type": "session.created", "session": {"id": f"sess_{len(self.sockets)}", "type": "realtime",
                                                              "audio": {"input": {"transcription": None}}}})

    def send(self, event: dict[str, Any]) -> None:
        self.sockets[-1].send(json.dumps(event))

    def sent(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.received if e.get("type") == kind]


def tone(ms: int, rate: int = 24_000) -> str:
    """``ms`` of a 440 Hz tone, pcm16 at 24 kHz, base64 (one audio delta)."""
    n = rate * ms // 1000
    pcm = struct.pack(f"<{n}h", *(int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(n)))
    return base64.b64encode(pcm).decode()


@pytest.fixture
def browser_page(request: pytest.FixtureRequest, static_site: str) -> Iterator[tuple[Any, FakeRealtime]]:
    """The page with the scripted server; ``indirect`` False leaves the page's sockets unrouted (real ones)."""
    route_sockets = getattr(request, "param", True)
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    fake = FakeRealtime()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(Path(os.devnull)))
        try:
            page = browser.new_page()
            page.add_init_script(INSTRUMENT)
            page.route("**/healthz", lambda route: route.fulfill(json={"ready": True}))
            if route_sockets:
                page.route_web_socket("**/v1/realtime**", fake.handler)
            page.goto(f"http://{static_site}/?frame_ms=200&transport=websocket")  # the scripted server is a socket
            yield page, fake
        finally:
            browser.close()


def connect(page: Any) -> None:
    page.click("#connect")
    page.wait_for_function("window.bargeinTest.state === 'connected'", timeout=10_000)
    page.wait_for_function("window.__liveTracks('audio').length === 1", timeout=10_000)


@pytest.mark.parametrize("browser_page", [False], indirect=True, ids=["real-socket"])
def test_a_socket_that_cannot_open_lets_the_microphone_go(browser_page: tuple[Any, FakeRealtime]) -> None:
    """A key the browser refuses as a subprotocol makes ``new WebSocket`` throw (the routed socket of the other
    tests does not check, hence a real one): the attempt has failed, so the microphone it opened must stop (and
    the audio graph close), or the browser shows it recording with no session; the next attempt opens one."""
    page, _ = browser_page
    for attempt in (1, 2):
        page.fill("#api-key", "sk-pasted with a space")
        page.click("#connect")
        page.wait_for_function("window.bargeinTest.state === 'failed'", timeout=10_000)
        page.wait_for_function(f"window.__media.length === {attempt}", timeout=10_000)
        page.wait_for_timeout(300)
        assert page.evaluate("window.__liveTracks()") == []
        assert page.evaluate("window.__openContexts()") == 0
        assert not page.is_disabled("#connect")
        assert page.is_disabled("#mute")


def test_mute_holds_across_a_reconnect(browser_page: tuple[Any, FakeRealtime]) -> None:
    """The button says the microphone is muted: a new session must not send the user's voice anyway."""
    page, _ = browser_page
    connect(page)
    page.click("#mute")
    assert page.evaluate("window.__liveTracks('audio')") == [{"kind": "audio", "enabled": False}]
    page.click("#disconnect")
    page.wait_for_function("window.bargeinTest.state === 'closed'", timeout=10_000)
    connect(page)
    pressed = page.get_attribute("#mute", "aria-pressed")
    tracks = page.evaluate("window.__liveTracks('audio')")
    assert len(tracks) == 1
    assert tracks[0]["enabled"] == (pressed != "true"), (pressed, tracks)


def test_mute_pressed_while_connecting_applies(browser_page: tuple[Any, FakeRealtime]) -> None:
    """Mute is enabled from the click on Connect; pressed before the microphone is granted, it must still hold."""
    page, _ = browser_page
    page.evaluate("window.__gumDelay.audio = 600")
    page.click("#connect")
    page.click("#mute")
    assert page.get_attribute("#mute", "aria-pressed") == "true"
    page.wait_for_function("window.bargeinTest.state === 'connected'", timeout=10_000)
    assert page.evaluate("window.__liveTracks('audio')") == [{"kind": "audio", "enabled": False}]


def test_disconnect_while_connecting_stops_the_attempt(browser_page: tuple[Any, FakeRealtime]) -> None:
    """Disconnect is enabled while connecting (the microphone prompt may be up): pressing it must end the attempt,
    not leave a session opening behind the user's back."""
    page, fake = browser_page
    page.evaluate("window.__gumDelay.audio = 600")
    page.click("#connect")
    assert not page.is_disabled("#disconnect")
    page.click("#disconnect")
    page.wait_for_timeout(1500)
    assert page.evaluate("window.bargeinTest.state") != "connected"
    assert fake.sockets == []
    assert page.evaluate("window.__liveTracks()") == []
    assert page.evaluate("window.__openContexts()") == 0
    assert not page.is_disabled("#connect")
    assert page.is_disabled("#disconnect")
    assert page.evaluate("window.bargeinTest.errors") == []


def test_camera_turned_off_is_off_even_after_a_double_click(browser_page: tuple[Any, FakeRealtime]) -> None:
    """Two quick clicks on "Camera on" must not open two cameras, one of which "Camera off" forgets."""
    page, _ = browser_page
    page.evaluate("window.__gumDelay.video = 300")
    page.evaluate("() => { const b = document.getElementById('camera'); b.click(); b.click(); }")
    page.wait_for_timeout(1200)
    if page.get_attribute("#camera", "aria-pressed") == "true":
        page.click("#camera")
        page.wait_for_timeout(300)
    assert page.get_attribute("#camera", "aria-pressed") == "false"
    assert page.evaluate("window.__liveTracks('video')") == []
    info = page.inner_text("#camera-info")
    page.wait_for_timeout(600)  # frames every 200 ms: none may be taken once the camera is off
    assert page.inner_text("#camera-info") == info


def test_camera_turned_off_while_starting_stays_off(browser_page: tuple[Any, FakeRealtime]) -> None:
    """Off pressed before the camera was granted wins: no stream is left running, no frame is taken."""
    page, _ = browser_page
    connect(page)
    page.check("#send-frames")
    page.evaluate("window.__gumDelay.video = 500")
    page.click("#camera")
    page.click("#camera", force=True)  # the user changes their mind at once (the button may be busy meanwhile)
    page.wait_for_timeout(1500)
    state = page.get_attribute("#camera", "aria-pressed")
    live = page.evaluate("window.__liveTracks('video')")
    if state == "true":  # the second click was refused while starting: turning it off now must work
        assert len(live) == 1
        page.click("#camera")
        page.wait_for_timeout(300)
    assert page.evaluate("window.__liveTracks('video')") == []
    sent = page.evaluate("window.bargeinTest.imagesSent")
    page.wait_for_timeout(600)
    assert page.evaluate("window.bargeinTest.imagesSent") == sent


def test_a_cut_reply_plays_nothing_more(browser_page: tuple[Any, FakeRealtime]) -> None:
    """After a barge-in the cut item's late events (its audio, its ``output_audio.done``) play nothing: the
    played position the truncate reported stays the item's last."""
    page, fake = browser_page
    connect(page)
    _reply_playing(page, fake, played_samples=12_000)
    fake.send({"type": "input_audio_buffer.speech_started", "item_id": "item_u", "audio_start_ms": 100})
    page.wait_for_function("window.bargeinTest.truncates.length === 1", timeout=10_000)
    truncate = page.evaluate("window.bargeinTest.lastTruncate")
    fake.send({"type": "response.output_audio.delta", "response_id": "resp_1", "item_id": "item_a",
               "delta": tone(200)})
    fake.send({"type": "response.output_audio.done", "response_id": "resp_1", "item_id": "item_a"})
    page.wait_for_timeout(500)
    assert page.evaluate("window.bargeinTest.playedByItem['item_a']") == truncate["played24k"]
    sent = fake.sent("conversation.item.truncate")
    assert [(e["item_id"], e["audio_end_ms"]) for e in sent] == [("item_a", truncate["audio_end_ms"])]
    assert abs(truncate["audio_end_ms"] - truncate["played24k"] / 24) <= 1


def _reply_playing(page: Any, fake: FakeRealtime, *, played_samples: int = 4800) -> None:
    """Reply ``resp_1`` (item ``item_a``, 3 s of tone) created and playing, past ``played_samples`` at 24 kHz."""
    fake.send({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}})
    fake.send({"type": "response.output_item.added", "response_id": "resp_1",
               "item": {"id": "item_a", "type": "message", "role": "assistant"}})
    fake.send({"type": "response.output_audio.delta", "response_id": "resp_1", "item_id": "item_a",
               "delta": tone(3000)})
    page.wait_for_function(f"(window.bargeinTest.playedByItem['item_a'] ?? 0) > {played_samples}", timeout=10_000)


def test_in_confirm_mode_a_short_sound_over_a_live_reply_lets_it_play_on(
        browser_page: tuple[Any, FakeRealtime]) -> None:
    """After a storm of barge-ins the server is in confirm mode: speech over a live reply must last before it
    pauses it, and a cough lets the reply go on (no ``bargein.reply.resumed`` follows, since nothing paused). The
    page used to cut playback at every ``speech_started``, so the rest of the reply was silenced for good."""
    page, fake = browser_page
    connect(page)
    fake.send({"type": "bargein.turn.mode", "mode": "confirm", "reason": "3 barge-ins within 10 s"})
    _reply_playing(page, fake)
    fake.send({"type": "input_audio_buffer.speech_started", "item_id": "item_u", "audio_start_ms": 100})
    played = page.evaluate("window.bargeinTest.playedByItem['item_a']")
    page.wait_for_function(f"window.bargeinTest.playedByItem['item_a'] > {played + 4800}", timeout=10_000)
    assert not fake.sent("conversation.item.truncate"), "nothing cut for speech the server let go"
    fake.send({"type": "bargein.reply.paused", "response_id": "resp_1", "item_id": "item_a", "audio_end_ms": 900})
    page.wait_for_function("window.bargeinTest.truncates.length === 1", timeout=10_000)  # long enough: cut now
    assert [e["item_id"] for e in fake.sent("conversation.item.truncate")] == ["item_a"]


def test_in_normal_mode_speech_over_a_reply_cuts_it_at_once(browser_page: tuple[Any, FakeRealtime]) -> None:
    page, fake = browser_page
    connect(page)
    _reply_playing(page, fake)
    fake.send({"type": "input_audio_buffer.speech_started", "item_id": "item_u", "audio_start_ms": 100})
    page.wait_for_function("window.bargeinTest.truncates.length === 1", timeout=10_000)


REMOTE_PLAYBACK_PROBE = """async () => {
  const { RemotePlayback } = await import('/remote-playback.js');
  const msgs = [];
  const playback = new RemotePlayback((m) => msgs.push(m), () => 40);
  const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const playedMs = () => msgs.filter((m) => m.type === 'cursor').at(-1).items.i1 / 24;
  const queue = (from, to) => playback.observe(
    { type: 'bargein.reply.audio', response_id: 'r1', item_id: 'i1', audio_start_ms: from, audio_end_ms: to });
  playback.observe({ type: 'response.output_item.added', response_id: 'r1', item: { id: 'i1', type: 'message' } });
  queue(0, 400);
  const t0 = performance.now();
  playback.observe({ type: 'output_audio_buffer.started', response_id: 'r1' });
  await wait(150);
  playback.tick();
  const playing = { ms: playedMs(), elapsed: performance.now() - t0 };
  await wait(150);
  playback.observe({ type: 'bargein.reply.paused', response_id: 'r1', item_id: 'i1' });
  const paused = playedMs();
  await wait(200);
  const stillPaused = playedMs();
  playback.observe({ type: 'bargein.reply.resumed', response_id: 'r1', item_id: 'i1', audio_start_ms: 250 });
  queue(250, 2250);
  await wait(200);
  playback.observe({ type: 'output_audio_buffer.stopped', response_id: 'r1' });
  const stopped = playedMs();
  playback.observe({ type: 'conversation.item.truncated', item_id: 'i1', audio_end_ms: 123 });
  return { playing, paused, stillPaused, stopped, truncated: playedMs(),
    started: msgs.filter((m) => m.type === 'started').map((m) => m.at - t0),
    drained: msgs.filter((m) => m.type === 'drained').map((m) => m.itemId),
    received: msgs.filter((m) => m.type === 'received').reduce((n, m) => n + m.ms, 0) };
}"""


def test_the_webrtc_playback_estimate_follows_the_servers_events(browser_page: tuple[Any, FakeRealtime]) -> None:
    """Over WebRTC the page has no playback cursor: remote-playback.js runs one on the server's events (the audio
    it queued, started, the storm guard's pause and resume, stopped, a truncation), as the worklet would report
    it."""
    page, _ = browser_page
    result = page.evaluate(REMOTE_PLAYBACK_PROBE)
    # timers fire late on a busy machine, never early: lower bounds are tight, upper bounds loose
    assert len(result["started"]) == 1 and 40 <= result["started"][0] < 200  # the jitter buffer's delay counted
    # while it plays, the caller hears what the track sent less the jitter buffer's 40 ms
    assert 100 <= result["playing"]["ms"] <= result["playing"]["elapsed"] - 39
    assert 290 <= result["paused"] <= 400  # never past the 400 ms the server queued
    assert result["stillPaused"] == result["paused"]  # nothing plays while paused
    assert 440 <= result["stopped"] < 1000  # resumed from the server's 250 ms
    assert result["drained"] == ["i1"]
    assert result["truncated"] == 123  # the server's word is final
    # audio arrived as the server queued it: 400 ms, then from the resume at 250 ms to 2250 ms
    assert result["received"] == 400 + 2000


UNDERRUN_PROBE = """async () => {
  const { RemotePlayback } = await import('/remote-playback.js');
  const msgs = [];
  const playback = new RemotePlayback((m) => msgs.push(m), () => 0);
  const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const playedMs = () => msgs.filter((m) => m.type === 'cursor').at(-1).items.i1 / 24;
  const queue = (from, to) => playback.observe(
    { type: 'bargein.reply.audio', response_id: 'r1', item_id: 'i1', audio_start_ms: from, audio_end_ms: to });
  queue(0, 100);
  playback.observe({ type: 'output_audio_buffer.started', response_id: 'r1' });
  await wait(300);
  playback.tick();
  const starved = playedMs();
  const t1 = performance.now();
  queue(100, 1100);
  await wait(200);
  playback.tick();
  const fed = { ms: playedMs(), elapsed: performance.now() - t1 };
  playback.reset();
  return { starved, fed };
}"""


def test_the_webrtc_cursor_waits_while_the_track_has_nothing_queued(browser_page: tuple[Any, FakeRealtime]) -> None:
    """The track sends silence when the reply's audio runs short (the speech engine behind real time): the cursor
    stops at the audio queued, and runs on in real time from there once more comes."""
    page, _ = browser_page
    result = page.evaluate(UNDERRUN_PROBE)
    assert result["starved"] == 100
    assert 100 + 190 <= result["fed"]["ms"] <= 100 + result["fed"]["elapsed"] + 1
