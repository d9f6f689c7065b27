"""A scripted telephony provider: the Twilio Media Streams side of a phone call, for tests and benchmarks.

It behaves as the provider does: ``connected`` then ``start``, the caller's audio as 20 ms mu-law ``media``
frames sent in real time (silence when the script has nothing to say), and a phone that plays the server's
``media`` in real time, echoing each ``mark`` once the audio before it has played. A ``clear`` empties what is
queued to play and echoes the marks it dropped at once (as a provider may: bargein must not count them). Every
send, play, echo and clear is logged with its monotonic time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import tempfile
import threading
import time
import wave
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn

from bargein.audio.codecs import AudioFormat, float_to_int16
from bargein.audio.resample import resample
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.server.app import ServerState, create_app
from bargein.server.serving import server_config

FRAME_BYTES = 160
FRAME_S = 0.020
MULAW = AudioFormat("audio/pcmu", 8_000)
MULAW_SILENCE = b"\xff" * FRAME_BYTES


@contextmanager
def phone_server(engines: Engines, settings: Settings | None = None) -> Iterator[tuple[str, ServerState]]:
    """A real uvicorn server on a free loopback port, in a thread of this process, and its state (whose live
    sessions a test or a benchmark reads: the history is not on the phone line)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    settings = settings.model_copy(update={"port": port}) if settings is not None else Settings(port=port)
    app = create_app(settings, engines)
    server = uvicorn.Server(server_config(app, settings, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    else:
        raise RuntimeError("the phone server did not start")
    try:
        yield f"127.0.0.1:{port}", app.state.bargein
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def spoken_mulaw(text: str, *, voice: str = "en-us") -> bytes:
    """``text`` spoken by espeak-ng, as 8 kHz mu-law in whole 20 ms frames (what a phone line carries)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True, capture_output=True)
        with wave.open(str(path)) as handle:
            rate = handle.getframerate()
            samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    audio = resample(samples.astype(np.float32) / 32768.0, rate, 8_000)
    payload = MULAW.encode(float_to_int16(audio))
    return payload + MULAW_SILENCE[:(-len(payload)) % FRAME_BYTES]


def speech_onset_frame(payload: bytes, threshold: float = 0.02) -> int:
    """The first 20 ms frame of ``payload`` whose level is speech (RMS over ``threshold`` of full scale)."""
    for index in range(len(payload) // FRAME_BYTES):
        samples = MULAW.decode(payload[index * FRAME_BYTES:(index + 1) * FRAME_BYTES]).astype(np.float32) / 32768
        if float(np.sqrt(np.mean(np.square(samples)))) >= threshold:
            return index
    raise ValueError("no speech in the payload")


@dataclass
class PhoneLog:
    """What passed on the line, with monotonic times."""

    sent_at: list[float] = field(default_factory=list)
    """When caller frame ``k`` left."""
    media_received: int = 0
    played: list[tuple[float, str | None]] = field(default_factory=list)
    """(time, the mark that followed the frame, if any) per frame the phone played."""
    echoed: list[tuple[float, str, bool]] = field(default_factory=list)
    """(time, mark name, played: False when a ``clear`` dropped it) per echo sent."""
    clears: list[float] = field(default_factory=list)
    other: list[dict[str, Any]] = field(default_factory=list)

    def last_played_mark_before(self, when: float) -> str | None:
        """The newest mark echoed as played before ``when``."""
        names = [name for at, name, played in self.echoed if played and at <= when]
        return names[-1] if names else None


class ScriptedProvider:
    """Drives one call over an open WebSocket (``websockets`` client connection)."""

    def __init__(self, ws: Any, stream_sid: str = "MZ00000000000000000000000000000001", *,
                 jitter_buffer_s: float = 0.0) -> None:
        self.ws = ws
        self.jitter_buffer_s = jitter_buffer_s
        """How long a frame waits in the phone's buffer before it may play (a provider's jitter buffer and the
        network: the caller hears the reply this much later than the server's real-time estimate says)."""
        self.stream_sid = stream_sid
        self.log = PhoneLog()
        self._caller: deque[bytes] = deque()
        self._phone: deque[tuple[float, list[str]]] = deque()
        """Frames waiting to play: when each arrived, and the marks that followed it."""
        self._tasks: list[asyncio.Task[None]] = []
        self._progress = asyncio.Event()

    async def begin(self, parameters: dict[str, str] | None = None) -> None:
        """``connected`` and ``start``, then the caller's microphone, the phone's speaker and the reader run."""
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send({"event": "start", "sequenceNumber": "1", "streamSid": self.stream_sid, "start": {
            "streamSid": self.stream_sid, "accountSid": "AC0", "callSid": "CA0", "tracks": ["inbound"],
            "customParameters": parameters or {},
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
        self._tasks = [asyncio.create_task(self._microphone()), asyncio.create_task(self._speaker()),
                       asyncio.create_task(self._reader())]

    def say(self, payload: bytes) -> int:
        """Queue caller audio after what is queued; returns the index of its first frame."""
        start = len(self.log.sent_at) + len(self._caller)
        self._caller.extend(payload[i:i + FRAME_BYTES] for i in range(0, len(payload), FRAME_BYTES))
        return start

    async def wait_sent(self, frame: int, timeout: float = 60.0) -> float:
        """When caller frame ``frame`` left (waiting for it)."""
        deadline = time.monotonic() + timeout
        while len(self.log.sent_at) <= frame:
            if time.monotonic() > deadline:
                raise TimeoutError(f"caller frame {frame} was not sent")
            self._progress.clear()
            await asyncio.wait_for(self._progress.wait(), timeout)
        return self.log.sent_at[frame]

    async def wait_played_ms(self, ms: float, timeout: float = 60.0) -> None:
        """Until the phone has played ``ms`` of the server's audio."""
        deadline = time.monotonic() + timeout
        while len(self.log.played) * FRAME_S * 1000 < ms:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the phone played {len(self.log.played) * 20} ms, not {ms:g}")
            await asyncio.sleep(0.01)

    async def wait_clear(self, after: float, timeout: float = 10.0) -> float:
        """The time of the first ``clear`` received after ``after``."""
        deadline = time.monotonic() + timeout
        while not any(at >= after for at in self.log.clears):
            if time.monotonic() > deadline:
                raise TimeoutError("no clear came")
            await asyncio.sleep(0.002)
        return next(at for at in self.log.clears if at >= after)

    async def stop(self) -> None:
        """``stop``, as the provider sends when the caller hangs up; the tasks end."""
        await self._send({"event": "stop", "sequenceNumber": "0", "streamSid": self.stream_sid,
                          "stop": {"accountSid": "AC0", "callSid": "CA0"}})
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def _microphone(self) -> None:
        began = time.monotonic()
        while True:
            frame = self._caller.popleft() if self._caller else MULAW_SILENCE
            await self._send({"event": "media", "streamSid": self.stream_sid, "media": {
                "track": "inbound", "chunk": str(len(self.log.sent_at) + 1),
                "timestamp": str(len(self.log.sent_at) * 20), "payload": base64.b64encode(frame).decode()}})
            self.log.sent_at.append(time.monotonic())
            self._progress.set()
            await asyncio.sleep(max(0.0, began + len(self.log.sent_at) * FRAME_S - time.monotonic()))

    async def _speaker(self) -> None:
        began = time.monotonic()
        ticks = 0
        while True:
            ticks += 1
            await asyncio.sleep(max(0.0, began + ticks * FRAME_S - time.monotonic()))
            if not self._phone or self._phone[0][0] > time.monotonic() - self.jitter_buffer_s:
                continue
            _, marks = self._phone.popleft()
            now = time.monotonic()
            self.log.played.append((now, marks[-1] if marks else None))
            for name in marks:
                await self._echo(name, played=True)

    async def _echo(self, name: str, *, played: bool) -> None:
        self.log.echoed.append((time.monotonic(), name, played))
        await self._send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})

    async def _reader(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            match message.get("event"):
                case "media":
                    self.log.media_received += 1
                    base64.b64decode(message["media"]["payload"], validate=True)
                    self._phone.append((time.monotonic(), []))
                case "mark":
                    name = message["mark"]["name"]
                    if self._phone:
                        self._phone[-1][1].append(name)
                    else:  # nothing left to play: echoed at once
                        await self._echo(name, played=True)
                case "clear":
                    self.log.clears.append(time.monotonic())
                    dropped = [name for _, marks in self._phone for name in marks]
                    self._phone.clear()
                    for name in dropped:
                        await self._echo(name, played=False)
                case _:
                    self.log.other.append(message)
